"""Label selectors against Kubernetes' own grammar cases.

The cases below are data taken from k8s.io/apimachinery/pkg/labels/selector_test.go
(TestSelectorParse, TestSelectorMatches, TestSetSelectorParser, TestRequirementConstructor,
TestRequirementSelectorMatching): what Kubernetes accepts we accept and print the same way,
what it refuses we refuse, and matching gives the same answer.
"""

from __future__ import annotations

import pytest

from devcell.errors import SelectorError, UsageError
from devcell.manifests import selectors
from devcell.manifests.selectors import Operator

# TestSelectorParse: good strings re-print as themselves without spaces.
GOOD = ["x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1", "x>1,z<5"]
BAD = ["x=a||y=b", "x==a==b", "!x=a", "x<a"]

# TestSetSelectorParser: (input, valid, expected requirements as (key, op, values) sorted by key)
SET_CASES: list[tuple[str, bool, list[tuple[str, str, tuple[str, ...]]] | None]] = [
    ("", True, []),
    ("\rx", True, [("x", "exists", ())]),
    ("this-is-a-dns.domain.com/key-with-dash", True,
     [("this-is-a-dns.domain.com/key-with-dash", "exists", ())]),
    ("this-is-another-dns.domain.com/key-with-dash in (so,what)", True,
     [("this-is-another-dns.domain.com/key-with-dash", "in", ("so", "what"))]),
    ("0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)", True,
     [("0.1.2.domain/99", "notin", ("10.10.100.1", "tick.tack.clock"))]),
    ("foo  in\t (abc)", True, [("foo", "in", ("abc",))]),
    ("x notin\n (abc)", True, [("x", "notin", ("abc",))]),
    ("x  notin\t\t\t(abc,def)", True, [("x", "notin", ("abc", "def"))]),
    ("x in (abc,def)", True, [("x", "in", ("abc", "def"))]),
    ("x in (abc,)", True, [("x", "in", ("", "abc"))]),
    ("x in ()", True, [("x", "in", ("",))]),
    ("x notin (abc,,def),bar,z in (),w", True,
     [("bar", "exists", ()), ("w", "exists", ()), ("x", "notin", ("", "abc", "def")),
      ("z", "in", ("",))]),
    ("x,y in (a)", True, None),
    ("x=a", True, [("x", "=", ("a",))]),
    ("x>1", True, [("x", ">", ("1",))]),
    ("x<7", True, [("x", "<", ("7",))]),
    ("x=a,y!=b", True, [("x", "=", ("a",)), ("y", "!=", ("b",))]),
    ("x=a,y!=b,z in (h,i,j)", True,
     [("x", "=", ("a",)), ("y", "!=", ("b",)), ("z", "in", ("h", "i", "j"))]),
    ("x=a||y=b", False, None),
    ("x,,y", False, None),
    (",x,y", False, None),
    ("x nott in (y)", False, None),
    ("x notin ( )", True, [("x", "notin", ("",))]),
    ("x notin (, a)", True, [("x", "notin", ("", "a"))]),
    ("a in (xyz),", False, None),
    ("a in (xyz)b notin ()", False, None),
    ("a ", True, [("a", "exists", ())]),
    ("a in (x,y,notin, z,in)", True, [("a", "in", ("in", "notin", "x", "y", "z"))]),
    ("a in (xyz abc)", False, None),
    ("a notin(", False, None),
    ("a (", False, None),
    ("(", False, None),
]

