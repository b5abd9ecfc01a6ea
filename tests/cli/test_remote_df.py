"""`devcell df` through a server (cli/remote_df.py): the document the server measures reads
back as the very report `df` printed it from, its -v items and their extra figures too; a
document a server made up is one error line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from devcell.api import df
from devcell.cli import remote_df
from devcell.errors import DevCellError
from tests.conftest import EXAMPLES, Cli


def test_the_servers_document_reads_back_as_its_report(state_dir: Path, cli: Cli) -> None:
    assert cli("apply", "-f", str(EXAMPLES)).returncode == 0
    report = df.df(state_dir)
    assert report.items  # the examples' workspaces, checkpoints and runtimes
    item = report.items[0]
    report = df.Report(report.rows, (df.Item(item.type, item.name, item.backend, item.owner,
                                             item.active, item.size, item.logical, item.detail,
                                             {"changedBytes": 12, "note": "x", "cpu": 0.5}),
                                     *report.items[1:]), ("a warning",))
    doc = json.loads(json.dumps(report.document(verbose=True)))
    assert remote_df._report(doc) == report


@pytest.mark.parametrize("doc", [
    {"types": [7]}, {"types": [{"type": "Logs"}]},
    {"types": [], "items": "abc"}, {"types": [], "items": [{"type": "Logs"}]},
    {"types": [{"type": "Logs", "total": 1, "active": 1, "sizeBytes": 1e400,
                "reclaimableBytes": 0}]},
    {"types": [{"type": "Logs", "total": -1, "active": 1, "sizeBytes": 1,
                "reclaimableBytes": 0}]},
    {"types": [], "problems": [{"x": 1}]},
], ids=["row-not-object", "row-short", "items-text", "item-short", "infinite", "negative",
        "problem-not-text"])
def test_a_df_a_server_made_up_is_not_devcells_api(doc: dict[str, Any]) -> None:
    class Server:
        url = "unix:/x"

        def df(self, verbose: bool) -> dict[str, Any]:
            return doc

    args = SimpleNamespace(remote=Server(), verbose=1, output="table")
    with pytest.raises(DevCellError, match="is it DevCell's API"):
        remote_df.run_df(args)  # type: ignore[arg-type]


def test_a_type_a_server_names_is_printed_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """-v heads each type's items with its name: a server's name with a terminal escape in
    it (one that retitles the window, say) is printed escaped, as the table's cells are."""
    hostile = "\x1b]0;pwned\x07Logs"
    doc = {"types": [{"type": hostile, "total": 0, "active": 0, "sizeBytes": 0,
                      "reclaimableBytes": 0}], "items": []}

    class Server:
        url = "unix:/x"

        def df(self, verbose: bool) -> dict[str, Any]:
            return doc

    args = SimpleNamespace(remote=Server(), verbose=1, output="table")
    assert remote_df.run_df(args) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;pwned\\x07Logs:" in out
