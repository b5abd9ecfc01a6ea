"""Secrets by position: what counts as one, what is shown and what is hashed of it."""

from __future__ import annotations

from typing import Any

from devcell.manifests import secrets
from devcell.manifests.model import digest

KEY = b"k" * 32


def spec(*env: dict[str, Any]) -> dict[str, Any]:
    return {"image": "i", "env": list(env)}


def test_an_entry_is_secret_unless_its_flag_is_false_or_absent() -> None:
    s = spec({"name": "A", "value": "x", "secret": True}, {"name": "B", "value": "y"},
             {"name": "C", "value": "z", "secret": False}, {"name": "D", "value": 1, "secret": "no"},
             "not a mapping", {"name": "E", "value": "w", "secret": None})
    assert secrets.entries(s) == [0, 3, 5]
    assert secrets.entries({"env": "nonsense"}) == [] and secrets.entries(None) == []


def test_covers_everything_in_a_secret_entry_but_its_name_and_flag() -> None:
    doc = {"spec": spec({"name": "A", "value": [1, 2], "secret": True}, {"name": "B", "value": "v"})}
    assert secrets.covers(doc, ("spec", "env", 0, "value"))
    assert secrets.covers(doc, ("spec", "env", 0, "value", 1))
    assert secrets.covers(doc, ("spec", "env", 0, "valeu"))  # a typo'd key holds the value too
    assert not secrets.covers(doc, ("spec", "env", 0, "name"))
    assert not secrets.covers(doc, ("spec", "env", 0, "secret"))
    assert not secrets.covers(doc, ("spec", "env", 1, "value"))
    assert not secrets.covers("not a document", ("spec", "env", 0, "value"))



def test_covers_a_sidecars_secret_entry_which_validation_refuses_without_quoting_it() -> None:
    doc = {"spec": {"sidecars": [{"name": "db", "env": [
        {"name": "A", "value": "x", "secret": True}, {"name": "B", "value": "v"}]}, "junk"]}}
    assert secrets.may_cover(("spec", "sidecars", 0, "env", 0, "value"))
    assert secrets.covers(doc, ("spec", "sidecars", 0, "env", 0, "value"))
    assert not secrets.covers(doc, ("spec", "sidecars", 0, "env", 0, "name"))
    assert not secrets.covers(doc, ("spec", "sidecars", 0, "env", 1, "value"))
    assert not secrets.covers(doc, ("spec", "sidecars", 1, "env", 0, "value"))
    assert not secrets.covers(doc, ("spec", "sidecars", 7, "env", 0, "value"))
    assert not secrets.covers(doc, ("spec", "sidecars", 0, "image"))

def test_redact_replaces_every_secret_value_and_leaves_a_spec_without_one_alone() -> None:
    s = spec({"name": "A", "value": 90210417, "secret": True}, {"name": "B", "value": "v"})
    assert secrets.redact(s)["env"] == [{"name": "A", "value": secrets.REDACTED, "secret": True},
                                        {"name": "B", "value": "v"}]
    assert s["env"][0]["value"] == 90210417  # the input is not changed
    plain = spec({"name": "B", "value": "v"})
    assert secrets.redact(plain) is plain


def test_keyed_hashes_change_with_the_secret_and_the_key_and_hide_it() -> None:
    s = spec({"name": "A", "value": "123456", "secret": True})
    keyed = secrets.keyed(s, KEY)
    assert "123456" not in str(keyed)
    assert digest(keyed) != digest(s)
    assert digest(secrets.keyed(spec({"name": "A", "value": "123457", "secret": True}), KEY)) \
        != digest(keyed)
    assert digest(secrets.keyed(s, b"j" * 32)) != digest(keyed)
    plain = spec({"name": "B", "value": "v"})
    assert digest(secrets.keyed(plain, KEY)) == digest(plain)  # no churn without secrets


def test_redact_pair_marks_only_the_changed_secret() -> None:
    old = spec({"name": "A", "value": "a1", "secret": True}, {"name": "B", "value": "b1",
                                                              "secret": True})
    new = spec({"name": "B", "value": "b1", "secret": True}, {"name": "A", "value": "a2",
                                                              "secret": True},
               {"name": "C", "value": "c", "secret": True})
    shown_old, shown_new = secrets.redact_pair(old, new)
    assert [e["value"] for e in shown_old["env"]] == [secrets.REDACTED] * 2
    assert [e["value"] for e in shown_new["env"]] == [secrets.REDACTED, secrets.CHANGED,
                                                      secrets.CHANGED]
