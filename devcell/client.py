"""A Python client of DevCell's HTTP API (docs/api.md): `from devcell import Client`.

    from devcell import Client

    with Client("unix:/home/ana/.devcell/api.sock") as dc:   # or "https://host:8443"
        dc.apply(open("cell.yaml").read())
        dc.wait("api", "Running", timeout=120)
        dc.snapshot("api", "before-upgrade"); dc.fork("api", "before-upgrade", "api-try")
        for change in dc.watch("cells", timeout=60):
            print(change["type"], change["object"]["metadata"].get("name"))

Standard library only (http.client, ssl): importing DevCell for its client pulls in nothing
else, and `devcell` itself imports this module only when `Client` is first asked for. Every
error the server answers is raised as DevCell's own error class for its status (NotFound,
Conflict, ManifestError with its located problems, Unauthenticated, Forbidden, ...), its
message the problem document's detail; the document itself is on `.problem`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import stat
import struct
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, NamedTuple, NoReturn

from devcell import errors
from devcell.names import printable, printable_text

RESOURCES = ("cells", "snapshots", "operations", "events", "nodes")
ROWS_ONLY = ("volumes", "controllers")
"""Kinds the API serves as `devcell get`'s rows alone (`rows`), with no list or watch."""
ACTION_TIMEOUT = 300
"""Seconds an action or a wait waits by default (the CLI's --timeout)."""
_Pairs = list[tuple[str, str]]
"""Query parameters in order, a name repeated (`name=a&name=b`)."""


ARCHIVE_MEDIA = "application/x-tar"
"""A snapshot archive's media type (export_snapshot, import_snapshot)."""
TRANSFER_STALL = 600.0
"""Seconds an export's archive may pause (the server walking a large tree) before the
client gives up on it."""
MEASURE_TIMEOUT = 600.0
"""Seconds a `df` may take to answer: it walks every workspace and checkpoint on the server."""
LONG_TIMEOUT = 3 * 3600.0
"""How long a gc, an image prune or a base image build may take before its answer (the
server answers once it is done: a build pulls and builds for minutes)."""
MAX_OUTPUT = 64 << 20
"""What `exec` keeps of a command's output by default (both streams together)."""
MAX_ANSWER = 256 << 20
"""The largest answer read (10,000 cells listed are ~14 MiB): a server sending more is not
DevCell's API, and is not let fill the client's memory."""
MAX_WAIT = 3600
"""The longest a server waits for an action or a drain's moves (its timeoutSeconds)."""
DRAIN_KEEPALIVE = 15.0
"""A drain's answer says `keepalive` this often while its moves go on."""
MAX_LINE = 64 << 20
"""The longest line of a watch or a log read."""


class ExecResult(NamedTuple):
    """A command's exit status and its output (with tty=True both streams are in stdout)."""

    exit_code: int
    stdout: bytes
    stderr: bytes


MAX_INTERIM = 4
"""Interim answers (100 Continue) read before an answer: http.client skips any number, each
under the socket's timeout alone, so a server sending one a second held a client past its
timeout for as long as it liked (found by attack-final)."""


ANSWER_RATE = 64 << 10
"""Bytes a second an answer's body must average, after the client's timeout, to be read on."""


class DrainResult(NamedTuple):
    """How a node's drain ended (Client.drain_node): the exit status `devcell node drain`
    exits with (0: every cell moved and the node drained), the node's id, whether it is
    drained, the cells moved (cell, its node now), those left on it (cell, why), and a lost
    node's cells moved from a snapshot (cell, snapshot, taken at: what they wrote since is
    lost)."""

    exit_code: int
    node: str
    drained: bool
    moved: list[tuple[str, str]]
    failed: list[tuple[str, str]]
    from_snapshots: list[tuple[str, str, str]]


class _PacedIO(socket.SocketIO):
    """An answer's socket, each read within what is left until `deadline` (None: under the
    socket's own timeout alone)."""

    deadline: float | None = None

    def readinto(self, b: Any) -> int | None:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            self._sock.settimeout(left)  # type: ignore[attr-defined]
        return super().readinto(b)


class _Answer(http.client.HTTPResponse):
    """An HTTP answer that refuses more than MAX_INTERIM interim heads before its own, and
    whose head (status line and headers) comes within the connection's timeout as a whole:
    each read waited under it alone, so a server sending its head a byte a second held the
    client for as long as it liked (a status line may be 64 KiB, and 100 headers each)."""

    _interim = 0

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self._socket = sock  # http.client's connection may let go of it (Connection: close)
        raw = getattr(self.fp, "raw", None)
        if type(raw) is socket.SocketIO:
            raw.__class__ = _PacedIO  # the same object, its reads paced while the head comes

    def begin(self) -> None:
        raw, limit = getattr(self.fp, "raw", None), self._socket.gettimeout()
        if not isinstance(raw, _PacedIO) or limit is None:
            return super().begin()
        raw.deadline = time.monotonic() + limit
        try:
            super().begin()
        finally:
            raw.deadline = None
            with contextlib.suppress(OSError):
                self._socket.settimeout(limit)

    def bound(self, seconds: float) -> None:
        """Each further read of this answer waits at most `seconds` (a stream's has no
        bound: a watch waits for changes)."""
        with contextlib.suppress(OSError):
            self._socket.settimeout(seconds)

    def _read_status(self) -> tuple[str, int, str]:
        got: tuple[str, int, str] = super()._read_status()  # type: ignore[misc]
        if got[1] == http.client.CONTINUE:
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise http.client.HTTPException(
                    f"over {MAX_INTERIM} interim answers (100 Continue) before its own")
        return got


class _TLSConnection(http.client.HTTPSConnection):
    response_class = _Answer


