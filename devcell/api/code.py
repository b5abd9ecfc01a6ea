"""`devcell code CELL`: VS Code on a cell over Remote-SSH, with the extensions and settings
its devcontainer.json asked for (the annotations `import devcontainer` writes).

No editor runs in or for DevCell, so applying them means what the devcontainer CLI and
Codespaces do on the remote side, done in the running cell as its user:
- settings: written as VS Code's machine settings of the remote,
  `~/.vscode-server/data/Machine/settings.json`, when that file does not exist yet (the
  developer's own are never overwritten);
- extensions: installed with the VS Code server already in the cell
  (`~/.vscode-server/bin/*/bin/code-server --install-extension ID`, or the newer
  `~/.vscode-server/cli/servers/*/server/bin/code-server`); the server is put there by
  VS Code's first connection, so before it the command says to run it again after;
- then `code --folder-uri vscode-remote://ssh-remote+CELL.devcell/WORKSPACE` (Remote-SSH
  through the block of `devcell ssh-config`), or that command printed.

What the cell prints is hostile: read bounded and escaped before it is shown.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devcell import names
from devcell.api.devcontainer_lifecycle import EXTENSIONS, SETTINGS
from devcell.backends.base import CellRef
from devcell.backends.interactive import Interactive

OUTPUT_LIMIT = 16 * 1024
_EXTENSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*\.[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9.+-]+)?")
NO_SERVER = 3
"""The install script's status when no VS Code server is in the cell yet."""

_SETTINGS = """f="${HOME:-/root}/.vscode-server/data/Machine/settings.json"
if [ -e "$f" ] || [ -L "$f" ]; then echo "kept $f (it exists)"; exit 0; fi
mkdir -p "${f%/*}" && cat >"$f" && echo "wrote $f"
"""
_INSTALL = """server=
for s in "${HOME:-/root}"/.vscode-server/bin/*/bin/code-server \\
         "${HOME:-/root}"/.vscode-server/cli/servers/*/server/bin/code-server; do
    [ -x "$s" ] && server=$s
done
[ -n "$server" ] || exit NO_SERVER
rc=0
for ext in "$@"; do "$server" --install-extension "$ext" || rc=1; done
exit $rc
""".replace("NO_SERVER", str(NO_SERVER))


@dataclass(frozen=True)
class Editor:
    """What the cell's annotations ask of VS Code, and why any part of them was left out."""

    extensions: list[str] = field(default_factory=list)
    settings: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)


def wanted(annotations: dict[str, str]) -> Editor:
    """The extensions and settings the annotations name (a malformed one is said, not used:
    annotations are free text anyone applying a manifest may write)."""
    problems: list[str] = []
    extensions: list[str] = []
    settings: dict[str, Any] | None = None
    if EXTENSIONS in annotations:
        try:
            listed = json.loads(annotations[EXTENSIONS])
        except (ValueError, RecursionError):  # 4096 '[': past the parser's depth
            listed = None
        if isinstance(listed, list) and all(isinstance(e, str) and _EXTENSION.fullmatch(e)
                                            for e in listed):
            extensions = list(dict.fromkeys(listed))
        else:
            problems.append(f"annotation {EXTENSIONS} is not a JSON array of extension ids "
                            "(publisher.name); no extension installed")
    if SETTINGS in annotations:
        try:
            settings = json.loads(annotations[SETTINGS])
        except (ValueError, RecursionError):
            settings = None
        if not isinstance(settings, dict):
            settings = None
            problems.append(f"annotation {SETTINGS} is not a JSON object; no settings written")
    return Editor(extensions, settings, problems)


def folder_uri(cell: str, folder: str) -> str:
    """The workspace folder of `cell` as VS Code's Remote-SSH names it (ssh-config's Host)."""
    # percent-encoded: a mountPath holding `#`, `?`, `%` or a space is a path, not the URI's
    # fragment or query (VS Code decodes it back)
    return f"vscode-remote://ssh-remote+{cell}.devcell{urllib.parse.quote(folder, safe='/')}"


def open_argv(cell: CellRef) -> list[str]:
    folder = str((cell.spec.get("workspace") or {}).get("mountPath") or "/workspace")
    return ["code", "--folder-uri", folder_uri(cell.name, folder)]


class _Bounded(io.RawIOBase):
    """A sink keeping the first OUTPUT_LIMIT bytes of what the cell prints."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        room = OUTPUT_LIMIT - len(self.data)
        if room > 0:
            self.data += bytes(data)[:room]
        return len(data)

    def text(self) -> str:
        return names.printable_lines(self.data.decode(errors="replace").strip())


def apply(backend: Interactive, cell: CellRef, editor: Editor,
          say: Callable[[str], None]) -> bool:
    """Write the settings and install the extensions in the running cell, as its user,
    saying each outcome; False when an extension could not be installed (or no server was
    there to install it)."""
    for problem in editor.problems:
        say(f"warning: cell {names.printable(cell.name)}: {problem}")
    if editor.settings is not None:
        out = _Bounded()
        data = json.dumps(editor.settings, indent=4, sort_keys=True).encode() + b"\n"
        code = backend.exec(cell, ["/bin/sh", "-c", _SETTINGS], stdout=out,  # type: ignore[arg-type]
                            stderr=out, stdin=io.BytesIO(data))  # type: ignore[arg-type]
        say(f"settings: {out.text()}" if code == 0 else
            f"warning: settings not written (status {code}): {out.text()}")
    if not editor.extensions:
        return True
    out = _Bounded()
    code = backend.exec(cell, ["/bin/sh", "-c", _INSTALL, "devcell-code", *editor.extensions],
                        stdout=out, stderr=out)  # type: ignore[arg-type]
    listed = " ".join(editor.extensions)
    if code == NO_SERVER:
        say(f"extensions: VS Code's server is not in the cell yet (its first connection puts it "
            f"there); run `devcell code {names.printable(cell.name)}` again after it to install "
            f"{listed}")
        return False
    if code != 0:
        say(f"warning: extensions not all installed (status {code}): {out.text()}")
        return False
    say(f"extensions: installed {listed}")
    return True


def shown(argv: list[str]) -> str:
    return names.printable(shlex.join(argv))
