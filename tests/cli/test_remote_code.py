"""`devcell code` through a server (cli/remote_code.py): what a hostile or broken server's
cell document may make of this machine's VS Code command line and of the note it prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devcell.cli import remote_code
from devcell.errors import DevCellError, Forbidden


class _Server:
    url = "unix:/run/devcell.sock"

    def __init__(self, doc: Any) -> None:
        self.doc = doc

    def get(self, resource: str, name: str) -> Any:
        return self.doc


def _cell(name: str = "web", spec: Any = None, annotations: Any = None) -> dict[str, Any]:
    return {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell",
            "metadata": {"name": name, "id": "cell_1", "annotations": annotations or {}},
            "spec": {"image": "x"} if spec is None else spec}


def test_a_recorded_cells_document_is_read() -> None:
    ref, annotations = remote_code._cell(_Server(_cell(
        spec={"workspace": {"mountPath": "/src"}, "hooks": {"postAttach": [["true"]],
                                                            "timeoutSeconds": 5}},
        annotations={"devcell.dev/vscode-extensions": '["a.b"]'})), "web")
    assert (ref.name, ref.id, ref.spec["workspace"]) == ("web", "cell_1", {"mountPath": "/src"})
    assert annotations == {"devcell.dev/vscode-extensions": '["a.b"]'}


@pytest.mark.parametrize("doc", [
    _cell(name="-oProxyCommand=touch /tmp/x;y"), _cell(name="evil.example/x"),
    _cell(name="w;$(id)"), _cell(name="W\x1b]0;t\x07"),
    _cell(spec={"workspace": {"mountPath": "@evil.example/x"}}),
    _cell(spec={"workspace": {"mountPath": "/\x1b[2J"}}),
    _cell(spec={"workspace": {"mountPath": 5}}), _cell(spec={"workspace": "x"}),
    _cell(spec={"hooks": "x"}), _cell(spec={"hooks": {"postAttach": 5}}),
    _cell(spec={"hooks": {"postAttach": [[]]}}), _cell(spec={"hooks": {"postAttach": [[1]]}}),
    _cell(spec={"hooks": {"postAttach": [["true"]] * 17}}),
    _cell(spec={"hooks": {"timeoutSeconds": "x"}}),
    _cell(spec={"hooks": {"timeoutSeconds": 1e400}}),
    _cell(annotations={"devcell.dev/vscode-settings": "[" * 5000}),
    _cell(annotations={f"a{i}": "" for i in range(65)}),
    _cell(annotations={"devcell.dev/vscode-extensions": json.dumps(["a.b"] * 100_000)}),
], ids=["name-option", "name-host", "name-shell", "name-escape", "mount-authority",
        "mount-escape", "mount-number", "workspace-text", "hooks-text", "post-attach-number",
        "empty-command", "command-number", "17-hooks", "timeout-text", "timeout-infinite",
        "annotation-long", "65-annotations", "extensions-huge"])
def test_a_hostile_servers_cell_is_not_devcells_api(doc: Any) -> None:
    """A name or mountPath that would put another host (`x/..`, `@host`) or an ssh option in
    VS Code's remote authority, or a command in the printed ssh-config note (`$(id)`), and
    hooks or annotations of other shapes (tracebacks) or past the schema's bounds (unbounded
    output): one error naming the server, before anything runs (attack44)."""
    with pytest.raises(DevCellError, match="is it DevCell's API"):
        remote_code._cell(_Server(doc), "web")


class _Socket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def __enter__(self) -> _Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        """A stand-in's stream: nothing to close."""

    def send(self, message: bytes) -> None:
        self.sent.append(message)

    def recv(self, timeout: float) -> bytes:
        from devcell.server import framing

        return framing.frame(framing.STATUS, b'{"exitCode": 0}')


class _Exec:
    url = "unix:/run/devcell.sock"

    def __init__(self) -> None:
        self.socket = _Socket()

    def exec_socket(self, cell: str, argv: list[str], **options: Any) -> _Socket:
        return self.socket


def test_the_settings_are_sent_whole_not_cut() -> None:
    """A settings annotation nested deep (4 KiB, 650 levels) is ~1.7 MB indented: the first
    1 MiB was sent, a broken settings.json written in the cell (attack44)."""
    import io

    from devcell.api import code
    from devcell.api.devcontainer_lifecycle import SETTINGS
    from devcell.backends.base import CellRef
    from devcell.server import framing

    editor = code.wanted({SETTINGS: '{"a":' * 650 + "1" + "}" * 650})
    server = _Exec()
    said: list[str] = []
    code.apply(remote_code._ThroughServer(server), CellRef("cell_1", "web", {}), editor,
               said.append)
    sent = b"".join(framing.split(m)[1] for m in server.socket.sent)
    assert len(sent) > 1 << 20
    assert json.loads(sent) == editor.settings
    through = remote_code._ThroughServer(_Exec())
    with pytest.raises(DevCellError, match="not sent"):
        through.exec(CellRef("cell_1", "web", {}), ["cat"], stdout=io.BytesIO(),
                     stderr=io.BytesIO(), stdin=io.BytesIO(b"x" * (remote_code.MAX_INPUT + 1)))


def test_code_opens_the_cell_through_the_exec_stream_before_saying_anything(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A cell with no editor settings nor hooks is still opened through the exec stream (the
    server then refuses a viewer, another's cell, a backend without commands, as an exec),
    before VS Code's line is printed: it printed it and exited 0 for anyone (final43)."""
    import argparse

    from devcell.cli.remote import Target

    asked: list[list[str]] = []

    class Server(_Exec):
        def get(self, resource: str, name: str) -> Any:
            return _cell()

        def exec_socket(self, cell: str, argv: list[str], **options: Any) -> _Socket:
            asked.append(argv)
            return self.socket

    args = argparse.Namespace(remote=Server(), cell="web", print=True, token_file=None,
                              remote_target=Target("unix:/run/devcell.sock", None, None, None))
    assert remote_code.run_code(args) == 0
    assert asked == [["true"]]
    assert "vscode-remote://ssh-remote+web.devcell/workspace" in capsys.readouterr().out

    class Refusing(Server):
        def exec_socket(self, cell: str, argv: list[str], **options: Any) -> _Socket:
            raise Forbidden("eve (viewer) may not exec Cell \"web\"", rule="viewer-read-only")

    args.remote = Refusing()
    with pytest.raises(Forbidden):
        remote_code.run_code(args)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("context", [None, "team"])
def test_the_ssh_config_note_names_the_token_file_and_certificate_given(
        context: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The note's command copied --server alone: pasted, it failed "no token" (final43, F6).
    It names the files given, as absolute paths, never the token; a context is named alone
    (it holds them)."""
    import argparse

    from devcell.cli.remote import Target

    class Server(_Exec):
        def get(self, resource: str, name: str) -> Any:
            return _cell()

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config: the note is said
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(
        remote=Server(), cell="web", print=True, token_file="admin.token",
        remote_target=Target("https://h:8443", "dct_secret", "ca.pem", context))
    assert remote_code.run_code(args) == 0
    err = capsys.readouterr().err
    reach = (f"--context {context}" if context else
             f"--server https://h:8443 --certificate-authority {tmp_path}/ca.pem "
             f"--token-file {tmp_path}/admin.token")
    assert f"add it with `devcell {reach} ssh-config web >> ~/.ssh/config`" in err, err
    assert "dct_secret" not in err