class _UnixConnection(http.client.HTTPConnection):
    response_class = _Answer

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("devcell", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = unix_socket(self._path, self.timeout)


def _failed(message: str, cause: str) -> errors.TemporaryError:
    """The server could not be used, and why: `cause` (unreachable, certificate, owner,
    slow) tells cli/remote.py what to advise."""
    failed = errors.TemporaryError(message)
    failed.cause = cause  # type: ignore[attr-defined]
    return failed


def unix_socket(path: str, timeout: float | None) -> socket.socket:
    """A connection to the unix socket at `path`, refused unless this user serves it.

    DevCell's socket is its owner's alone (0600), so its server runs as the caller; any other
    is someone else's, bound at that path while the daemon was down (in /tmp, say): what the
    caller would send it (manifests and their secrets, an exec's input) is refused it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        peer = getattr(socket, "SO_PEERCRED", None)  # Linux; elsewhere the socket's mode
        if peer is not None:
            uid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, peer,
                                                      struct.calcsize("3i")))[1]
            if uid != os.geteuid():
                raise _failed(
                    f"DevCell API at unix:{printable(path)}: the process serving that socket "
                    f"runs as uid {uid}, not as this user (uid {os.geteuid()}); nothing is "
                    "sent to it (another user's server where the daemon's socket was?)", "owner")
    except BaseException:
        sock.close()
        raise
    return sock


class Client:
    """One DevCell API server: `unix:PATH` (the state directory's owner, no token) or
    `https://HOST:PORT` with a bearer token and, for DevCell's own certificate, `ca` (its
    `api-tls/cert.pem`)."""

    def __init__(self, url: str, *, token: str | None = None, ca: str | None = None,
                 timeout: float = 30.0) -> None:
        self.url, self.token, self.timeout = url, token, timeout
        if url.startswith("unix:"):
            self._unix: str | None = url[len("unix:"):]
            self._host, self._port, self._tls = "", 0, None
        else:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme != "https" or not parts.hostname:
                raise errors.UsageError(f"{url!r}: unix:PATH or https://HOST:PORT")
            self._unix = None
            self._host, self._port = parts.hostname, parts.port or 443
            self._tls = ssl.create_default_context(cafile=ca)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing is kept open between calls; here for `with`."""

    # -- the verbs ------------------------------------------------------------------------------

    def list(self, resource: str, *, selector: str | None = None, limit: int | None = None
             ) -> list[dict[str, Any]]:
        """The records of `resource` (cells, snapshots, operations, events, nodes), as `devcell
        get RESOURCE -o json` prints them; `selector` as -l. `limit` (cells and snapshots):
        asked in pages of at most this many, each next page by the last one's continue
        token, so neither side holds one huge answer at once."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        given: set[str] = set()
        while True:
            doc = self._json("GET", _path(resource), {
                "labelSelector": selector, "limit": None if limit is None else str(limit),
                "continue": token})
            found = doc.get("items") if isinstance(doc, dict) else None
            meta = doc.get("metadata") if isinstance(doc, dict) else None
            if not isinstance(found, list) or not isinstance(meta, dict):
                raise self._not_api("a list without items and metadata")
            items += found
            token = meta.get("continue")
            if token is None:
                return items
            if not isinstance(token, str) or token in given:
                raise self._not_api("a list whose continue token is not new text")
            given.add(token)

    def rows(self, resource: str, *, names: Sequence[str] = (),
             selector: str | None = None, for_object: str | None = None, wide: bool = False,
             labels: bool = False, objects: bool = False, cell: str | None = None
             ) -> dict[str, Any]:
        """The rows `devcell get RESOURCE` prints its tables from (GET /api/v1/rows/...),
        each with its document when `objects`, only a `cell`'s snapshots when given (NotFound
        when it is not recorded); what the CLI's remote mode reads."""
        query: _Pairs = [("name", n) for n in names]
        for key, value in (("labelSelector", selector), ("for", for_object), ("cell", cell),
                           ("wide", "true" if wide else None),
                           ("labels", "true" if labels else None),
                           ("objects", "true" if objects else None)):
            if value:
                query.append((key, value))
        if resource not in ROWS_ONLY:
            _recorded(resource)
            _path(resource)
        doc = self._json("GET", f"/api/v1/rows/{resource}", query)
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list) or not all(
                isinstance(i, dict) and isinstance(i.get("row"), dict) for i in items):
            raise self._not_api("rows that are not a list of {row: ...}")
        return dict(doc)

    def snapshots_of(self, cell: str) -> Sequence[dict[str, Any]]:
        """The snapshot documents of `cell` (a name or id), in name order, as `devcell
        snapshot list CELL -o json` lists them; NotFound when the cell is not recorded."""
        return [item["object"] for item in self.rows("snapshots", cell=cell,
                                                     objects=True)["items"]]

    def get(self, resource: str, name: str) -> dict[str, Any]:
        """One record, by name or id (NotFound when there is none)."""
        return self._json("GET", f"{_path(resource)}/{urllib.parse.quote(name, safe='')}")

    def describe(self, resource: str, name: str) -> str:
        """What `devcell describe` prints of one cell, snapshot or operation (by name or
        id): its fields, lineage, operations and events, as text (NotFound when there is
        none)."""
        if resource not in ("cells", "snapshots", "operations"):
            raise errors.UsageError(f"{resource!r}: cells, snapshots or operations")
        conn, response = self._send(
            "GET", f"{_path(resource)}/{urllib.parse.quote(name, safe='')}/describe", {})
        try:
            data = self._read(response)
        finally:
            conn.close()
        if response.status >= 400:
            _raise(response.status, data)
        self._expected(response)
        self._text(response, "a description")
        return printable_text(data.decode("utf-8", "replace"))  # escaped already, by DevCell

    def apply(self, manifests: str | bytes | dict[str, Any], *, dry_run: bool = False,
              as_json: bool = False, source: str | Sequence[tuple[int, str]] | None = None,
              prune: bool = False, selector: str | None = None,
              keep_pruned: int | None = None) -> dict[str, Any]:
        """Record a YAML stream (or one manifest as a dict; bytes as they are, a YAML stream
        or, with `as_json`, one JSON document); what was recorded, as apply says it
        (ManifestError with every located problem when any is found).

        `source`: where the manifests were read, an absolute path (a file or a folder) or
        (line, path) pairs, the stream's documents from each line on read from that path;
        recorded as yours, so that a later apply with `prune` from the same path (or a
        folder above it) deletes what you applied there and no longer send, as `devcell
        apply -f PATH --prune` does (`selector`: only what it matches, as -l;
        `keep_pruned`: seconds a pruned cell's workspace is kept, default a day). A prune
        that would delete an object you may not delete refuses the whole apply
        (Forbidden, naming the rule)."""
        body, media = _manifests_body(manifests, as_json)
        origins = [(1, source)] if isinstance(source, str) else list(source or [])
        query: _Pairs = [("from", f"{line}:{path}") for line, path in origins]
        for name, value in (("dryRun", "true" if dry_run else None),
                            ("prune", "true" if prune else None), ("labelSelector", selector),
                            ("keepPrunedSeconds", None if keep_pruned is None
                             else str(keep_pruned))):
            if value:
                query.append((name, value))
        return self._json("POST", "/api/v1/apply", query, body=body, media=media)

    def resume_operation(self, operation: str, input: dict[str, Any] | None = None  # noqa: A002
                         ) -> dict[str, Any]:
        """Approve a suspended operation with its gate's answers (as `devcell op resume
        --input KEY=VALUE`); the operation's document after (the daemon continues its
        object: `get("operations", ID)` until its status is Succeeded or Failed).
        ManifestError when the answers do not fit the gate's question (it stays suspended)."""
        body = json.dumps({"input": input or {}}).encode()
        return self._json("POST", f"/api/v1/operations/{urllib.parse.quote(operation, safe='')}"
                          "/resume", body=body, media="application/json")

    def cancel_operation(self, operation: str) -> dict[str, Any]:
        """Cancel a suspended operation (as `devcell op cancel`): a cancelled delete keeps its
        object, a cancelled restore the workspace as it is; the operation's document after."""
        return self._json("POST", f"/api/v1/operations/{urllib.parse.quote(operation, safe='')}"
                          "/cancel")

    def node_action(self, node: str, action: str) -> dict[str, Any]:
        """Cordon or uncordon a node (an admin's, as `devcell node cordon|uncordon`; its id,
        unique hostname or unique id prefix): {"node": its document after, "changed": whether
        its availability changed}. Nodes are listed with `list("nodes")`."""
        if action not in ("cordon", "uncordon"):
            raise errors.UsageError(f"{action!r}: cordon or uncordon")
        if not node or "/" in node:  # no node is named so, and no route would be asked
            raise errors.NotFound(f'node "{printable(node)}" not found')
        return self._json("POST", f"/api/v1/nodes/{urllib.parse.quote(node, safe='')}/{action}")

    def drain_node(self, node: str, *, from_last_snapshot: bool = False,
                   timeout: float = ACTION_TIMEOUT,
                   on_line: Callable[[str, str], object] | None = None) -> DrainResult:
        """Move every cell off `node` (its id, unique hostname or unique id prefix), then
        drain it: an admin's, as `devcell node drain` (`from_last_snapshot`: a lost node's
        cells each from its newest snapshot in the cluster's registry; `timeout`: seconds
        the moves are waited for, as --timeout).

        It takes minutes: `on_line(stream, text)` is given each line the command prints
        ("stdout" or "stderr", escaped) as the server sends it. Returns how it ended; a node
        already being drained is errors.Conflict naming who drains it. The drain runs on the
        server whatever this client does: one whose answer is cut goes on there to its end.
        """
        if not node or "/" in node:  # no node is named so, and no route would be asked
            raise errors.NotFound(f'node "{printable(node)}" not found')
        wait = min(max(int(-(-timeout // 1)), 1), MAX_WAIT)
        query = {"fromLastSnapshot": "true" if from_last_snapshot else None,
                 "timeoutSeconds": str(wait)}
        path = f"/api/v1/nodes/{urllib.parse.quote(node, safe='')}/drain"
        conn, response = self._send("POST", path, query,
                                    read_timeout=max(self.timeout, 4 * DRAIN_KEEPALIVE))
        try:
            if response.status != 200:
                self._refused(response)
            media = _media(response)
            if media != "application/x-ndjson":
                raise self._not_api(f"a drain as {_shown(media.encode())}, not JSON lines")
            for raw in _cut_at_end(response):
                line = self._decoded(raw) if raw.strip() else {"type": "keepalive"}
                if not isinstance(line, dict):
                    raise self._not_api(f"a drain's line {_shown(raw)}")
                kind = line.get("type")
                if kind == "line" and on_line is not None:
                    stream, text = line.get("stream"), line.get("text")
                    if stream not in ("stdout", "stderr") or not isinstance(text, str):
                        raise self._not_api(f"a drain's line {_shown(raw)}")
                    on_line(stream, printable(text))
                elif kind == "error":
                    problem = line.get("problem")
                    status = problem.get("status") if isinstance(problem, dict) else None
                    _raise(status if isinstance(status, int) and status >= 400 else 500,
                           json.dumps(problem).encode())
                elif kind == "result":
                    return self._drained(line, raw)
        except KeyboardInterrupt as exc:  # "interrupted" alone let the user think it stopped
            if not exc.args:
                exc.args = (f"POST {printable(path)} was answered (HTTP {response.status}): "
                            "the drain goes on on the server to its end (a client leaving "
                            "never stops it); look (get nodes, get events) before asking "
                            "again",)
            raise
        finally:
            conn.close()
        raise errors.DevCellError(
            f"DevCell API at {printable(self.url)}: the drain's answer ended before its "
            "result; a drain that began goes on on the server to its end: run `devcell node "
            "drain` again once it has (one still running is refused, naming it)")

    def _drained(self, line: dict[str, Any], raw: bytes) -> DrainResult:
        """A drain's result line, checked."""
        code = line.get("exitCode")
        pairs = {key: line.get(key) for key in ("moved", "failed", "fromSnapshots")}
        if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 125 \
                or not all(isinstance(v, list) and all(isinstance(i, dict) for i in v)
                           for v in pairs.values()):
            raise self._not_api(f"a drain's result {_shown(raw)}")
        return DrainResult(
            code, str(line.get("node") or ""), line.get("drained") is True,
            [(str(m.get("cell")), str(m.get("node"))) for m in pairs["moved"] or []],
            [(str(f.get("cell")), str(f.get("reason"))) for f in pairs["failed"] or []],
            [(str(f.get("cell")), str(f.get("snapshot")), str(f.get("takenAt")))
             for f in pairs["fromSnapshots"] or []])

    def df(self, *, verbose: bool = False) -> dict[str, Any]:
        """What the server's state directory takes on disk and what could be freed, by type,
        as `devcell df -o json` prints it (`verbose`: each item too, as -v); measured now,
        so it may take seconds, and a server measures two at once."""
        doc = self._json("GET", "/api/v1/df", {"verbose": "true" if verbose else None},
                         read_timeout=max(self.timeout, MEASURE_TIMEOUT))
        if not isinstance(doc, dict) or not isinstance(doc.get("types"), list):
            raise self._not_api("a df without its types")
        return doc

    def gc(self, *, approve: bool = False, dry_run: bool = False) -> dict[str, Any]:
        """Collect the server's garbage, as `devcell gc` (an admin's: rule gc-admin): the
        volumes and checkpoints nothing references, in every backend (`approve`: also
        those that hold files no object ever named; `dry_run`: what it would remove, nothing
        removed). What it did, as data: each backend's `planned` removals (`freedBytes`,
        `keptBecause`), `needsApproval`, `failed`, and `ok`. It may take minutes; a server
        runs one at a time (the next is a 503)."""
        doc = self._json("POST", "/api/v1/gc", {"approve": "true" if approve else None,
                                                "dryRun": "true" if dry_run else None},
                         read_timeout=LONG_TIMEOUT)
        return self._shaped(doc, "gc", "a gc")

    def images(self) -> Sequence[dict[str, Any]]:
        """The images DevCell pulled or built for the server's state directory, as the
        engine holds them now (as `devcell image ls -o json` lists them); any role."""
        doc = self._json("GET", "/api/v1/images", read_timeout=max(self.timeout,
                                                                   MEASURE_TIMEOUT))
        return list(self._shaped(doc, "list_images", "an image list")["items"])

    def prune_images(self, *, dry_run: bool = False) -> dict[str, Any]:
        """Remove the images DevCell pulled or built that no live cell names and no container
        uses, as `devcell image prune` (an admin's: rule image-admin; a `dry_run` any role's):
        {"removed", "kept": [{"image", "why"}], "forgotten", "freedBytes"}."""
        doc = self._json("POST", "/api/v1/images/prune", {"dryRun": "true" if dry_run
                                                          else None},
                         read_timeout=LONG_TIMEOUT)
        return self._shaped(doc, "prune_images", "an image prune")

    def build_base_image(self, *, force: bool = False) -> dict[str, Any]:
        """Build the offline base image on the server's engine (and, with QEMU there, its vm
        root disk), as `devcell image build-base` (an admin's: rule image-admin): {"image",
        "imageId", "built", "nodeToolsId", "nodeToolsProblem", "vm", "vmProblem"}. It takes
        minutes, with no progress said meanwhile; a server builds one at a time."""
        doc = self._json("POST", "/api/v1/images/build-base",
                         {"force": "true" if force else None}, read_timeout=LONG_TIMEOUT)
        return self._shaped(doc, "build_base_image", "a base image build")

    def lineage(self) -> tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]]:
        """(cells, snapshots) as `devcell get snapshots --tree` draws them: each cell's id,
        name, phase and the snapshot it was forked from (`forked_from`), each snapshot's
        id, name, phase and the cell it was taken of (`cell_id`), in creation order. An
        answer of another shape (or one naming an id twice) is not DevCell's API."""
        doc = self._json("GET", "/api/v1/lineage")
        cells = doc.get("cells") if isinstance(doc, dict) else None
        snapshots = doc.get("snapshots") if isinstance(doc, dict) else None
        link = {"cells": "forked_from", "snapshots": "cell_id"}
        ids: set[str] = set()
        for what, rows in (("cells", cells), ("snapshots", snapshots)):
            if not isinstance(rows, list):
                raise self._not_api(f"a lineage without {what}")
            for row in rows:
                if not isinstance(row, dict) or not all(isinstance(row.get(k), str)
                                                        for k in ("id", "name")) \
                        or not all(row.get(k) is None or isinstance(row.get(k), str) for k in (
                            "phase", "deleting_at", "deleted_at", "consistency",
                            "imported_from", link[what])) or row["id"] in ids:
                    raise self._not_api(f"a lineage whose {what} are not rows of unique ids")
                row.setdefault(link[what], None)
                ids.add(row["id"])
        assert isinstance(cells, list) and isinstance(snapshots, list)
        return cells, snapshots

    def tokens(self) -> Sequence[dict[str, Any]]:
        """Every token recorded, as `devcell token list -o json` lists them (an admin's):
        ids, users, roles and states, never a token itself."""
        doc = self._json("GET", "/api/v1/tokens")
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise self._not_api("a token list without items")
        return items

    def create_token(self, user: str, role: str, *, expires: str | None = None
                     ) -> tuple[str, dict[str, Any]]:
        """A new token for `user` with `role` (viewer, developer, admin), valid for `expires`
        (30m, 12h, 90d; None: until revoked): (the token, shown by the server only this
        once, and its record). An admin's."""
        body = json.dumps({"user": user, "role": role, "expires": expires}).encode()
        doc = self._json("POST", "/api/v1/tokens", body=body, media="application/json")
        token = doc.get("token") if isinstance(doc, dict) else None
        item = doc.get("item") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not isinstance(item, dict):
            raise self._not_api("a token's creation without the token and its record")
        return token, item

    def revoke_token(self, token_id: str) -> tuple[dict[str, Any], bool]:
        """Revoke a token by its id (or the whole token: only its id is sent): (its record,
        whether it was active until now). An admin's."""
        import re

        match = re.fullmatch(r"([0-9a-f]{12})|dct_([0-9a-f]{12})_[0-9a-f]{64}", token_id)
        found = None if match is None else (match.group(1) or match.group(2))
        if found is None:  # said as the store says it: a mistyped token is never repeated
            shown = ("(a token, not shown)" if len(token_id) > 24 or "dct_" in token_id.lower()
                     else repr(token_id))
            raise errors.NotFound(f"no token with id {printable(shown)} (an id is 12 hex "
                                  "digits, as `devcell token list` shows)")
        doc = self._json("DELETE", f"/api/v1/tokens/{found}")
        item = doc.get("item") if isinstance(doc, dict) else None
        revoked = doc.get("revoked") if isinstance(doc, dict) else None
        if not isinstance(item, dict) or not isinstance(revoked, bool):
            raise self._not_api("a revoke without the token's record")
        return item, revoked

    def ssh_host_key(self) -> str:
        """The SSH host key the server's cells answer with (`ssh-ed25519 BASE64`): what a
        known_hosts file pins for *.devcell (`devcell ssh-config` writes it)."""
        return str(self._json("GET", "/api/v1/ssh/host-key").get("publicKey", ""))

    def diff(self, manifests: str | bytes | dict[str, Any], *, as_json: bool = False
             ) -> dict[str, Any]:
        """What an apply of a YAML stream (or one manifest as a dict; bytes as apply takes
        them) would change: each
        manifest's unified diff against its recorded object, as `devcell diff` prints it
        ({items: [{kind, name, line, hunks, hold, undecided}], warnings, differs}); nothing is
        recorded. ManifestError with every located problem when any is found."""
        body, media = _manifests_body(manifests, as_json)
        return self._json("POST", "/api/v1/diff", body=body, media=media)

    def delete(self, resource: str, name: str) -> dict[str, Any]:
        """Ask for an object's deletion (the daemon tears it down)."""
        return self._json("DELETE", f"{_path(resource)}/{urllib.parse.quote(name, safe='')}")

    def export_snapshot(self, snapshot: str, out: BinaryIO) -> dict[str, Any]:
        """Write `snapshot`'s archive to `out` as it arrives (the bytes `devcell snapshot
        export` writes; neither side holds it whole) and return what the export recorded:
        {"name", "sha256", "entries", "bytes", "skipped", "operation"} (`skipped`: FIFOs,
        sockets and device nodes left out). NotFound, Forbidden (its `rule`) and Conflict (a
        snapshot not Ready, or one keeping a machine's memory) are raised before a byte is
        written; an archive cut short (the server failed or went away midway) raises
        DevCellError once what arrived was written, which the caller discards. An error of
        `out` itself (a closed pipe, a full disk) is raised as it is."""
        import re

        path = f"/api/v1/snapshots/{urllib.parse.quote(snapshot, safe='')}/archive"
        conn, response = self._send("GET", path, {}, accept=ARCHIVE_MEDIA,
                                    read_timeout=max(self.timeout, TRANSFER_STALL))
        try:
            if response.status >= 400:
                self._refused(response)
            self._expected(response)
            op_id = response.getheader("DevCell-Operation") or ""
            media = _media(response)
            if media != ARCHIVE_MEDIA or not re.fullmatch(r"op_[0-9A-Za-z]{1,64}", op_id):
                raise self._not_api(f"an archive without its type ({ARCHIVE_MEDIA}) and "
                                    "operation")
            size = 0
            while True:
                try:
                    piece = response.read1(1 << 20)
                    if not piece and response.length:  # a declared length not reached
                        raise http.client.IncompleteRead(b"", response.length)
                except (OSError, http.client.HTTPException) as exc:
                    said = printable(repr(exc)[:120])
                    raise errors.DevCellError(
                        f"snapshot {printable(snapshot)}: the archive was cut short after "
                        f"{size} bytes ({said}): the server failed or went away (its log says "
                        "why); what arrived is not a whole archive") from None
                if not piece:
                    break
                out.write(piece)
                size += len(piece)
        finally:
            conn.close()
        done = self.get("operations", op_id)
        steps = done.get("steps") if isinstance(done, dict) else None
        outputs = steps[0].get("outputs") if isinstance(steps, list) and steps and \
            isinstance(steps[0], dict) else None
        if not isinstance(outputs, dict) or not isinstance(outputs.get("sha256"), str) or \
                not all(isinstance(outputs.get(k), int) for k in ("entries", "bytes")):
            raise self._not_api("an export whose operation has no figures")
        return {"name": str(done.get("object_name") or snapshot),
                "sha256": outputs["sha256"], "entries": outputs["entries"],
                "bytes": outputs["bytes"], "skipped": _number(outputs.get("skipped")) or 0,
                "operation": op_id}

    def import_snapshot(self, archive: bytes | BinaryIO, *, name: str | None = None,
                        origin: str | None = None) -> dict[str, Any]:
        """Bring a snapshot archive (what `export_snapshot` or `devcell snapshot export`
        wrote) in on the server as a Ready snapshot, named `name` (None: the name it was
        exported under), checked as `devcell snapshot import` checks it and recorded in the
        caller's name; `origin` is recorded as where the archive came from (a file's path;
        None: standard input, `-`). `archive` is bytes or a binary file read as it is sent
        (a regular file's size said first, so a server refuses one too large before it is
        sent). Returns {"name", "id", "backend", "sha256", "files", "bytes", "operation"}.
        ArchiveRefused (a damaged or hostile archive), Conflict (the name is taken),
        ManifestError (a name that is not valid) and Forbidden (a viewer) mean nothing was
        recorded; an archive over the server's bound is a DevCellError (its 413) saying it."""
        headers: dict[str, str] = {}
        if not isinstance(archive, bytes):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                info = os.fstat(archive.fileno())
                if stat.S_ISREG(info.st_mode):
                    headers["Content-Length"] = str(max(0, info.st_size - archive.tell()))
        query = {"name": name, "origin": origin}
        conn, response = self._send("POST", "/api/v1/snapshots/import", query, body=archive,
                                    media=ARCHIVE_MEDIA, headers=headers, read_timeout=None)
        try:
            data = self._read(response, None)
        finally:
            conn.close()
        if response.status >= 400:
            _raise(response.status, data)
        self._expected(response)
        doc = self._decoded(data)
        if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in (
                "name", "id", "backend", "sha256", "operation")) or not all(
                isinstance(doc.get(k), int) for k in ("files", "bytes")):
            raise self._not_api("an import without what it imported")
        return doc

    def push_snapshot(self, snapshot: str, target: str, *, compression: str = "zstd"
                      ) -> dict[str, Any]:
        """Push `snapshot` to a registry as `devcell snapshot push` does on the server's
        machine, with the server's own registry logins (an admin's: rule registry-admin);
        `target` is REGISTRY/REPOSITORY[:TAG], `compression` zstd, gzip or none. Returns
        {"name", "ref", "digest", "layer", "layerBytes", "entries", "bytes", "operation"}
        once the registry has it (minutes for a large snapshot)."""
        body = json.dumps({"target": target, "compression": compression}).encode()
        doc = self._json("POST", f"/api/v1/snapshots/{urllib.parse.quote(snapshot, safe='')}"
                         "/push", body=body, media="application/json", read_timeout=None)
        if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in (
                "name", "ref", "digest")) or not all(
                isinstance(doc.get(k), int) for k in ("entries", "bytes", "layerBytes")):
            raise self._not_api("a push without what it pushed")
        return doc

    def pull_snapshot(self, source: str, *, name: str | None = None) -> dict[str, Any]:
        """Pull the snapshot at `source` (REGISTRY/REPOSITORY:TAG or @sha256:...) into the
        server as `devcell snapshot pull` does there, with the server's own registry logins
        (an admin's: rule registry-admin), named `name` (None: its own). Returns what
        `import_snapshot` returns, and the `ref` and `digest` pulled."""
        body = json.dumps({"source": source, "name": name}).encode()
        doc = self._json("POST", "/api/v1/snapshots/pull", body=body,
                         media="application/json", read_timeout=None)
        if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in (
                "name", "backend", "ref", "digest")) or not all(
                isinstance(doc.get(k), int) for k in ("files", "bytes")):
            raise self._not_api("a pull without what it imported")
        return doc

    def watch(self, resource: str, *, resource_version: str | None = None,
              timeout: int | None = None) -> Iterator[dict[str, Any]]:
        """Each change of `resource` as it happens ({type, resourceVersion, object}); from a
        version (a list's metadata.resourceVersion, or the last change's) to miss nothing."""
        query = {"resourceVersion": resource_version,
                 "timeoutSeconds": str(timeout) if timeout is not None else None}
        _recorded(resource)
        for change in self._changes(_path(resource), query):
            if change.get("type") != "BOOKMARK":
                yield change

    # -- actions on a cell ----------------------------------------------------------------------

    def sleep(self, cell: str, *, wait: bool = True, timeout: int = ACTION_TIMEOUT
              ) -> dict[str, Any]:
        """Checkpoint `cell`'s workspace, then put it to sleep (as `devcell cell sleep`).

        wait: return once it sleeps (else once the daemon has it to do). Returns what was
        recorded and, waited for, how each object ended and the operations that ran; raises
        DevCellError when converging failed, TimeoutError when `timeout` (seconds) ran out,
        the answer on the error's `.result`."""
        return self._action(cell, "sleep", None, wait, timeout)

    def start(self, cell: str, *, wait: bool = True, timeout: int = ACTION_TIMEOUT
              ) -> dict[str, Any]:
        """Start a stopped or sleeping cell (as `devcell cell start`); as `sleep` otherwise."""
        return self._action(cell, "start", None, wait, timeout)

    def snapshot(self, cell: str, name: str, *, ttl: str | None = None,
                 consistency: str | None = None, wait: bool = True,
                 timeout: int = ACTION_TIMEOUT) -> dict[str, Any]:
        """Take snapshot `name` of `cell` (as `devcell snapshot create`): expiring after
        `ttl` (30m, 7d), keeping memory too with consistency "machine" (vm). Conflict when
        the name is taken; as `sleep` otherwise."""
        body: dict[str, Any] = {"name": name}
        if ttl is not None:
            body["ttl"] = ttl
        if consistency is not None:
            body["consistency"] = consistency
        return self._action(cell, "snapshot", body, wait, timeout)

    def fork(self, cell: str, snapshot: str, name: str, *, ports: dict[int, int] | None = None,
             publish: bool = True, count: int | None = None, wait: bool = True,
             timeout: int = ACTION_TIMEOUT) -> dict[str, Any]:
        """Make cell `name` from `snapshot` of `cell` (as `devcell cell fork`): its spec,
        its workspace restored from the snapshot; the fork is the caller's. `ports`: container
        port -> the fork's host port; publish=False: it publishes none; `count` N makes
        N forks, `name`-1 to `name`-N. Conflict when the name is taken; as `sleep`
        otherwise."""
        body: dict[str, Any] = {"name": name, "snapshot": snapshot}
        if ports:
            body["ports"] = {str(k): v for k, v in ports.items()}
        if not publish:
            body["publish"] = False
        if count is not None:
            body["count"] = count
        return self._action(cell, "fork", body, wait, timeout)

    def restart(self, cell: str, service: str | None = None, *, wait: bool = True,
                timeout: int = ACTION_TIMEOUT) -> dict[str, Any]:
        """Restart running `cell`'s services (its runtime stopped and started: postStart runs
        again, postCreate does not), or only `service` (as `devcell cell restart`); as
        `sleep` otherwise."""
        return self._action(cell, "restart", {"service": service} if service else None, wait,
                            timeout)

    def rerun_hooks(self, cell: str, *, wait: bool = True, timeout: int = ACTION_TIMEOUT
                    ) -> dict[str, Any]:
        """Run running `cell`'s postCreate hooks again, then postStart (as `devcell cell
        rerun-hooks`); as `sleep` otherwise."""
        return self._action(cell, "rerun-hooks", None, wait, timeout)

    def restore(self, snapshot: str, *, cell: str | None = None, safety: bool = True,
                dry_run: bool = False, approve: bool = False, wait: bool = True,
                timeout: int = ACTION_TIMEOUT) -> dict[str, Any]:
        """Roll a cell's workspace back to `snapshot`, in place (as `devcell snapshot
        restore`): into its own cell, or `cell` (a fork of it); a safety snapshot of the
        workspace first unless safety=False; dry_run: only the plan. A workspace changed
        since its last snapshot stops the restore at an approval gate unless `approve`.
        Returns the plan and how it went (`done`, `awaiting`: why it waits at its gate,
        `operation`); raises DevCellError when it failed, TimeoutError when `timeout`
        (seconds) ran out, the answer on the error's `.result`."""
        result = self.restore_answer(snapshot, cell=cell, safety=safety, dry_run=dry_run,
                                     approve=approve, wait=wait, timeout=timeout)
        if result.get("failed") or not result.get("ok", True):
            bad = [str(r.get("message")) for r in result.get("results", [])]
            exc: Exception = TimeoutError("; ".join(bad)) if bad and all(
                r.get("status") == "waiting" for r in result["results"]) \
                else errors.DevCellError(str(result.get("failed") or "; ".join(bad)))
            exc.result = result  # type: ignore[attr-defined]
            raise exc
        return result

    def restore_answer(self, snapshot: str, *, cell: str | None = None, safety: bool = True,
                       dry_run: bool = False, approve: bool = False, wait: bool = True,
                       timeout: int = ACTION_TIMEOUT) -> dict[str, Any]:
        """POST /api/v1/snapshots/SNAPSHOT/restore and its answer as it is, whatever the
        restore gave (what the CLI prints from; `restore` raises when it failed)."""
        body: dict[str, Any] = {}
        for key, value, default in (("cell", cell, None), ("safety", safety, True),
                                    ("dryRun", dry_run, False), ("approve", approve, False)):
            if value != default:
                body[key] = value
        waits = wait and not dry_run
        query = {"wait": "true" if waits else None,
                 "timeoutSeconds": str(timeout) if waits else None}
        path = f"/api/v1/snapshots/{urllib.parse.quote(snapshot, safe='')}/restore"
        data = json.dumps(body).encode() if body else None
        result: dict[str, Any] = self._json(
            "POST", path, query, body=data, media="application/json" if data else None,
            read_timeout=timeout + self.timeout if waits else -1.0)
        return result

    def wait(self, name: str, phase: str = "Running", *, resource: str = "cells",
             timeout: float = ACTION_TIMEOUT) -> dict[str, Any]:
        """Block until the cell (or, resource="snapshots", the snapshot) `name` is in
        `phase` (Running, Sleeping, Stopped; a snapshot's Ready), following its events with
        a watch; its record then. NotFound when it is not (or no longer) there, TimeoutError
        after `timeout` seconds."""
        word = {"cells": "cell", "snapshots": "snapshot"}.get(resource)
        if word is None:
            raise errors.UsageError(f"{resource!r}: cells or snapshots")
        deadline = time.monotonic() + timeout
        target = f"{word}/{name}"
        version = self._json("GET", "/api/v1/events", {"for": target})["metadata"][
            "resourceVersion"]  # before the record is read: a change after it is seen
        while True:
            doc = self.get(resource, name)
            found = (doc.get("status") or {}).get("phase")
            if found == phase:
                return doc
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{word} {name} is {found}, not {phase}, after "
                                   f"{timeout:g}s")
            query = {"for": target, "resourceVersion": version,
                     "timeoutSeconds": str(max(1, min(int(left + 0.999), 3600)))}
            for change in self._changes("/api/v1/events", query):
                version = change["resourceVersion"]
                break  # an event of it (or a bookmark, every 15 s): read it again

    # -- streams --------------------------------------------------------------------------------

    def exec(self, cell: str, argv: Sequence[str], *, stdin: bytes | None = None,
             env: dict[str, str] | None = None, workdir: str | None = None,
             user: str | None = None, tty: bool = False, timeout: float | None = None,
             max_output: int = MAX_OUTPUT) -> ExecResult:
        """Run `argv` in `cell` (as `devcell exec`: a sleeping cell is woken) and return its
        exit status and output. `stdin`: its input (then its end); `env`, `workdir`, `user`
        as exec's -e, -w, -u; `tty`: on a pseudo-terminal. After `timeout` seconds, or once
        the output passes `max_output` bytes, the command is hung up (ended) and
        TimeoutError or DevCellError raised. Over a WebSocket (the `websockets` package,
        imported here only); a refusal raises as every other call does (Forbidden, ...)."""
        from websockets.exceptions import ConnectionClosed

        from devcell.server import framing

        ws = self.exec_socket(cell, argv, stdin=stdin is not None, env=env, workdir=workdir,
                              user=user, tty=tty)
        out: dict[int, list[bytes]] = {framing.STDOUT: [], framing.STDERR: []}
        kept = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        with ws:
            if stdin is not None:
                import threading

                def feed() -> None:
                    try:
                        for at in range(0, len(stdin), framing.MAX_STDIN):
                            ws.send(framing.frame(framing.STDIN,
                                                  stdin[at:at + framing.MAX_STDIN]))
                        ws.send(framing.frame(framing.STDIN, b""))
                    except ConnectionClosed:
                        pass  # the command ended before reading it all

                threading.Thread(target=feed, daemon=True, name="devcell-exec-stdin").start()
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    message = ws.recv(timeout=left)
                except TimeoutError:
                    raise TimeoutError(f"exec in cell {cell}: no exit status after "
                                       f"{timeout:g}s; the command was hung up") from None
                except ConnectionClosed:
                    raise errors.TemporaryError(f"exec in cell {cell}: the stream ended "
                                                "without an exit status") from None
                if not isinstance(message, bytes) or not message:
                    continue
                channel, payload = framing.split(message)
                if channel in out:
                    kept += len(payload)
                    if kept > max_output:
                        raise errors.DevCellError(
                            f"exec in cell {cell}: its output passed {max_output} bytes; "
                            "the command was hung up (give a larger max_output)")
                    out[channel].append(payload)
                elif channel == framing.STATUS:
                    code = exec_status(bytes(payload))
                    return ExecResult(code, b"".join(out[framing.STDOUT]),
                                      b"".join(out[framing.STDERR]))

    def exec_socket(self, cell: str, argv: Sequence[str], *, stdin: bool = False,
                    env: dict[str, str] | Sequence[tuple[str, str]] | None = None,
                    workdir: str | None = None, user: str | None = None,
                    tty: bool = False) -> Any:
        """The exec WebSocket of `argv` in `cell`, open (a `websockets` sync connection,
        framed as devcell/server/framing.py says), for a caller that relays the streams
        itself as they come (the CLI's `exec`; `exec` collects them). A refusal raises as
        every other call does."""
        from devcell.server import framing

        pairs = list(env.items()) if isinstance(env, dict) else list(env or [])
        values = dict(pairs)  # the last of a name repeated wins, as in a shell
        words = [("command", word) for word in argv]
        words += [("env", name) for name in values]  # the values go in the first message
        words += [(k, v) for k, v in (("workdir", workdir), ("user", user)) if v is not None]
        words += [("stdin", "true")] if stdin else []
        words += [("tty", "true")] if tty else []
        path = (f"/api/v1/cells/{urllib.parse.quote(cell, safe='')}/exec?"
                f"{urllib.parse.urlencode(words)}")
        ws = self._websocket(path, framing.SUBPROTOCOL)
        if values:  # never in the URL: a proxy's access log would keep a secret's value
            from websockets.exceptions import ConnectionClosed

            try:
                ws.__enter__()  # entered as the caller's `with` enters it (websockets 17.1+)
                ws.send(framing.frame(framing.ENV, json.dumps(values).encode()))
            except ConnectionClosed:  # was websockets' own error, a traceback
                ws.close()
                raise errors.TemporaryError(f"exec in cell {printable(cell)}: the stream "
                                            "ended before the command was started") from None
            except BaseException:
                ws.close()
                raise
        return ws

    def port_socket(self, cell: str, port: int) -> Any:
        """One TCP connection to `port` in `cell` (as `devcell port-forward` makes it: a
        sleeping cell is woken) as its WebSocket, open (framed as devcell/server/framing.py
        says: channel 0 the bytes to the port, 1 those from it, each ended by an empty
        message, 3 the status last). A refusal raises as every other call does; a port
        nothing listens on is a DevCellError saying so (the server's 502)."""
        from devcell.server import framing

        path = (f"/api/v1/cells/{urllib.parse.quote(cell, safe='')}/portforward?"
                f"{urllib.parse.urlencode({'port': str(int(port))})}")
        return self._websocket(path, framing.PORT_SUBPROTOCOL)

    def ssh_socket(self, cell: str) -> Any:
        """One SSH connection to `cell`'s SSH server (as `devcell ssh-proxy` serves it, a
        sleeping cell woken) as its WebSocket, open, framed as port_socket's: what `devcell
        --server URL ssh-proxy` relays its standard input and output through."""
        from devcell.server import framing

        return self._websocket(f"/api/v1/cells/{urllib.parse.quote(cell, safe='')}/ssh",
                               framing.PORT_SUBPROTOCOL)

    def relay(self, ws: Any, sock: Any, on_error: Callable[[str], object] | None = None
              ) -> None:
        """Relay an open port_socket or ssh_socket and `sock` (anything with socket's recv,
        sendall and shutdown) both ways until both have ended; the WebSocket is closed."""
        with ws:
            _relay_port(ws, sock, on_error)

    def port_forward(self, cell: str, remote: int, local: int = 0, *,
                     address: str = "127.0.0.1",
                     on_error: Callable[[str], object] | None = None) -> PortForward:
        """Forward `address:local` (loopback only; 0: any free port) to port `remote` in
        `cell`, as `devcell port-forward CELL LOCAL:REMOTE` does, through the API: each
        accepted connection its own WebSocket (port_socket), relayed both ways by threads
        of its own, until the returned forward is closed (a context manager; its `port` is
        the local port). `on_error` is told, in words, of a connection the server refused
        or that broke (the forward goes on)."""
        from devcell.api import port_forward

        listener = port_forward.Listener(
            [port_forward.Mapping(local, remote)], port_forward.loopback(address),
            on_error or (lambda text: None),
            lambda sock, port: self.relay_port(cell, port, sock, on_error))
        return PortForward(listener)

    def relay_port(self, cell: str, port: int, sock: socket.socket,
                   on_error: Callable[[str], object] | None = None) -> None:
        """Relay the connected `sock` to `port` in `cell` both ways until both have ended (a
        half-close passed on each way), then close the WebSocket; a refusal or a broken
        connection said to `on_error` in words (`sock` is then closed by the caller)."""
        try:
            ws = self.port_socket(cell, port)
        except errors.DevCellError as exc:
            if on_error is not None:
                on_error(str(exc))
            return
        with ws:
            _relay_port(ws, sock, on_error)

    def _websocket(self, path: str, subprotocol: str) -> Any:
        """The WebSocket at `path`, open; a refusal raised as DevCell's error."""
        from websockets.exceptions import InvalidHandshake, InvalidStatus
        from websockets.sync.client import connect

        from devcell.server import framing

        options: dict[str, Any] = {
            "subprotocols": [subprotocol], "max_size": framing.MAX_MESSAGE,
            "compression": None, "open_timeout": self.timeout, "proxy": None,
            "logger": _quiet_logger(),
            "additional_headers": {"Authorization": f"Bearer {self.token}"}
            if self.token is not None else {}}
        try:
            if self._unix is not None:
                return connect(f"ws://devcell{path}", sock=unix_socket(self._unix, self.timeout),
                               **options)
            return connect(f"wss://{self._host}:{self._port}{path}", ssl=self._tls, **options)
        except InvalidStatus as exc:
            if exc.response.status_code < 400:  # a success that is no upgrade: not the API
                raise self._not_api(f"HTTP {exc.response.status_code} to a WebSocket's "
                                    "upgrade") from None
            _raise(exc.response.status_code, bytes(exc.response.body or b""))
        except InvalidHandshake as exc:  # another protocol, a bad upgrade: was a traceback
            if isinstance(exc.__cause__, EOFError):  # closed before it answered anything
                raise _failed(f"DevCell API at {self.url}: the server closed the connection "
                              "without an answer", "unreachable") from None
            said = printable(str(exc)[:120]) or type(exc).__name__
            raise self._not_api(f"what is not a WebSocket's upgrade ({said})") from None
        except ssl.SSLCertVerificationError as exc:
            raise _failed(
                f"DevCell API at {self.url}: its TLS certificate is not trusted "
                f"({exc.verify_message or exc.reason})", "certificate") from None
        except OSError as exc:
            raise _failed(f"DevCell API at {self.url}: {exc.strerror or exc}",
                          "unreachable") from None

    def logs(self, cell: str, service: str | None = None, *, tail: int | None = None,
             since: str | None = None, timestamps: bool = False, follow: bool = False,
             timeout: int | None = None,
             on_notes: Callable[[Sequence[str]], None] | None = None) -> Iterator[str]:
        """The lines of `cell`'s service logs (one `service`'s, or all prefixed [SERVICE]),
        as `devcell logs` prints them (escaped: a cell wrote them): the last `tail`, those
        from `since` (5m, or an RFC 3339 time), with their times; `follow`: going on as they
        grow, until `timeout` seconds (at most an hour) or the loop stops reading.
        `on_notes` is given what `devcell logs` says on stderr first (a runtime that
        drifted, the cell's sidecars), a line each."""
        query = {"service": service, "tail": str(tail) if tail is not None else None,
                 "since": since, "timestamps": "true" if timestamps else None,
                 "follow": "true" if follow else None,
                 "timeoutSeconds": str(timeout) if timeout is not None else None}
        path = f"/api/v1/cells/{urllib.parse.quote(cell, safe='')}/logs"
        conn, response = self._send("GET", path, query,
                                    read_timeout=None if follow else -1.0, prompt=True)
        try:
            if response.status != 200:
                self._refused(response)
            self._text(response, "a log")
            if on_notes is not None:
                try:
                    notes = json.loads(response.getheader("DevCell-Notes") or "[]")
                except (ValueError, RecursionError):
                    notes = []
                if notes and isinstance(notes, list):
                    on_notes([printable_text(str(note)) for note in notes])
            for line in _lines(self._chunks(response, None if follow else -1.0)):
                yield printable_text(line.decode("utf-8", "replace"))  # escaped already
        finally:
            conn.close()

    # -- the exchange ---------------------------------------------------------------------------

    def action(self, cell: str, action: str, body: dict[str, Any] | None = None, *,
               wait: bool = True, timeout: int = ACTION_TIMEOUT) -> dict[str, Any]:
        """POST /api/v1/cells/CELL/ACTION (sleep, start, snapshot, fork, restart, rerun-hooks)
        with `body` (the snapshot's, fork's or restart's fields) and its answer as it is,
        whatever converging gave (what the CLI prints from; `sleep` and the others raise when
        it failed)."""
        query = {"wait": "true" if wait else None,
                 "timeoutSeconds": str(timeout) if wait else None}
        path = f"/api/v1/cells/{urllib.parse.quote(cell, safe='')}/{action}"
        data = json.dumps(body).encode() if body is not None else None
        result: dict[str, Any] = self._json(
            "POST", path, query, body=data, media="application/json" if data else None,
            read_timeout=timeout + self.timeout if wait else -1.0)
        return result

    def _action(self, cell: str, action: str, body: dict[str, Any] | None, wait: bool,
                timeout: int) -> dict[str, Any]:
        result = self.action(cell, action, body, wait=wait, timeout=timeout)
        if wait and not result.get("ok", True):
            bad = [r for r in result.get("results", []) if r.get("status") != "settled"]
            message = "; ".join(f"{r.get('kind', '').lower()} {r.get('name')}: "
                                f"{r.get('message')}" for r in bad) or f"{action} failed"
            timed_out = bool(bad) and all(r.get("status") == "waiting" for r in bad)
            exc: Exception = TimeoutError(message) if timed_out \
                else errors.DevCellError(message)
            exc.result = result  # type: ignore[attr-defined]
            raise exc
        return result

    def _changes(self, path: str, query: dict[str, str | None]) -> Iterator[dict[str, Any]]:
        """A watch's changes, BOOKMARKs included, until the server ends it."""
        conn, response = self._send("GET", path, {"watch": "true", **query},
                                    read_timeout=None, prompt=True)
        try:
            if response.status != 200:
                self._refused(response)
            for line in _lines(self._chunks(response, None)):
                if line.strip():
                    change = self._decoded(line)
                    if not isinstance(change, dict):
                        raise self._not_api(f"a watch's line {_shown(line)}")
                    yield change
        finally:
            conn.close()

    # -- the exchange ---------------------------------------------------------------------------

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        wait = timeout if timeout is not None else 24 * 3600.0
        if self._unix is not None:
            return _UnixConnection(self._unix, wait)
        return _TLSConnection(self._host, self._port, timeout=wait, context=self._tls)

    def _send(self, method: str, path: str,
              query: dict[str, str | None] | _Pairs, *,
              body: bytes | BinaryIO | None = None, media: str | None = None,
              read_timeout: float | None = -1.0, accept: str = "application/json",
              headers: dict[str, str] | None = None, prompt: bool = False
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Ask, and the answer's head. `prompt`: a stream (watch, logs -f) whose body may
        take as long as the server likes, but whose head DevCell sends at once: the head
        within the client's timeout all the same (a server trickling it held the client
        for the stream's day)."""
        given = _given(query)
        target = path + ("?" + urllib.parse.urlencode(given) if given else "")
        headers = {"Accept": accept, **(headers or {})}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if media is not None:
            headers["Content-Type"] = media
        conn = self._connection(self.timeout if read_timeout == -1.0 else read_timeout)
        conn.blocksize = 1 << 20  # a streamed body (an archive) is sent in pieces this large
        try:
            conn.connect()  # an interrupt until connected sends nothing: said plainly
            try:
                conn.request(method, target, body=body, headers=headers)
            except KeyboardInterrupt as exc:  # part of it may have gone, all of it even
                conn.close()
                _interrupted(exc, method, path, given, "was being sent")
                raise
            except (BrokenPipeError, ConnectionResetError, ssl.SSLEOFError,
                    ssl.SSLZeroReturnError):
                # A server may answer before it has read the whole request (a refusal, a
                # 401 or 413) and close: its refusal is what to report, when it is there.
                # A success it could not have judged is not taken for one.
                with contextlib.suppress(OSError, http.client.HTTPException):
                    early = conn.getresponse()
                    if early.status >= 400:
                        return conn, early
                raise
            try:
                if prompt and conn.sock is not None:
                    conn.sock.settimeout(min(self.timeout, conn.timeout or self.timeout))
                response = conn.getresponse()
                if prompt and isinstance(response, _Answer) and conn.timeout is not None:
                    response.bound(conn.timeout)  # the stream's own, for its body
                return conn, response
            except OSError as exc:  # RemoteDisconnected, a reset, a timeout: no answer
                if not _changes(method, path, given):
                    if isinstance(exc, TimeoutError):  # reached: it said nothing in time
                        raise self._late(conn, self.timeout if prompt else conn.timeout
                                         ) from None
                    raise
                conn.close()  # the server was reached and may have done it
                raise self._lost(method, path, exc) from None
            except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: said by the CLI with this
                conn.close()
                _interrupted(exc, method, path, given, "was sent")
                raise
        except http.client.HTTPException as exc:
            conn.close()
            if isinstance(exc, ConnectionError):  # RemoteDisconnected: it closed, said nothing
                raise _failed(f"DevCell API at {self.url}: the server closed the connection "
                              "without an answer", "unreachable") from None
            said = printable(str(exc)[:120]) or type(exc).__name__
            raise self._not_api(f"what is not an HTTP answer ({said})") from None
        except ssl.SSLCertVerificationError as exc:
            conn.close()
            raise _failed(
                f"DevCell API at {self.url}: its TLS certificate is not trusted "
                f"({exc.verify_message or exc.reason})", "certificate") from None
        except OSError as exc:
            conn.close()
            raise _failed(f"DevCell API at {self.url}: {exc.strerror or exc}",
                          "unreachable") from None

    def _late(self, conn: http.client.HTTPConnection, seconds: float | None
              ) -> errors.TemporaryError:
        """A read whose answer's head did not come within `seconds` (the connection's
        timeout): the server took the request (it was reached), so not "cannot reach"."""
        conn.close()
        return _failed(f"DevCell API at {printable(self.url)}: no answer within "
                       f"{seconds or 0:g}s (timed out): the server is overloaded, or not "
                       "DevCell's API", "slow")

    def _lost(self, method: str, path: str, exc: OSError) -> errors.TemporaryError:
        """A change asked, whose connection ended after it was sent and before an answer:
        the server was reached and may have done it, so "cannot reach" would be wrong, and
        asking again blindly may do it twice (final43, F3)."""
        said = exc.strerror or printable(str(exc)[:120]) or type(exc).__name__
        return _failed(f"DevCell API at {printable(self.url)}: {method} {printable(path)} was "
                       f"sent, but no answer came ({said}): "
                       "whether the server did it is unknown; look (a get of what it changes, "
                       "or its operation) before asking again", "unknown")

    def _json(self, method: str, path: str,
              query: dict[str, str | None] | _Pairs | None = None, *,
              body: bytes | None = None, media: str | None = None,
              read_timeout: float | None = -1.0) -> Any:
        conn, response = self._send(method, path, query or {}, body=body, media=media,
                                    read_timeout=read_timeout)
        try:
            data = self._read(response, read_timeout)
        except KeyboardInterrupt as exc:  # its head came: whether it was done is known
            done = 200 <= response.status < 300
            _interrupted(exc, method, path, _given(query or {}),
                         f"was {'done' if done else 'answered'} (HTTP {response.status}), "
                         "its answer not read all", done=done)
            raise
        finally:
            conn.close()
        if response.status >= 400:
            _raise(response.status, data)
        self._expected(response)
        return self._decoded(data)

    def _read(self, response: http.client.HTTPResponse, seconds: float | None = -1.0
              ) -> bytes:
        """The answer's body, within `seconds` of its head (-1: the client's timeout; None:
        no bound, for a wait the server holds) plus the time it takes at ANSWER_RATE: the
        socket's timeout bounds each read alone, so a server sending a byte a second held a
        client for as long as it liked; a long list on a busy server still arrives."""
        chunks: list[bytes] = []
        size = 0
        for chunk in self._chunks(response, seconds):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER:
                raise self._not_api(f"an answer over {MAX_ANSWER >> 20} MiB")
        return b"".join(chunks)

    def _chunks(self, response: http.client.HTTPResponse, seconds: float | None = -1.0
                ) -> Iterator[bytes]:
        """The answer's body as it comes, bounded as `_read` says; an answer that ends
        before its end (cut, reset), stops coming, or is not HTTP's framing is one error
        (DevCellError), never http.client's or the socket's own (a traceback: final43)."""
        bound = self.timeout if seconds == -1.0 else seconds
        start = time.monotonic()
        size = 0
        while True:
            try:
                chunk = response.read1(1 << 16)
            except TimeoutError:  # nothing more within the socket's timeout: not closed
                raise _failed(f"DevCell API at {printable(self.url)}: its answer (HTTP "
                              f"{response.status}) stopped coming after {size} bytes (timed "
                              "out): the server is overloaded, or not DevCell's API", "slow"
                              ) from None
            except (http.client.IncompleteRead, OSError) as exc:  # chunked, or reset
                raise self._cut(response, size, exc) from None
            except http.client.HTTPException as exc:  # a chunk's size line past its limit
                said = printable(str(exc)[:120]) or type(exc).__name__
                raise self._not_api(f"what is not an HTTP answer ({said})") from None
            if not chunk:
                if response.length:  # http.client ends a short body quietly: b"" it is
                    raise self._cut(response, size, None)
                return
            size += len(chunk)
            if bound is not None and time.monotonic() - start > bound + size / ANSWER_RATE:
                raise _failed(
                    f"DevCell API at {printable(self.url)}: its answer did not arrive within "
                    f"{bound:g}s and at {ANSWER_RATE >> 10} KiB/s ({size} bytes so far): the "
                    "server is overloaded, or not DevCell's API", "slow")
            yield chunk

    def _text(self, response: http.client.HTTPResponse, what: str) -> None:
        """DevCell answers `what` (describe's, a log) as text/plain: a page of another type
        (a proxy's HTML sign-in page) was printed as the command's output, exit 0."""
        media = _media(response)
        if media != "text/plain":
            raise self._not_api(f"{what} as {_shown(media.encode())}, not text/plain")

    def _refused(self, response: http.client.HTTPResponse) -> NoReturn:
        """A stream's (watch, logs, drain, export) answer that is not its 200, raised as
        `_json` raises it: its body read as every other answer's, within the client's
        timeout (the stream's socket has none), a cut or a reset said so (it was http.
        client's IncompleteRead, a traceback); a 1xx, 2xx or 3xx is not DevCell's API (it
        was said "HTTP 101" alone)."""
        if response.status < 400:
            self._expected(response)
            raise self._not_api(f"HTTP {response.status} where a stream was asked")
        if isinstance(response, _Answer):
            response.bound(self.timeout)
        _raise(response.status, self._read(response))

    def _cut(self, response: http.client.HTTPResponse, size: int, exc: Exception | None
             ) -> errors.TemporaryError:
        """An answer whose connection ended before its end (the daemon stopped mid-answer):
        said so, never taken for another server's (final43, F4)."""
        of = f" of {size + response.length}" if response.length else ""
        why = f": {printable(exc.strerror or str(exc))[:120]}" if isinstance(exc, OSError) \
            else ""
        return _failed(f"DevCell API at {printable(self.url)}: its answer (HTTP "
                       f"{response.status}) was cut off: the connection closed after {size}"
                       f"{of} bytes{why} (the daemon stopped mid-answer?)", "cut")

    def _expected(self, response: http.client.HTTPResponse) -> None:
        """A success (2xx); DevCell's API never redirects, nor answers 1xx or 3xx here."""
        if not 200 <= response.status < 300:
            location = response.getheader("Location")
            raise self._not_api(f"HTTP {response.status}" + (
                f", to {_shown(location.encode('utf-8', 'replace'))}" if location else ""))

    def _decoded(self, data: bytes) -> Any:
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise self._not_api(f"{_shown(data)}, which is not JSON") from None

    def _not_api(self, what: str) -> errors.DevCellError:
        return not_api(self.url, what)

    def _shaped(self, doc: Any, route: str, what: str) -> dict[str, Any]:
        """`doc` once it has the shape the OpenAPI document gives `route`'s answer (so a
        printer never meets another and stops half way)."""
        import jsonschema

        from devcell.server import openapi

        try:
            jsonschema.validate(doc, openapi.answer_schema(route))
        except jsonschema.ValidationError as exc:
            raise self._not_api(f"{what} of another shape ({printable(exc.message[:120])})"
                                ) from None
        return dict(doc)


def not_api(url: str, what: str) -> errors.DevCellError:
    """The error for an answer of the server at `url` that DevCell's API never gives
    (`what` it answered): another server, or not DevCell."""
    return errors.DevCellError(f"DevCell API at {printable(url)}: the server answered {what}: "
                               "is it DevCell's API (the daemon's --listen address)?")


def _media(response: http.client.HTTPResponse) -> str:
    """The answer's media type, without its parameters (charset), lower case."""
    return (response.getheader("Content-Type") or "").partition(";")[0].strip().lower()


def _given(query: dict[str, str | None] | _Pairs) -> _Pairs:
    """A request's query parameters as sent (those with no value left out)."""
    return [(k, v) for k, v in query.items() if v is not None] if isinstance(query, dict) \
        else query


def _interrupted(exc: KeyboardInterrupt, method: str, path: str, query: _Pairs,
                 what: str, *, done: bool = False) -> None:
    """Ctrl-C (or SIGTERM) during a change asked of the server: `what` became of it, and
    that whether the server did it may be unknown, set as the interrupt's words (main.
    _guarded says them). "interrupted" alone let a user take a change that may have been
    done for one that was not (final43, F5); a read's interrupt stays plain."""
    if _changes(method, path, query) and not exc.args:
        unknown = "" if done else ": whether the server did it is unknown"
        exc.args = (f"{method} {printable(path)} {what}{unknown}; look before asking again",)


def _changes(method: str, path: str, query: _Pairs) -> bool:
    """Whether a request may change something on the server (neither a read nor a diff
    or dry run, which record nothing)."""
    return method not in ("GET", "HEAD") and path != "/api/v1/diff" \
        and ("dryRun", "true") not in query


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The answer's lines as they come (`Client._chunks`), each at most MAX_LINE bytes
    (longer: an error); the last one without its newline when the answer ends so."""
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            yield bytes(pending[start:end + 1])
            start = end + 1
        del pending[:start]
        if len(pending) > MAX_LINE:
            raise errors.DevCellError(f"the server sent a line over {MAX_LINE >> 20} MiB: "
                                      "not DevCell's API")
    if pending:
        yield bytes(pending)


def _pieces(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The answer's body as http.client gives it, its errors raised as they are."""
    while piece := response.read1(1 << 16):
        yield piece


def _cut_at_end(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The answer's whole lines until it ends or is cut (a line without its newline, the
    connection closed or reset, the server silent past the read timeout): the caller says
    the answer ended early."""
    try:
        for line in _lines(_pieces(response)):
            if not line.endswith(b"\n"):
                return
            yield line
    except (http.client.HTTPException, OSError):
        return


def _shown(data: bytes) -> str:
    """A few of a server's bytes, for an error: escaped and cut."""
    text = data[:80].decode("utf-8", "replace")
    return f"'{printable(text)}{'...' if len(data) > 80 else ''}'"


def exec_status(payload: bytes) -> int:
    """An exec stream's STATUS message: the command's exit status, or its problem document
    raised as DevCell's error (one that is neither: an error saying so)."""
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("exitCode"), int) \
            and not isinstance(doc["exitCode"], bool):
        return int(doc["exitCode"])
    status = doc.get("status") if isinstance(doc, dict) else None
    if isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 600:
        _raise(status, payload)
    raise errors.DevCellError(f"the exec stream ended with a status that is not DevCell's: "
                              f"{_shown(payload)}")


