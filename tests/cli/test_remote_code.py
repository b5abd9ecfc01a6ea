"""`devcell code` through a server (cli/remote_code.py): what a hostile or broken server's
cell document may make of this machine's VS Code command line and of the note it prints."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devcell.cli import remote_code
from devcell.errors import DevCellError


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
