"""What `-o` asks for, as kubectl reads it, and the printers that need a template.

`-o` is one of table, wide, yaml, json, name, `jsonpath=TEMPLATE`, `jsonpath-file=FILE`,
`custom-columns=HEADER:PATH,...` or `custom-columns-file=FILE` (a line of headers, then a
line of paths). `--sort-by` orders items by a JSONPath, strings in natural order (`c2` before
`c10`) and numbers by value, as kubectl does. Templates are parsed before anything is read, so
a mistyped one is a usage error that names its position, never an empty listing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from devcell import safeio
from devcell.cli import jsonpath
from devcell.errors import TemplateError, TemplateEvaluationError, UsageError

PLAIN = ("table", "wide", "yaml", "json", "name")
MAX_TEMPLATE_FILE = jsonpath.MAX_TEMPLATE_BYTES
"""jsonpath-file and custom-columns-file: read at most this (64 KiB) and one byte more, so a
huge file is refused at once instead of parsed."""


class Column(NamedTuple):
    header: str
    nodes: tuple[jsonpath.Node, ...]


class Output(NamedTuple):
    format: str  # one of PLAIN, "jsonpath" or "custom-columns"
    template: tuple[jsonpath.Node, ...] = ()
    columns: tuple[Column, ...] = ()


def parse_output(text: str) -> Output:
    """`-o TEXT` -> what to print; UsageError for a format kubectl does not have either."""
    if text in PLAIN:
        return Output(text)
    name, eq, value = text.partition("=")
    if name == "jsonpath" and eq:
        return Output("jsonpath", template=jsonpath.parse(value))
    if name == "jsonpath-file" and eq:
        return Output("jsonpath", template=jsonpath.parse(_read(value).rstrip("\n")))
    if name == "custom-columns" and eq:
        return Output("custom-columns", columns=_columns_spec(value))
    if name == "custom-columns-file" and eq:
        return Output("custom-columns", columns=_columns_file(_read(value), value))
    raise UsageError(f"unknown output format {text!r} (one of: {', '.join(PLAIN)}, "
                     "jsonpath=TEMPLATE, jsonpath-file=FILE, custom-columns=SPEC, "
                     "custom-columns-file=FILE)")


def _read(path: str) -> str:
    try:
        with open(safeio.open_given(path), "rb") as f:  # a FIFO nobody writes: no wait
            data = f.read(MAX_TEMPLATE_FILE + 1)
    except OSError as exc:
        raise UsageError(f"cannot read template file {path!r}: {exc.strerror}") from None
    if len(data) > MAX_TEMPLATE_FILE:
        raise UsageError(f"template file {path!r} is larger than {MAX_TEMPLATE_FILE} bytes "
                         "(64 KiB)")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"template file {path!r} is not UTF-8 text") from None


def _columns_spec(spec: str) -> tuple[Column, ...]:
    if not spec:
        raise TemplateError("custom-columns format specified but no custom columns given")
    columns = []
    for part in spec.split(","):
        header, colon, path = part.partition(":")
        if not colon or not header or not path:
            raise TemplateError(f"unexpected custom-columns spec {part!r}, expected "
                                "<header>:<json-path-expr>")
        columns.append(Column(header, jsonpath.relaxed(path, what=f"column {header}")))
    return tuple(columns)


def _columns_file(text: str, path: str) -> tuple[Column, ...]:
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 2:
        raise TemplateError(f"custom-columns file {path!r}: expected two lines (headers, then "
                            f"paths), found {len(lines)}")
    headers, paths = lines[0].split(), lines[1].split()
    if len(headers) != len(paths):
        raise TemplateError(f"custom-columns file {path!r}: {len(headers)} headers but "
                            f"{len(paths)} paths")
    return tuple(Column(h, jsonpath.relaxed(p, what=f"column {h}"))
                 for h, p in zip(headers, paths, strict=True))


def column_rows(columns: Sequence[Column], docs: Sequence[Any],
                budget: jsonpath.Budget | None = None) -> list[list[str]]:
    """One row per document: each column's results joined by commas, `<none>` for none;
    every column of every document counts against one budget."""
    budget = budget or jsonpath.Budget()
    out = []
    for doc in docs:
        row = []
        for column in columns:
            (action,) = column.nodes
            assert isinstance(action, jsonpath.Action)
            found = jsonpath.evaluate(action.path, doc, doc, budget)
            row.append(",".join(jsonpath.text_of(v) for v in found) if found else "<none>")
            budget.wrote(len(row[-1]))
        out.append(row)
    return out


def sort_order(expression: str, docs: Sequence[Any],
               budget: jsonpath.Budget | None = None) -> list[int]:
    """The indices of `docs` in --sort-by order (stable; items without the field first);
    every document's key counts against one budget."""
    budget = budget or jsonpath.Budget()
    nodes = jsonpath.relaxed(expression, what="--sort-by")
    (action,) = nodes
    assert isinstance(action, jsonpath.Action)
    keys = []
    for doc in docs:
        found = jsonpath.evaluate(action.path, doc, doc, budget)
        keys.append(_sort_key(found[0], expression) if found else (0, 0, ()))
    kinds = {k[0] for k in keys if k[0]}
    if len(kinds) > 1:
        raise TemplateEvaluationError(f"--sort-by {expression}: the values are not all of one "
                                      "type (numbers and strings mixed)")
    return sorted(range(len(docs)), key=keys.__getitem__)


def _sort_key(value: Any, expression: str) -> tuple[int, float, tuple[Any, ...]]:
    if isinstance(value, bool):
        return (1, float(value), ())
    if isinstance(value, int | float):
        return (1, float(value), ())
    if isinstance(value, str):
        # ASCII digits only: `²` and other Unicode digits are text (int() refuses some of them)
        return (2, 0, tuple((0, int(p), "") if p[0] in "0123456789" else (1, 0, p)
                            for p in re.findall(r"[0-9]+|[^0-9]+", value)))
    raise TemplateEvaluationError(f"--sort-by {expression}: cannot sort by an object or a "
                                  "list; name a field that holds a string or a number")