class PortForward:
    """A forward `Client.port_forward` made: listening on `address:port` until closed."""

    def __init__(self, listener: Any) -> None:
        import threading

        self._listener = listener
        self.address: str = listener.address
        self.port: int = listener.listening[0].local
        self._stop = threading.Event()
        self._thread = threading.Thread(target=listener.serve, args=(self._stop,),
                                        daemon=True, name="devcell-port-forward")
        self._thread.start()

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening (connections open go on until they end)."""
        self._stop.set()
        self._thread.join()
        self._listener.close()


def _relay_port(ws: Any, sock: Any, on_error: Callable[[str], object] | None) -> None:
    """A port-forward WebSocket and a local connection, relayed both ways (a thread for the
    local side's bytes, this one for the port's) until both ended or either broke."""
    import threading

    from websockets.exceptions import ConnectionClosed

    from devcell.server import framing

    def outward() -> None:
        try:
            while True:
                data = sock.recv(framing.MAX_STDIN)
                ws.send(framing.frame(framing.STDIN, data))
                if not data:
                    return
        except (OSError, ConnectionClosed):
            pass

    sending = threading.Thread(target=outward, daemon=True, name="devcell-forward-out")
    sending.start()
    try:
        while True:
            message = ws.recv()
            if not isinstance(message, bytes) or not message:
                continue
            channel, payload = framing.split(message)
            if channel == framing.STDOUT:
                if payload:
                    sock.sendall(payload)
                else:
                    sock.shutdown(socket.SHUT_WR)
            elif channel == framing.STATUS:
                _port_status(bytes(payload), on_error)
                return
    except ConnectionClosed:
        if on_error is not None:
            on_error("the port-forward stream ended without a status")
    except OSError:
        pass  # the local side went away: closing the WebSocket ends the connection
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # the sending thread's recv ends


def _port_status(payload: bytes, on_error: Callable[[str], object] | None) -> None:
    """A port-forward stream's STATUS: closed, or the problem that ended it, told."""
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and doc.get("closed") is True:
        return
    if on_error is not None:
        detail = doc.get("detail") if isinstance(doc, dict) else None
        on_error(printable(str(detail)) if detail else
                 f"the port-forward stream ended with a status that is not DevCell's: "
                 f"{_shown(payload)}")


