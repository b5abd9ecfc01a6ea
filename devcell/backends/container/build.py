"""The container backend's image builds (spec.build): the digest that names a build, and the
build itself through the engine.

An image built from a Dockerfile is tagged by a digest of exactly what the build would send:
the files docker-py puts in the context archive (its own `.dockerignore` matcher,
`docker.utils.build.exclude_paths`, so the digest and the archive can never disagree), each
file's type, permission bits and content (a link's target, never what it points to), plus the
Dockerfile's path, the build arguments and the target. An unchanged context names an image
the engine already has, so a re-apply costs a walk and a hash, never a build; a changed one
names a new image, which changes the cell's runtime hash and so recreates the cell.

The image carries one label, `dev.devcell.state-dir` (the state directory whose build made
it); the cell it was built for is named by its tag. The classic builder (the engine's build
API) turns each label into a LABEL step of its own, a container made and committed (0.1-0.3 s
each on a busy engine): the five labels carried before (managed, cell, cell id, digest)
cost more than the rest of a cached build. One label that is the same for every cell of the
state directory also lets a second cell built from the same context share the image, every
step cached, as a second `docker build` would. And a container someone runs from the image
inherits no label that makes it DevCell's (`dev.devcell.managed` and the cell id are the
container's own labels, given only by DevCell's create).

Part of the container backend: with `container/backend.py`, the only modules that import docker.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import docker.errors
import docker.utils.build
import requests.exceptions
import urllib3.exceptions

from devcell import names, progress
from devcell.backends.container import build_tags
from devcell.backends.container.pull import timed_out
from devcell.backends.container.spec import CELL_ID, STATE
from devcell.errors import BackendError, ImageBuildFailed
from devcell.log import logger

REPOSITORY = build_tags.REPOSITORY
tag_for = build_tags.tag_for
"""Images DevCell builds are tagged devcell-build/<state>/<cell>:<digest> (build_tags)."""
OUTPUT_TAIL = 2000
"""Characters of a failed build's output kept for the Ready condition's message."""
STEP_LIMIT = 200
"""Characters of the failing step's line (a Dockerfile line, up to 64 KiB) kept with it."""
_CHUNK = 1 << 20
TIMEOUT = 1800.0
"""Seconds a build may take when spec.build.timeoutSeconds does not say."""


def _ignore_patterns(context: str) -> list[str]:
    """The context's .dockerignore as docker-py reads it (blank lines and comments dropped),
    opened without following a link."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(os.path.join(context, ".dockerignore"), flags)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ImageBuildFailed(f"cannot read {context}/.dockerignore ({exc.strerror}); it must "
                               "be a regular file") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ImageBuildFailed(f"{context}/.dockerignore is not a regular file")
        text = f.read(1 << 20).decode("utf-8", errors="replace")
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def _hash_entry(h: Any, root: str, rel: str) -> None:
    path = os.path.join(root, rel)
    st = os.lstat(path)
    h.update(f"{rel}\0{stat.S_IFMT(st.st_mode)}\0{stat.S_IMODE(st.st_mode)}\0".encode(
        "utf-8", "surrogateescape"))
    if stat.S_ISLNK(st.st_mode):
        h.update(os.readlink(path).encode("utf-8", "surrogateescape"))
    elif stat.S_ISREG(st.st_mode):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ImageBuildFailed(f"{path} changed while its digest was taken")
            h.update(str(st.st_size).encode() + b"\0")
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    h.update(b"\n")


def outside_context(context: str, dockerfile: str) -> bool:
    """Whether the Dockerfile lies outside the context (`-f ../Dockerfile`): docker-py then
    sends its text in the context's archive under a name of its own."""
    return os.path.relpath(os.path.join(context, dockerfile), context).startswith("..")


