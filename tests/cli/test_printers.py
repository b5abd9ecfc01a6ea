"""`-o` formats as kubectl reads them, custom columns and --sort-by."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.cli import printers
from devcell.errors import TemplateError, TemplateEvaluationError, UsageError

DOCS = [{"metadata": {"name": n, "labels": {"team": t}}, "status": {"restarts": r}}
        for n, t, r in (("c10", "a", 3), ("c2", "b", 10), ("c1", "", 1))]


def test_custom_columns_spec_and_file_give_the_same_columns(tmp_path: Path) -> None:
    spec = printers.parse_output("custom-columns=NAME:.metadata.name,TEAM:metadata.labels.team,"
                                 "X:.nothing")
    file = tmp_path / "cols"
    file.write_text("NAME   TEAM                  X\n.metadata.name metadata.labels.team .nothing\n")
    from_file = printers.parse_output(f"custom-columns-file={file}")
    for out in (spec, from_file):
        assert [c.header for c in out.columns] == ["NAME", "TEAM", "X"]
        assert printers.column_rows(out.columns, DOCS[:1]) == [["c10", "a", "<none>"]]


@pytest.mark.parametrize("text", ["custom-columns=", "custom-columns=NAME",
                                  "custom-columns=NAME:.a,:.b", "custom-columns=N:.a b"])
def test_bad_custom_columns(text: str) -> None:
    with pytest.raises(TemplateError):
        printers.parse_output(text)


def test_unknown_format_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown output format"):
        printers.parse_output("go-template={{.}}")
    with pytest.raises(UsageError, match="cannot read template file"):
        printers.parse_output(f"jsonpath-file={tmp_path / 'missing'}")


def test_sort_by_natural_strings_and_numbers() -> None:
    names = [DOCS[i]["metadata"]["name"] for i in printers.sort_order(".metadata.name", DOCS)]
    assert names == ["c1", "c2", "c10"]
    by_restarts = printers.sort_order("{.status.restarts}", DOCS)
    assert [DOCS[i]["status"]["restarts"] for i in by_restarts] == [1, 3, 10]


def test_sort_by_objects_is_refused() -> None:
    with pytest.raises(TemplateEvaluationError):
        printers.sort_order(".metadata", DOCS)


@pytest.mark.parametrize("path", ['{.a}{"x"}', "a}{b", '{"x"}', "{range .items[*]}{.a}{end}"])
def test_a_column_or_sort_key_that_is_not_one_path_is_a_usage_error(path: str) -> None:
    with pytest.raises(TemplateError):
        printers.parse_output(f"custom-columns=A:{path}")
    with pytest.raises(TemplateError):
        printers.sort_order(path, DOCS)


def test_sort_by_strings_with_unicode_digits_sorts_them_as_text() -> None:
    docs = [{"v": v} for v in ("²", "a10", "a2", "٣", "1")]
    assert [docs[i]["v"] for i in printers.sort_order(".v", docs)] == ["1", "a2", "a10", "²",
                                                                          "٣"]


def test_a_jsonpath_file_of_a_megabyte_is_refused_before_parsing(tmp_path: Path) -> None:
    file = tmp_path / "huge.jsonpath"
    file.write_text("{.a" + "[?(@.a" * 60 + ".b" * 500_000 + ")]" * 60 + "}")
    with pytest.raises(UsageError, match="larger than 65536 bytes"):
        printers.parse_output(f"jsonpath-file={file}")
