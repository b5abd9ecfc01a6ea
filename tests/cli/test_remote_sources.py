"""What `apply -f` / `diff -f` send a server (cli/remote_sources.py), without a server: the
files a YAML stream would read otherwise are said here, at their place and in the files'
order among the server's problems, and a place the server's message names is mapped back."""

from __future__ import annotations

from typing import Any

import pytest

from devcell.cli.remote_sources import MISREAD, Sent
from devcell.errors import ManifestError, Problem
from devcell.manifests.loader import from_bytes

CELL = b"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: %s}\nspec: {backend: fake}\n"


def _raises(*problems: Problem) -> Any:
    def call(body: bytes, as_json: bool, only_problems: bool) -> dict[str, Any]:
        raise ManifestError(list(problems))
    return call


def test_an_unreadable_file_is_said_here_in_the_files_order() -> None:
    sent = Sent([from_bytes("a.yaml", CELL % b"a"), from_bytes("b.yaml", b"x: caf\xe9\n"),
                 from_bytes("c.yaml", CELL % b"c")])
    assert sent.stream.starts == [(1, "a.yaml"), (6, "c.yaml")]  # b is not sent
    asked: list[bool] = []

    def call(body: bytes, as_json: bool, only_problems: bool) -> dict[str, Any]:
        asked.append(only_problems)
        raise ManifestError([Problem("request.yaml", "first", line=2),
                             Problem("request.yaml", "third", line=7)])

    with pytest.raises(ManifestError) as raised:
        sent.ask(call)
    assert asked == [True]  # a dry run, for the other files' problems only
    assert [(p.file, p.line, p.message[:5]) for p in raised.value.problems] == [
        ("a.yaml", 2, "first"), ("b.yaml", 1, "file "), ("c.yaml", 2, "third")]


def test_a_place_named_in_a_message_is_mapped_back() -> None:
    sent = Sent([from_bytes("a.yaml", CELL % b"t"), from_bytes("b.yaml", CELL % b"t")])
    with pytest.raises(ManifestError) as raised:
        sent.ask(_raises(Problem("request.yaml", 'Cell "t" is defined twice in this apply '
                                 "(also in request.yaml:1)", line=9)))
    problem = raised.value.problems[0]
    assert (problem.file, problem.line) == ("b.yaml", 4)
    assert problem.message.endswith("(also in a.yaml:1)")


def test_json_alone_is_sent_as_json_and_among_others_only_when_yaml_reads_it_alike() -> None:
    doc = b'{"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "j"}, ' \
          b'"spec": {"backend": "fake", "resources": {"cpus": %s}}}\n'
    assert Sent([from_bytes("j.json", doc % b"1e0")]).stream.json
    alike = Sent([from_bytes("a.yaml", CELL % b"a"), from_bytes("j.json", doc % b"1.5")])
    assert not alike.local and not alike.stream.json and len(alike.stream.starts) == 2
    other = Sent([from_bytes("a.yaml", CELL % b"a"), from_bytes("j.json", doc % b"1e0")])
    assert other.local == [(1, Problem("j.json", MISREAD))]
    assert other.stream.starts == [(1, "a.yaml")]
