"""api/diff.py: the diff `devcell diff` prints and the API answers, judged once and printed
the same from either (the API's document read back with each manifest's file named by the
client)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api import diff
from devcell.errors import ManifestError, StateUnusable
from devcell.manifests import loader
from tests.controllers.support import cell_doc


def _printed(report: diff.DiffReport) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = diff.write(report, out, err)
    return code, out.getvalue(), err.getvalue()


def test_the_documents_round_trip_prints_what_the_report_prints(state: Path, write: Any
                                                               ) -> None:
    path = write("api.yaml", cell_doc("api"))
    assert api.apply(state, [path]).ok
    changed = cell_doc("api", labels={"tier": "web"})
    changed["spec"]["env"] = [{"name": "TOKEN", "value": "hunter2", "secret": True}]
    other = write("changed.yaml", changed, cell_doc("new"))
    report = diff.diff_sources(state, loader.read_sources([other]))
    code, out, err = _printed(report)
    assert code == 1 and err == ""
    assert f"+++ {other}/cell/api" in out and f"+++ {other}/cell/new" in out
    assert "+    tier: web" in out
    assert "hunter2" not in out
    back = diff.DiffReport.of_document(report.document(), lambda line: (other, line))
    assert _printed(back) == (code, out, err)
    same = diff.diff_sources(state, loader.read_sources([path]))
    assert _printed(same) == (0, "", "") and not same.differs


def test_a_stream_without_objects_or_with_a_problem_is_refused(state: Path, write: Any
                                                              ) -> None:
    empty = write("empty.yaml")
    with pytest.raises(ManifestError, match="no objects passed to diff"):
        diff.diff_sources(state, loader.read_sources([empty]))
    bad = cell_doc("api")
    bad["spec"]["imag"] = "x"
    with pytest.raises(ManifestError, match="imag"):
        diff.diff_sources(state, loader.read_sources([write("bad.yaml", bad)]))


def test_what_a_server_answers_is_printed_escaped() -> None:
    """`devcell --server URL diff` prints the server's answer: a hostile or broken one
    cannot reach the terminal (escapes), forge lines, or make the CLI raise."""
    doc = {"items": [{"kind": "Cell\x1b[2J", "name": "api\nerror: x", "line": "nope",
                      "hunks": ["@@ -1 +1 @@\n", "-a\x1b]0;pwned\x07\n", "+b\r+c\n"],
                      "hold": 3}], "warnings": ["w\x1b[31m"]}
    code, out, err = _printed(diff.DiffReport.of_document(doc, lambda line: ("f.yaml", line)))
    assert code == 1 and "\x1b" not in out + err and "\r" not in out and "\x07" not in out
    assert out.count("\n") == 6, out  # two headers, three hunk lines, the hold
    assert "\\x1b]0;pwned\\x07" in out and out.endswith("3\n")


@pytest.mark.parametrize("before", ["missing", "empty directory", "empty state.db"])
def test_a_diff_where_nothing_was_applied_leaves_no_state_behind(
        tmp_path: Path, write: Any, before: str) -> None:
    """`diff -f` on a state directory with no database made one (a mistyped --state-dir
    became a real, empty state: attack43, I). Everything reads as new; nothing is made.
    Beside what an earlier database recorded it is still refused, as before."""
    state = tmp_path / "nowhere"
    if before != "missing":
        state.mkdir()
    if before == "empty state.db":
        (state / "state.db").touch()
    listed = sorted(p.name for p in state.iterdir()) if state.exists() else None
    report = diff.diff_sources(state, loader.read_sources([write("api.yaml", cell_doc("api"))]))
    assert report.differs and [o.name for o in report.objects] == ["api"]
    assert (sorted(p.name for p in state.iterdir()) if state.exists() else None) == listed
    if before == "empty state.db":
        assert (state / "state.db").stat().st_size == 0
    state.mkdir(exist_ok=True)
    (state / "containers").mkdir()  # an earlier database's leftovers
    (state / "containers" / "c1").mkdir()
    with pytest.raises(StateUnusable, match="DevCell will not start afresh"):
        diff.diff_sources(state, loader.read_sources([write("api.yaml", cell_doc("api"))]))
