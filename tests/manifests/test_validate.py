"""validate.object_keys: the kinds and names of a file read without validating it."""

from __future__ import annotations

from devcell.manifests import validate
from devcell.manifests.model import SourceFile


def source(name: str, text: str | bytes) -> SourceFile:
    data = text.encode() if isinstance(text, str) else text
    return SourceFile(name, name, data, "digest")


def test_object_keys_read_kinds_and_names_and_skip_what_does_not_read() -> None:
    text = ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: api}\n"
            "spec: {backend: fake, bogus: 1}\n---\nkind: Nope\nmetadata: {name: x}\n---\n"
            "kind: Snapshot\nmetadata: {name: s}\n---\n- a list\n")
    assert validate.object_keys(source("a.yaml", text)) == [("Cell", "api"), ("Snapshot", "s")]
    assert validate.object_keys(source("b.json", '{"kind": "Cell", "metadata": {"name": "j"}}')
                                ) == [("Cell", "j")]
    for name, bad in (("c.yaml", "kind: [\n"), ("c.yaml", b"\xff\xfe"),
                      ("c.json", '{"kind": "Cell",')):
        assert validate.object_keys(source(name, bad)) == []