def _quiet_logger() -> Any:
    """websockets' logger for an exec stream: silent. Its reader thread logs "unexpected
    internal error" with a traceback when a refused upgrade's connection ends under it
    (about one in 300 over TLS); the refusal is raised as DevCell's error, and stdlib
    logging with no handler would print the traceback on the caller's stderr."""
    import logging

    quiet = logging.getLogger("devcell.client.websockets")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
    return quiet


def _recorded(resource: str) -> None:
    """Refuse nodes where only the control plane's records are served (rows, watch): nodes
    are the engine's, read afresh by each list."""
    if resource == "nodes":
        raise errors.UsageError("nodes are read from the engine by each list: list(\"nodes\") "
                                "(no rows, no watch)")


def _path(resource: str) -> str:
    if resource not in RESOURCES:
        raise errors.UsageError(f"{resource!r}: one of {', '.join(RESOURCES)}")
    return f"/api/v1/{resource}"


_BY_STATUS: dict[int, type[errors.DevCellError]] = {
    400: errors.UsageError, 404: errors.NotFound, 409: errors.Conflict,
    503: errors.TemporaryError,
}


def _manifests_body(manifests: str | bytes | dict[str, Any], as_json: bool
                    ) -> tuple[bytes, str]:
    """An apply's or diff's body and its media type."""
    if isinstance(manifests, dict):
        return json.dumps(manifests).encode(), "application/json"
    body = manifests.encode() if isinstance(manifests, str) else manifests
    return body, "application/json" if as_json else "application/yaml"


