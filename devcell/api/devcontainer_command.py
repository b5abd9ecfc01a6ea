"""`overrideCommand: false`: the image's own command (a server, a desktop) kept running.

A dev container normally replaces the image's command with a sleep; `overrideCommand:
false` keeps it as the container's main process. A cell's main process is always DevCell's
supervisor, so the command becomes a service it supervises (`spec.services`, named `main`,
restarted when it exits, in the image's working directory). The command is read at import:

- for `image`, from the image's configuration (Entrypoint then Cmd, as the engine joins
  them), when the engine has the image; otherwise the import warns that it could not, and
  says to pull the image and import again;
- for `build`, from the Dockerfile: the CMD and ENTRYPOINT of the stage built (the target,
  else the last), following FROM through earlier stages and, at the first outside image,
  that image's configuration when the engine has it; an ENTRYPOINT resets a CMD inherited
  from below, as the engine does.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from devcell import safeio

_FROM = re.compile(r"FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?\s*", re.IGNORECASE)
_ARGS = re.compile(r"(CMD|ENTRYPOINT|WORKDIR)\s+(.*)", re.IGNORECASE | re.DOTALL)
MAX_DOCKERFILE = 1 << 20


def keep(data: dict[str, Any], spec: dict[str, Any], dockerfile: Path | None) -> list[str]:
    """Add the image's command to spec.services when overrideCommand is false; the
    warnings it makes."""
    if data.get("overrideCommand") is not False:
        return []
    found = _command(spec, dockerfile)
    if isinstance(found, str):
        return [f"overrideCommand: false: not converted ({found}); write the image's command "
                "as a spec.services entry"]
    command, workdir = found
    if workdir and workdir != "/":
        command = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', workdir, *command]
    spec.setdefault("services", []).append({"name": "main", "command": command})
    return []


def _command(spec: dict[str, Any], dockerfile: Path | None
             ) -> tuple[list[str], str | None] | str:
    """(argv, working directory) of what the image runs, or why it is not known."""
    if "image" in spec:
        return _from_image(str(spec["image"]))
    if dockerfile is None:
        return "the image is not known at import"
    try:  # never blocking: a FIFO planted as the Dockerfile would hold the import for ever
        fd = os.open(dockerfile, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot read {dockerfile}: {exc.strerror}"
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return f"{dockerfile} is {safeio.describe_mode(mode)}, not a regular file"
        try:
            text = f.read(MAX_DOCKERFILE).decode("utf-8", "replace")
        except OSError as exc:
            return f"cannot read {dockerfile}: {exc.strerror}"
    return _from_dockerfile(text, (spec.get("build") or {}).get("target"))


def _from_image(image: str) -> tuple[list[str], str | None] | str:
    parts = _image_parts(image)
    if isinstance(parts, str):
        return parts
    entrypoint, cmd, workdir = parts
    if not entrypoint + cmd:
        return f"the image {image} has no command"
    return entrypoint + cmd, workdir


def _image_parts(image: str) -> tuple[list[str], list[str], str | None] | str:
    """(Entrypoint, Cmd, WorkingDir) of an image the engine has, or why not known."""
    if image == "scratch":
        return [], [], None
    from devcell.backends.container import observe

    config = observe.image_config(image)
    if config is None:
        return (f"the engine has no image {image} to read its command from; pull it "
                "(docker pull) and import again")
    return ([str(a) for a in config.get("Entrypoint") or []],
            [str(a) for a in config.get("Cmd") or []],
            str(config.get("WorkingDir") or "") or None)


def _from_dockerfile(text: str, target: Any) -> tuple[list[str], str | None] | str:
    stages: list[tuple[str, str | None, list[tuple[str, str]]]] = []
    for line in _instructions(text):
        found = _FROM.fullmatch(line)
        if found:
            stages.append((found.group(1), found.group(2), []))
        elif stages and (m := _ARGS.fullmatch(line)):
            stages[-1][2].append((m.group(1).upper(), m.group(2).strip()))
    if not stages:
        return "the Dockerfile has no FROM"
    names = {str(name).lower(): i for i, (_, name, _) in enumerate(stages) if name}
    at: int | None = names.get(str(target).lower()) if target else len(stages) - 1
    if at is None:
        return f"the Dockerfile has no stage {target}"
    cmd: list[str] | None = None
    entrypoint: list[str] | None = None
    workdir: str | None = None
    seen: set[int] = set()
    while at is not None and at not in seen:
        seen.add(at)
        base, _, steps = stages[at]
        for kind, value in reversed(steps):
            if kind == "CMD" and cmd is None:
                cmd = _argv(value)
            elif kind == "ENTRYPOINT" and entrypoint is None:
                entrypoint = _argv(value)
                cmd = [] if cmd is None else cmd  # resets a CMD from below
            elif kind == "WORKDIR" and workdir is None and value.startswith("/"):
                workdir = value
        at = names.get(base.lower())
        if at is None and (cmd is None or entrypoint is None):
            if "$" in base:
                return f"the Dockerfile's base image {base} holds a build argument"
            parts = _image_parts(base)
            if isinstance(parts, str):
                if entrypoint is None:  # the base image's entrypoint would come first
                    return parts
                break
            image_entrypoint, image_cmd, image_dir = parts
            entrypoint = image_entrypoint if entrypoint is None else entrypoint
            cmd = image_cmd if cmd is None else cmd
            workdir = workdir or image_dir
    command = (entrypoint or []) + (cmd or [])
    if not command:
        return "the Dockerfile's image has no command"
    return command, workdir


def _instructions(text: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    out: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        out.append(current + line)
        current = ""
    if current:
        out.append(current)
    return out


def _argv(value: str) -> list[str]:
    """CMD/ENTRYPOINT's exec form (a JSON array) as is, its shell form under /bin/sh -c."""
    if value.startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(a, str) for a in parsed):
            return list(parsed)
    return ["/bin/sh", "-c", value]
