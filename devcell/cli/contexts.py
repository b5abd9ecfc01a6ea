"""The contexts file (kubectl's kubeconfig, for DevCell): named servers the CLI talks to,
each with its token file and the certificate to trust, and which one is current.

Where: $DEVCELL_CONTEXTS, else $XDG_CONFIG_HOME/devcell/contexts.json, else
~/.config/devcell/contexts.json. JSON (the standard library reads it in a fraction of a
millisecond: every command looks for it), written owner-only (0600, its folder 0700) by
`devcell context set|use|delete`; a file another user owns or may write is refused, since
whoever writes it chooses the server this CLI sends its token to.

No file, or no current context: the CLI uses the state directory, as it always did, and
nothing of this module is imported (cli/main.py only asks whether the file exists).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from devcell.errors import DevCellError, UsageError
from devcell.names import printable

ENV = "DEVCELL_CONTEXTS"
MAX_BYTES = 1024 * 1024
KIND = "Contexts"
FIELDS = ("server", "tokenFile", "certificateAuthority")
"""A context's fields: the server's URL (unix:PATH or https://HOST:PORT), the file holding
its token, the certificate (PEM) that signed the server's (DevCell's own: its
api-tls/cert.pem)."""


def path() -> Path:
    """Where the contexts file is (it need not exist)."""
    given = os.environ.get(ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "devcell" / "contexts.json"


def load() -> dict[str, Any]:
    """The file's content ({"current": NAME|None, "contexts": {NAME: {field: value}}}); an
    empty one when there is no file. One line naming the file when it cannot be used."""
    where = path()
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {"current": None, "contexts": {}}
    except OSError as exc:
        raise DevCellError(f"{printable(str(where))}: {exc.strerror}: the contexts file "
                          f"(${ENV}) cannot be read") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DevCellError(f"{printable(str(where))}: the contexts file is not a regular "
                              "file")
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise DevCellError(
                f"{printable(str(where))}: the contexts file must be yours and writable by "
                f"you alone (whoever writes it chooses the server your token is sent to): "
                f"chmod 600 {printable(str(where))}")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise DevCellError(f"{printable(str(where))}: the contexts file is over 1 MiB")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
        raise DevCellError(f"{printable(str(where))}: the contexts file is not JSON "
                          f"({printable(str(exc))}); fix it or remove it") from None
    return _checked(where, doc)


def _checked(where: Path, doc: Any) -> dict[str, Any]:
    shown = printable(str(where))
    if not isinstance(doc, dict) or not isinstance(doc.get("contexts", {}), dict):
        raise DevCellError(f"{shown}: contexts: a mapping of names to contexts")
    contexts: dict[str, dict[str, str]] = {}
    for name, ctx in doc.get("contexts", {}).items():
        if not isinstance(ctx, dict) or not all(
                k in FIELDS and isinstance(v, str) for k, v in ctx.items()):
            raise DevCellError(f"{shown}: contexts.{printable(name)}: fields "
                              f"{', '.join(FIELDS)}, each a string")
        if "server" not in ctx:
            raise DevCellError(f"{shown}: contexts.{printable(name)}: no server")
        contexts[name] = dict(ctx)
    current = doc.get("current")
    if current is not None and (not isinstance(current, str) or current not in contexts):
        raise DevCellError(f"{shown}: current: {printable(str(current))!r} is not one of its "
                          "contexts (devcell context use NAME)")
    return {"current": current, "contexts": contexts}


def save(doc: dict[str, Any]) -> Path:
    """Write the file owner-only, atomically (a new file renamed over the old one)."""
    where = path()
    where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = where.with_name(f".{where.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump({"apiVersion": "devcell.dev/v1", "kind": KIND,
                       "current": doc.get("current"), "contexts": doc["contexts"]},
                      out, indent=2, sort_keys=True)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, where)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return where


def chosen(name: str | None) -> tuple[str, dict[str, str]] | None:
    """(name, context) of `--context NAME`, else the current one; None: none is."""
    doc = load()
    wanted = name if name is not None else doc["current"]
    if wanted is None:
        return None
    if wanted not in doc["contexts"]:
        known = ", ".join(sorted(doc["contexts"])) or "none"
        raise UsageError(f"--context {printable(wanted)!r}: no such context in "
                         f"{printable(str(path()))} (known: {printable(known)}; "
                         "devcell context set NAME --server URL)")
    return wanted, doc["contexts"][wanted]