def digest(build: dict[str, Any]) -> str:
    """The digest naming the image `build` makes (see the module's docstring)."""
    context = str(build["context"])
    dockerfile = str(build.get("dockerfile", "Dockerfile"))
    if not os.path.isdir(context):
        raise ImageBuildFailed(f"the build context {context} is not a directory")
    h = hashlib.sha256()
    h.update(repr((dockerfile, sorted((build.get("args") or {}).items()),
                   build.get("target"))).encode())
    try:
        included = docker.utils.build.exclude_paths(
            context, _ignore_patterns(context), dockerfile=dockerfile)
        for rel in sorted(included):
            _hash_entry(h, context, rel)
        if outside_context(context, dockerfile):  # its text is sent beside the context
            real = os.path.realpath(os.path.join(context, dockerfile))
            _hash_entry(h, os.path.dirname(real), os.path.basename(real))
    except OSError as exc:
        raise ImageBuildFailed(f"cannot read the build context {context}: "
                               f"{exc.strerror or exc}") from None
    return h.hexdigest()


class _Output:
    """The tail of a build's output and the step it was in, for a failure's message."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=40)
        self.step = ""

    def add(self, text: str) -> None:
        for line in text.splitlines():
            if line.strip():
                self.lines.append(line.rstrip())
                if line.startswith("Step "):
                    step = line.strip()
                    self.step = (step if len(step) <= STEP_LIMIT
                                 else step[:STEP_LIMIT] + "…")

    def tail(self) -> str:
        text = "\n".join(self.lines)
        return text[-OUTPUT_TAIL:]


class _Watch:
    """A build's limits: the total time (`spec.build.timeoutSeconds`) and the silence allowed
    (`images.buildIdleTimeoutSeconds`). The stream is read with a socket timeout of the
    silence allowed; a timer stops the build at its deadline. Stopping removes the container
    of the step running now, the one this build's output named (` ---> Running in <id>`):
    the engine then ends the build with an error, and nothing else is touched."""

    def __init__(self, api: Any, *, total: float, idle: float) -> None:
        self.api = api
        self.total = total
        self.idle = idle
        self.started = time.monotonic()
        self.step_container = ""
        self.why = ""
        self._lock = threading.Lock()
        self._timer = threading.Timer(total, self.stop, args=(
            f"it ran longer than spec.build.timeoutSeconds ({total:g} s)",))
        self._timer.daemon = True

    def __enter__(self) -> _Watch:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def saw(self, text: str) -> None:
        match = _RUNNING_IN.search(text)
        if match:
            with self._lock:
                self.step_container = match.group(1)

    def stop(self, why: str) -> None:
        """Record why the build is stopped and remove the container of its running step."""
        with self._lock:
            self.why = self.why or why
            container, self.step_container = self.step_container, ""
        if container:
            with contextlib.suppress(docker.errors.DockerException,
                                     requests.exceptions.RequestException):
                self.api.remove_container(container, force=True)

    def idle_stop(self) -> None:
        """The stream went silent for its read timeout: stop the build, saying which limit."""
        if time.monotonic() - self.started >= self.total:
            self.stop(f"it ran longer than spec.build.timeoutSeconds ({self.total:g} s)")
        self.stop(f"it printed nothing for {self.idle:g} s "
                  "(images.buildIdleTimeoutSeconds of DevCell's configuration)")


_RUNNING_IN = re.compile(r"---> Running in ([0-9a-f]{12,64})\b")


def build(api: Any, *, cell_name: str, owner: str, build_spec: dict[str, Any], tag: str,
          idle_timeout: float = 600.0) -> str:
    """Build `build_spec` as `tag` through the engine (docker-py's low-level client `api`),
    labelled as DevCell's; the image id, or ImageBuildFailed with the failing step's output,
    or with the limit it broke (see _Watch)."""
    context = str(build_spec["context"])
    labels = {STATE: owner}  # the cell: the tag (see the module's docstring)
    out = _Output()
    log = logger.bind(backend="container", cell=cell_name)
    found: list[str] = []
    total = float(build_spec.get("timeoutSeconds") or TIMEOUT)
    watch = _Watch(api, total=total, idle=idle_timeout)
    try:
        with watch:
            _run(api, watch, out, cell_name=cell_name, context=context, tag=tag,
                 build_spec=build_spec, labels=labels, found=found.append)
    except (docker.errors.BuildError, docker.errors.APIError) as exc:
        out.add(str(getattr(exc, "explanation", None) or exc))
        raise ImageBuildFailed(_failure(cell_name, out, watch.why)) from None
    except (requests.exceptions.ConnectionError, urllib3.exceptions.ReadTimeoutError,
            TimeoutError) as exc:
        if watch.why or timed_out(exc):
            watch.idle_stop()
            raise ImageBuildFailed(_failure(cell_name, out, watch.why)) from None
        raise BackendError(f"building the image of cell {cell_name}: {exc}") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException,
            urllib3.exceptions.HTTPError, OSError) as exc:
        raise BackendError(f"building the image of cell {cell_name}: {exc}") from None
    image_id = found[-1] if found else ""
    log.info("built image {} ({})", tag, image_id[:19] or "?")
    return image_id


def _run(api: Any, watch: _Watch, out: _Output, *, cell_name: str, context: str, tag: str,
         build_spec: dict[str, Any], labels: dict[str, str],
         found: Callable[[str], None]) -> None:
    stream = api.build(path=context, tag=tag, dockerfile=build_spec.get("dockerfile"),
                       buildargs=dict(build_spec.get("args") or {}),
                       target=build_spec.get("target"), labels=labels, rm=True,
                       forcerm=True, decode=True,
                       timeout=min(watch.idle, watch.total))
    try:
        with progress.track_steps(f"building image for cell {cell_name}") as step:
            for chunk in stream:
                if "error" in chunk:
                    out.add(str(chunk.get("error", "")))
                    raise ImageBuildFailed(_failure(cell_name, out, watch.why))
                text = chunk.get("stream")
                if isinstance(text, str):
                    out.add(text)
                    watch.saw(text)
                    if text.startswith("Step "):
                        number, _, total = text[5:].partition(" ")[0].partition("/")
                        if number.isdigit() and total.isdigit():
                            step(int(number), int(total), text.partition(" : ")[2].strip())
                aux = chunk.get("aux")
                if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
                    found(aux["ID"])
    finally:
        stream.close()
    if watch.why:
        raise ImageBuildFailed(_failure(cell_name, out, watch.why))



def drop_superseded(api: Any, *, cell_name: str, cell_id: str, owner: str,
                    keep: str | None) -> list[str]:
    """Remove this cell's builds but `keep` that no container uses any more: images labelled
    as this state directory's, by the tags a build of this cell gives
    (`devcell-build/<state>/<cell>:*`, build_tags.tag_for); an image built before the cell's
    id left the labels still carries it, and one of another cell id is left alone. An image
    still in use (the cell's current container until it is recreated, or anyone's container)
    is left for the next build. `keep=None`: every one of them (the cell is deleted). Returns
    the tags removed. Never forced: the engine refuses to remove what a container uses."""
    removed: list[str] = []
    try:
        found = api.images(filters={"label": [f"{STATE}={owner}"]})
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return removed
    prefix = build_tags.tag_for(owner, cell_name, "")
    for image in found:
        labels = image.get("Labels") or {}
        # Only the tags a build gives (tag_for): labels are inherited by an image a user builds
        # FROM this one, and a tag a user added (`docker tag`) is theirs.
        tags = [t for t in image.get("RepoTags") or [] if t.startswith(prefix)]
        if (labels.get(STATE) != owner or labels.get(CELL_ID, cell_id) != cell_id
                or keep in tags or not tags):
            continue
        try:
            for tag in tags:
                api.remove_image(tag)
            removed += tags
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            continue  # in use (409) or gone: the next build tries again
    return removed


def _failure(cell_name: str, out: _Output, why: str = "") -> str:
    where = f" at {names.printable(out.step)}" if out.step else ""
    stopped = f" (stopped: {why})" if why else ""
    tail = names.printable_lines(out.tail())
    return f"building the image of cell {cell_name} failed{where}{stopped}:\n{tail}"
