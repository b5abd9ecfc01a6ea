"""Field selectors: Kubernetes' grammar (k8s.io/apimachinery/pkg/fields), on a caller's list of
fields; an unsupported field is refused, naming the supported ones."""

from __future__ import annotations

import pytest

from devcell.errors import SelectorError
from devcell.manifests import fieldselectors

FIELDS = ("metadata.name", "status.phase", "spec.backend")


@pytest.mark.parametrize(("text", "expected"), [
    ("", ()),
    ("status.phase=Running", (("status.phase", "=", "Running"),)),
    ("status.phase==Running", (("status.phase", "=", "Running"),)),
    ("status.phase=Running,spec.backend!=fake",
     (("status.phase", "=", "Running"), ("spec.backend", "!=", "fake"))),
    ("metadata.name=a\\,b", (("metadata.name", "=", "a,b"),)),
    ("metadata.name=a\\=b", (("metadata.name", "=", "a=b"),)),
    ("metadata.name=", (("metadata.name", "=", ""),)),
])
def test_parse(text: str, expected: tuple[tuple[str, str, str], ...]) -> None:
    assert tuple(fieldselectors.parse(text, FIELDS)) == expected


@pytest.mark.parametrize("text", ["status.phase", "x=a||", "metadata.name=a\\b"])
def test_bad_syntax_is_refused(text: str) -> None:
    with pytest.raises(SelectorError):
        fieldselectors.parse(text, FIELDS)


def test_unsupported_field_lists_the_supported_ones() -> None:
    with pytest.raises(SelectorError, match="supported: metadata.name, spec.backend, "
                                            "status.phase") as caught:
        fieldselectors.parse("spec.image=busybox", FIELDS)
    assert caught.value.exit_code == 2


def test_matching() -> None:
    reqs = fieldselectors.parse("status.phase=Running,spec.backend!=fake", FIELDS)
    row = {"phase": "Running", "backend": "container"}
    columns = {"status.phase": "phase", "spec.backend": "backend"}
    assert fieldselectors.matches_row(reqs, row, columns)
    assert not fieldselectors.matches_row(reqs, dict(row, backend="fake"), columns)
    assert not fieldselectors.matches_row(reqs, dict(row, phase="Stopped"), columns)


@pytest.mark.parametrize("text", ["metadata.name=a=b", "metadata.name===a", "status.phase!=a=b"])
def test_an_unescaped_equals_in_a_value_is_refused_as_kubernetes_does(text: str) -> None:
    with pytest.raises(SelectorError, match="unescaped '='"):
        fieldselectors.parse(text, FIELDS)


def test_an_escaped_equals_is_part_of_the_value() -> None:
    (req,) = fieldselectors.parse("metadata.name==\\=a\\=b", FIELDS)
    assert req.value == "=a=b"
