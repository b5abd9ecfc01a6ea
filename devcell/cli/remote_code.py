"""`devcell code CELL` through a server (cli/remote.py): VS Code on a cell of a team's server.

As on the server's machine: the editor settings and extensions the cell's annotations ask
for are written and installed in the running cell, then its postAttach hooks run, then VS
Code opens on `CELL.devcell` over Remote-SSH (its ProxyCommand reaches the cell through the
server: `devcell --context NAME ssh-config CELL`). Each command in the cell goes through the
API's exec stream as the caller (the `exec` verb on the cell: a developer's own cells and
those shared with them); a sleeping cell is woken by it, said as the server says it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any, BinaryIO

from devcell import names
from devcell.backends.base import CellRef
from devcell.backends.interactive import ExecOptions, Terminal
from devcell.client import not_api
from devcell.errors import DevCellError, UsageError
from devcell.names import printable

MAX_INPUT = 16 << 20
"""A command's input (the editor's settings file, indented: a 4 KiB annotation nested 700
deep is 2 MB of it); one longer is refused, never cut (a cut file is broken JSON)."""
HUNG_UP = 129
"""The status said for a command this side hung up (a postAttach hook past its limit)."""
MAX_MOUNT_PATH, MAX_HOOKS, MAX_ANNOTATIONS, MAX_ANNOTATION = 255, 16, 64, 4096
"""The cell schema's bounds (schemas/cell.schema.json), checked on a server's cell."""


class _ThroughServer:
    """The cell's commands through the server's exec stream: what api.code and
    api.post_attach run them with (backends.interactive.Interactive's exec)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO,
             stdin: BinaryIO | None = None, terminal: Terminal | None = None,
             options: ExecOptions | None = None) -> int:
        from devcell.cli import remote_streams
        from devcell.server import framing

        if terminal is not None:
            raise UsageError("a terminal is not served to `devcell code`'s commands")
        session = options or ExecOptions()
        data = stdin.read(MAX_INPUT + 1) if stdin is not None else None
        if data is not None and len(data) > MAX_INPUT:  # 1 MiB was cut: settings.json broken
            raise UsageError(f"exec in cell {printable(cell.name)}: an input over "
                             f"{MAX_INPUT >> 20} MiB is not sent")
        ws = self.client.exec_socket(cell.name, argv, stdin=data is not None,
                                     env=list(session.env) or None, workdir=session.workdir,
                                     user=session.user)
        with ws:
            if data is not None:
                for at in range(0, len(data), framing.MAX_STDIN):
                    ws.send(framing.frame(framing.STDIN, data[at:at + framing.MAX_STDIN]))
                ws.send(framing.frame(framing.STDIN, b""))
            status = remote_streams.relay_output(
                ws, cell.name, {framing.STDOUT: stdout, framing.STDERR: stderr},
                session.hang_up)
        return HUNG_UP if status is None else status  # None: hung up, the stream closed

    def log_sources(self, cell: CellRef) -> Any:
        raise UsageError("`devcell code` reads no logs")


def run_code(args: argparse.Namespace) -> int:
    from devcell.api import code, post_attach
    from devcell.cli.cmd_code import open_editor, say

    client = args.remote
    ref, annotations = _cell(client, args.cell)
    through = _ThroughServer(client)
    _open(through, ref)
    editor = code.wanted(annotations)
    if editor.settings is None and not editor.extensions and not editor.problems:
        sys.stderr.write(f"cell {printable(ref.name)}: no VS Code extensions or settings in "
                         "its annotations\n")
    code.apply(through, ref, editor, say=say)
    post_attach.run(through, ref, out=sys.stderr.buffer)
    return open_editor(ref.name, code.open_argv(ref), print_only=args.print,
                       ssh_config=printable(shlex.join(["devcell", *_where(args), "ssh-config"])))


def _open(through: _ThroughServer, ref: CellRef) -> None:
    """The cell opened for the caller before anything is said, as the server's own `code`
    opens it (cli/cell_open.py): one `true` through the exec stream, which the server
    refuses as it refuses an exec (a viewer, another's cell, a backend without commands, a
    cell not running) and which wakes a sleeping cell. Without it, a cell with no editor
    settings or hooks printed VS Code's line and exited 0 for anyone (found by final43)."""
    import io

    out = io.BytesIO()
    status = through.exec(ref, ["true"], stdout=out, stderr=out)
    if status != 0:
        raise DevCellError(f"cell {printable(ref.name)}: a command in it did not succeed "
                           f"(`true` exited {status}): is it running?")


def _cell(client: Any, name: str) -> tuple[CellRef, dict[str, str]]:
    """The cell as the server records it (NotFound as on its machine), and its annotations;
    a document of another shape is not DevCell's API."""
    doc = client.get("cells", name)
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    spec = doc.get("spec") if isinstance(doc, dict) else None
    annotations = (meta or {}).get("annotations") or {}
    if not (isinstance(meta, dict) and isinstance(spec, dict)
            and isinstance(meta.get("name"), str) and isinstance(meta.get("id"), str)
            and isinstance(annotations, dict)
            and all(isinstance(v, str) for v in annotations.values())):
        meta = spec = None
    problem = "a cell that is not one" if meta is None or spec is None else _unsafe(
        meta["name"], spec, annotations)
    if meta is None or spec is None or problem is not None:
        raise not_api(client.url, str(problem))
    return CellRef(id=meta["id"], name=meta["name"], spec=spec), dict(annotations)


def _unsafe(name: str, spec: dict[str, Any], annotations: dict[str, str]) -> str | None:
    """Why the parts of a server's cell this command uses on this machine are not a recorded
    cell's (the schema's bounds), or None. The name and workspace.mountPath make VS Code's
    remote authority and the ssh-config note's command line (a name `x/..`, `-oProxy...` or
    `$(...)`, a mountPath `@host/`: VS Code sent to another host, a note that runs a command
    when pasted: attack44); hooks and annotations of other shapes were tracebacks, and
    unbounded ones an unbounded output."""
    if names.name_problem(name) is not None:
        return "a cell whose name is not a valid cell name"
    workspace = spec.get("workspace", {})
    mount = workspace.get("mountPath", "/workspace") if isinstance(workspace, dict) else None
    if not (isinstance(mount, str) and len(mount) <= MAX_MOUNT_PATH and mount.startswith("/")
            and not any(ord(c) < 0x20 or c == "\x7f" for c in mount)):
        return "a cell whose workspace.mountPath is not an absolute path"
    hooks = spec.get("hooks", {})
    attach = hooks.get("postAttach", []) if isinstance(hooks, dict) else None
    timeout = hooks.get("timeoutSeconds", 60) if isinstance(hooks, dict) else None
    if not (isinstance(attach, list) and len(attach) <= MAX_HOOKS and all(
            isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
            for argv in attach)):
        return "a cell whose hooks.postAttach is not a list of commands"
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 3600:
        return "a cell whose hooks.timeoutSeconds is not a number of seconds (1 to 3600)"
    if len(annotations) > MAX_ANNOTATIONS or any(
            len(v) > MAX_ANNOTATION for v in annotations.values()):
        return (f"a cell with annotations past the schema's bounds ({MAX_ANNOTATIONS}, each "
                f"at most {MAX_ANNOTATION} characters)")
    return None


def _where(args: argparse.Namespace) -> list[str]:
    """The global options that reach this server again (shown in the ssh-config note): the
    --certificate-authority and --token-file given too (their paths, never a token), or
    the note's command failed "no token" when pasted (final43, F6)."""
    from devcell.cli import remote_ssh

    return remote_ssh.reach(args, warn=False)
