"""Where `import devcontainer -o FILE` writes its manifest, checked before anything is made:
a refusal (an empty name from an unset variable, a directory, a folder that does not exist)
is one line naming -o, and the write itself goes through a temporary file beside the target
that is removed when the write fails, so a refused or failed import leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from devcell import safeio
from devcell.errors import DevCellError


class OutputRefused(DevCellError):
    """-o names a place the manifest cannot be written to."""


def target(output: str, cwd: Path) -> Path:
    """The file `output` names (relative to `cwd`), or OutputRefused saying why not."""
    if not output:
        raise OutputRefused("-o: an empty file name (an unset variable?); give a file name, "
                            "or leave -o out to print the manifest")
    if "\0" in output:
        raise OutputRefused("-o: the file name holds a NUL character")
    path = cwd / output
    shown = repr(output)
    mode = _mode(path)
    if output.endswith("/") or mode is not None and stat.S_ISDIR(mode):
        raise OutputRefused(f"-o {shown} is a directory; name a file in it "
                            f"(-o {os.path.join(output, 'cell.yaml')!r})")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputRefused(f"-o {shown} is {safeio.describe_mode(mode)}, not a regular file")
    parent = _mode(path.parent)
    if parent is None:
        raise OutputRefused(f"-o {shown}: no such directory {str(path.parent)!r}; create it "
                            "first")
    if not stat.S_ISDIR(parent):
        raise OutputRefused(f"-o {shown}: {str(path.parent)!r} is not a directory")
    return Path(output)  # as given: relative to the working directory, and said so


def _mode(path: Path) -> int | None:
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):
        return None


def write(path: Path, text: str) -> None:
    """`text` into `path` at once (a temporary file renamed over it); nothing left on failure."""
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(temporary, "x", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise OutputRefused(f"-o {str(path)!r}: cannot write it: {exc.strerror}") from None