# TestSelectorMatches and TestRequirementSelectorMatching: (selector, labels, matches)
MATCH_CASES: list[tuple[str, dict[str, str], bool]] = [
    ("", {"x": "y"}, True),
    ("x=y", {"x": "y"}, True),
    ("x=y,z=w", {"x": "y", "z": "w"}, True),
    ("x!=y,z!=w", {"x": "z", "z": "a"}, True),
    ("notin=in", {"notin": "in"}, True),
    ("x", {"x": "z"}, True),
    ("!x", {"y": "z"}, True),
    ("x>1", {"x": "2"}, True),
    ("x<1", {"x": "0"}, True),
    ("x=z", {}, False),
    ("x=y", {"x": "z"}, False),
    ("x=y,z=w", {"x": "w", "z": "w"}, False),
    ("x!=y,z!=w", {"x": "z", "z": "w"}, False),
    ("x", {"y": "z"}, False),
    ("!x", {"x": "z"}, False),
    ("x>1", {"x": "0"}, False),
    ("x<1", {"x": "2"}, False),
    ("foo=bar", {"foo": "bar", "baz": "blah"}, True),
    ("baz=blah", {"foo": "bar", "baz": "blah"}, True),
    ("foo=bar,baz=blah", {"foo": "bar", "baz": "blah"}, True),
    ("foo=blah", {"foo": "bar", "baz": "blah"}, False),
    ("baz=bar", {"foo": "bar", "baz": "blah"}, False),
    ("foo=bar,foobar=bar,baz=blah", {"foo": "bar", "baz": "blah"}, False),
    ("x in (foo),y notin (alpha)", {"x": "foo", "y": "baz"}, True),
    ("x in (foo),y in (alpha)", {"x": "foo", "y": "baz"}, False),
    ("x notin (),y", {"y": ""}, True),
    ("!x,y", {"y": ""}, True),
    ("x notin (),!y", {"y": ""}, False),
    ("x in ()", {"y": "baz"}, False),
    ("z>1", {"z": "2"}, True),
    ("z>1", {"z": "v2"}, False),
    # The example of the grammar's own documentation.
    ("x in (foo,,baz),y,z notin ()", {"x": "foo", "y": "bar"}, True),
    ("x in (foo,,baz),y,z notin ()", {"x": "foo"}, False),
]

# TestRequirementConstructor, as selector text: keys and values Kubernetes validates.
CONSTRUCTOR_CASES: list[tuple[str, bool]] = [
    ("1foo in (bar)", True),
    ("1234 in (bar)", True),
    ("y>1", True),
    ("z<6", True),
    ("foo>bar", False),
    ("barz<blah", False),
    ("a" * 254, False),  # breaks the rule that a key's name is at most 63 characters
    ("x16=" + "a" * 254, False),
    ("x=" + "a" * 63, True),
    ("x=" + "a" * 64, False),
    ("a" * 63, True),
    ("example.com/" + "a" * 63, True),
    ("Example.com/a", False),  # the prefix is a DNS subdomain: lower case
    ("/a", False),
    ("a/b/c", False),
    ("-a", False),
    ("a-", False),
    ("a_b.c-d", True),
    ("x=-a", False),
    ("x=a_", False),
]


@pytest.mark.parametrize("text", GOOD)
def test_good_strings_reprint_without_spaces(text: str) -> None:
    assert str(selectors.parse(text)) == text.replace(" ", "")


@pytest.mark.parametrize("text", BAD)
def test_bad_strings_are_refused(text: str) -> None:
    with pytest.raises(SelectorError):
        selectors.parse(text)


@pytest.mark.parametrize(("text", "valid", "expected"), SET_CASES)
def test_set_based_grammar(text: str, valid: bool,
                           expected: list[tuple[str, str, tuple[str, ...]]] | None) -> None:
    if not valid:
        with pytest.raises(SelectorError):
            selectors.parse(text)
        return
    parsed = selectors.parse(text)
    if expected is not None:
        got = [(r.key, str(r.operator), r.values) for r in parsed.requirements]
        assert got == expected


@pytest.mark.parametrize(("text", "labels", "matches"), MATCH_CASES)
def test_matching(text: str, labels: dict[str, str], matches: bool) -> None:
    assert selectors.parse(text).matches(labels) is matches


@pytest.mark.parametrize(("text", "valid"), CONSTRUCTOR_CASES)
def test_key_and_value_validation(text: str, valid: bool) -> None:
    if valid:
        selectors.parse(text)
    else:
        with pytest.raises(SelectorError):
            selectors.parse(text)


def test_deterministic_parse() -> None:
    assert str(selectors.parse("x=a,a=x")) == str(selectors.parse("a=x,x=a"))


def test_error_is_a_usage_error_that_names_the_position() -> None:
    with pytest.raises(UsageError) as caught:
        selectors.parse("team in (t1,t2")
    assert "at position 15" in str(caught.value)
    assert caught.value.exit_code == 2
    with pytest.raises(SelectorError, match="at position 6: key 'Bad/x'"):
        selectors.parse("a=b, Bad/x")


def test_operators_of_the_issue() -> None:
    parsed = selectors.parse("team in (t1,t2)")
    assert parsed.requirements[0].operator is Operator.IN
    assert parsed.matches({"team": "t2"}) and not parsed.matches({"team": "t3"})
    assert selectors.parse("!team").matches({}) and not selectors.parse("!team").matches(
        {"team": "t1"})
