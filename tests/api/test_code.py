"""`devcell code`'s reading of the annotations (malformed ones said, never used) and what it
asks of the cell (api/code.py), against a stand-in for a backend's exec; the real engine's
run is in tests/e2e/test_devcontainer_lifecycle.py."""

from __future__ import annotations

import json
from typing import Any, BinaryIO

from devcell.api import code
from devcell.api.devcontainer_lifecycle import EXTENSIONS, SETTINGS
from devcell.backends.base import CellRef


def test_annotations_are_read_and_malformed_ones_said() -> None:
    good = code.wanted({EXTENSIONS: '["a.b","a.b","c.d@1.2.3"]', SETTINGS: '{"x": 1}'})
    assert good.extensions == ["a.b", "c.d@1.2.3"] and good.settings == {"x": 1}
    assert not good.problems
    bad = code.wanted({EXTENSIONS: '["a.b", "--force"]', SETTINGS: "[1]"})
    assert bad.extensions == [] and bad.settings is None and len(bad.problems) == 2
    assert code.wanted({}) == code.Editor()


class _Cell:
    def __init__(self, statuses: list[int], output: bytes = b"") -> None:
        self.statuses = statuses
        self.output = output
        self.calls: list[tuple[list[str], bytes | None]] = []

    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO,
             stdin: BinaryIO | None = None, terminal: Any = None, options: Any = None) -> int:
        self.calls.append((argv, stdin.read() if stdin is not None else None))
        stdout.write(self.output)
        return self.statuses.pop(0)


def test_settings_then_extensions_as_argv_and_the_cells_output_bounded_and_escaped() -> None:
    said: list[str] = []
    cell = _Cell([0, 1], b"\x1b[31mno network\n" + b"x" * 100_000)
    ref = CellRef("cell_1", "web", {"workspace": {"mountPath": "/w"}})
    editor = code.Editor(["a.b"], {"k": "v"})
    assert not code.apply(cell, ref, editor, said.append)  # type: ignore[arg-type]
    (settings_argv, data), (install_argv, _) = cell.calls
    assert settings_argv[:2] == ["/bin/sh", "-c"] and json.loads(data or b"") == {"k": "v"}
    assert install_argv[3:] == ["devcell-code", "a.b"]  # ids as arguments, never in the script
    assert said[1].startswith("warning: extensions not all installed (status 1): \\x1b[31m")
    assert len(said[1]) < code.OUTPUT_LIMIT + 200
    assert code.open_argv(ref) == ["code", "--folder-uri", "vscode-remote://ssh-remote+web.devcell/w"]


def test_annotations_nested_past_the_parsers_depth_are_said_not_raised() -> None:
    """4096 '[' (an annotation's most): json raised RecursionError, a traceback of `devcell
    code` after the cell was opened (attack44); now the malformed annotation it is."""
    deep = code.wanted({EXTENSIONS: "[" * 4096, SETTINGS: "[" * 4096})
    assert deep.extensions == [] and deep.settings is None and len(deep.problems) == 2


def test_the_workspace_folder_is_percent_encoded_in_the_uri() -> None:
    """A mountPath holding `#`, `?`, `%` or a space (the schema allows them) is a path of the
    URI, not its fragment or query."""
    assert code.folder_uri("web", "/workspace") == "vscode-remote://ssh-remote+web.devcell/workspace"
    assert code.folder_uri("web", "/a b#c?d%") == (
        "vscode-remote://ssh-remote+web.devcell/a%20b%23c%3Fd%25")