def _raise(status: int, data: bytes) -> NoReturn:
    """The server's problem document as DevCell's own error for its status."""
    try:
        problem = json.loads(data)
        detail = str(problem.get("detail", ""))
    except (ValueError, AttributeError, RecursionError):
        problem, detail = {}, data[:500].decode("utf-8", "replace")
    exc: errors.DevCellError
    if status == 422 and str(problem.get("type", "")).endswith("/archive-refused"):
        exc = errors.ArchiveRefused(detail)
    elif status == 422:
        listed = problem.get("problems")
        exc = errors.ManifestError([errors.Problem(
            _text(p.get("file")), _text(p.get("message")), _number(p.get("line")),
            _number(p.get("column")), _text(p.get("kind")) or None,
            _text(p.get("name")) or None, _text(p.get("field")) or None)
            for p in (listed if isinstance(listed, list) else []) if isinstance(p, dict)]
            or [errors.Problem("request", detail)])
    elif status == 401:
        exc = errors.Unauthenticated()
    elif status == 403:
        rule = detail.partition("refused by rule ")[2].partition(" ")[0]
        exc = errors.Forbidden(detail, rule=rule)
    else:
        exc = _BY_STATUS.get(status, errors.DevCellError)(detail or f"HTTP {status}")
    exc.problem = problem  # type: ignore[attr-defined]
    raise exc


def _text(value: Any) -> str:
    """A problem's string field as the server sent it ("" when it sent none or no string)."""
    return value if isinstance(value, str) else ""


def _number(value: Any) -> int | None:
    """A problem's line or column (None when it is no whole number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
