"""Every regular expression a schema ships matches whole values only.

JSON Schema validators search with Python's `re`, where `$` also matches before a final
newline: a pattern `^[A-Z]+$` let "FOO\\n" through as an env name, "512Mi\\n" as a memory
limit, "core\\n" as a label value, accepted and then failing late in the engine. This walks
every `pattern` of every schema DevCell ships or writes (manifests, configuration, run
snapshots), generates values each pattern accepts, and requires both validators DevCell runs
(jsonschema and fastjsonschema) to refuse the same value with a newline appended.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources
from typing import Any

import fastjsonschema
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devcell import names
from devcell.runs import schema as run_schema


def _patterns(node: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield where, value
            else:
                yield from _patterns(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _patterns(value, f"{where}/{i}")


def _shipped() -> Iterator[tuple[str, str]]:
    for entry in sorted(resources.files("devcell.schemas").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".schema.json"):
            yield from _patterns(json.loads(entry.read_text("utf-8")), entry.name)
    yield from _patterns(run_schema.ENVELOPE, "runs.ENVELOPE")
    yield from _patterns(run_schema.SNAPSHOT, "runs.SNAPSHOT")


PATTERNS = sorted(set(_shipped()))


def test_the_walk_finds_the_patterns_it_must() -> None:
    found = {pattern for _, pattern in PATTERNS}
    assert names.SCHEMA_PATTERN in found
    assert len(found) >= 8, found  # names, env names, memory, paths, labels, runs...


def _validators(pattern: str) -> tuple[Any, Any]:
    schema = {"type": "string", "pattern": pattern}
    reference = jsonschema.validators.validator_for(
        {"$schema": "https://json-schema.org/draft/2020-12/schema"})(schema)
    fast = fastjsonschema.compile({"$schema": "http://json-schema.org/draft-07/schema#",
                                   **schema})
    return reference, fast


def _fast_ok(fast: Any, value: str) -> bool:
    try:
        fast(value)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


@pytest.mark.parametrize(("where", "pattern"), PATTERNS, ids=[w for w, _ in PATTERNS])
def test_no_pattern_accepts_a_trailing_newline(where: str, pattern: str) -> None:
    reference, fast = _validators(pattern)

    @settings(max_examples=40, deadline=None)
    @given(st.from_regex(pattern, fullmatch=True).filter(lambda v: not v.endswith("\n")))
    def check(value: str) -> None:
        assert reference.is_valid(value) and _fast_ok(fast, value), (where, value)
        for bad in (value + "\n", value + "\r\n"):
            assert not reference.is_valid(bad), f"{where}: {pattern} accepts {bad!r}"
            assert not _fast_ok(fast, bad), f"{where}: {pattern} accepts {bad!r} (fast)"

    check()


def test_when_the_validators_disagree_the_document_is_refused(monkeypatch: Any) -> None:
    """The fast validator only answers valid or not; the reference explains. Should the
    reference find nothing where the fast one refused, the document is refused anyway."""
    from devcell.manifests import validate
    from devcell.manifests.model import SourceFile

    lenient = jsonschema.Draft202012Validator({})
    monkeypatch.setattr(validate, "_validator", lambda kind: lenient)
    text = ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: api}\n"
            "spec: {backend: fake, resources: {cpus: -1}}\n")
    _, problems = validate.parse_source(SourceFile("m.yaml", "/m.yaml", text.encode(), "d"))
    [problem] = problems
    assert (problem.line, problem.field) == (4, "spec.resources.cpus")
    assert problem.message == "must be bigger than 0"


def _code_regexes() -> Iterator[tuple[str, str, str]]:
    """(file:line, how it is used, pattern) of every regex with a literal pattern in devcell."""
    import ast
    from pathlib import Path

    root = Path(names.__file__).parent
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        compiled: dict[str, str] = {}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and ast.unparse(node.value.func) == "re.compile" and node.value.args
                    and isinstance(node.value.args[0], ast.Constant)):
                for target in node.targets:
                    compiled[ast.unparse(target)] = str(node.value.args[0].value)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner, method = ast.unparse(node.func.value), node.func.attr
            where = f"{path.relative_to(root.parent)}:{node.lineno}"
            if owner in compiled and method in ("match", "search", "fullmatch"):
                yield where, method, compiled[owner]
            elif (owner == "re" and method in ("match", "search", "fullmatch") and node.args
                  and isinstance(node.args[0], ast.Constant)):
                yield where, method, str(node.args[0].value)


CODE_REGEXES = list(_code_regexes())


def test_the_code_walk_finds_the_regexes_it_must() -> None:
    assert any(where.startswith("devcell/names.py") for where, _, _ in CODE_REGEXES)
    assert len(CODE_REGEXES) >= 6


@pytest.mark.parametrize(("where", "method", "pattern"), CODE_REGEXES,
                         ids=[w for w, _, _ in CODE_REGEXES])
def test_no_regex_in_the_code_accepts_a_trailing_newline(where: str, method: str,
                                                        pattern: str) -> None:
    """A whole-value check is `fullmatch`, or a match anchored with `(?!\\n)$`; a bare `$`
    also matches before a final newline. (A scanner's `match(text, pos)` has no `$`.)"""
    if method != "fullmatch":
        assert pattern.endswith("(?!\\n)$") or not pattern.endswith("$"), (
            f"{where}: {method}({pattern!r}) also matches before a final newline; "
            "use fullmatch")
