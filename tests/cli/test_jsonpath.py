"""kubectl's JSONPath template dialect, tested against kubectl's own documented examples.

DOC and EXAMPLES are the input document and the examples table of the kubernetes.io page
"JSONPath Support" (reference/kubectl/jsonpath). Where that table shows Go's `map[cpu:4]`,
kubectl itself prints objects as JSON (`{"cpu":"4"}`), and so do we.
"""

from __future__ import annotations

from typing import Any

import pytest

from devcell.cli import jsonpath
from devcell.errors import TemplateError, TemplateEvaluationError

DOC: dict[str, Any] = {
    "kind": "List",
    "items": [
        {
            "kind": "None",
            "metadata": {"name": "127.0.0.1", "labels": {"kubernetes.io/hostname": "127.0.0.1"}},
            "status": {
                "capacity": {"cpu": "4"},
                "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}],
            },
        },
        {
            "kind": "None",
            "metadata": {"name": "127.0.0.2"},
            "status": {
                "capacity": {"cpu": "8"},
                "addresses": [
                    {"type": "LegacyHostIP", "address": "127.0.0.2"},
                    {"type": "another", "address": "127.0.0.3"},
                ],
            },
        },
    ],
    "users": [
        {"name": "myself", "user": {}},
        {"name": "e2e", "user": {"username": "admin", "password": "secret"}},
    ],
}

EXAMPLES = [  # (function, template, result) from the page's table
    ("text", "kind is {.kind}", "kind is List"),
    ("child .", "{.kind}", "List"),
    ("child []", "{['kind']}", "List"),
    ("child [] escaped", "{['name\\.type']}", ""),  # no such key in DOC: nothing, no error
    ("recursive descent", "{..name}", "127.0.0.1 127.0.0.2 myself e2e"),
    ("wildcard", "{.items[*].metadata.name}", "127.0.0.1 127.0.0.2"),
    ("subscript", "{.users[0].name}", "myself"),
    ("union", "{.items[*]['metadata.name', 'status.capacity']}",
     '127.0.0.1 127.0.0.2 {"cpu":"4"} {"cpu":"8"}'),
    ("filter", '{.users[?(@.name=="e2e")].user.password}', "secret"),
    ("range", "{range .items[*]}[{.metadata.name}, {.status.capacity}] {end}",
     '[127.0.0.1, {"cpu":"4"}] [127.0.0.2, {"cpu":"8"}] '),
    ("quote", "{range .items[*]}{.metadata.name}{'\\t'}{end}", "127.0.0.1\t127.0.0.2\t"),
    ("escape", "{.items[0].metadata.labels.kubernetes\\.io/hostname}", "127.0.0.1"),
]

MORE = [  # the rest of the dialect the issue names, same document
    ("{.items[0].kind}", "None"),
    ('{"\\n"}', "\n"),
    ("{.items[-1].metadata.name}", "127.0.0.2"),
    ("{.items[0:1].metadata.name}", "127.0.0.1"),
    ("{.items[1:].metadata.name}", "127.0.0.2"),
    ("{.items[0:2:2].metadata.name}", "127.0.0.1"),
    ("{.items[-2:].metadata.name}", "127.0.0.1 127.0.0.2"),
    ("{.users[*].user.username}", "admin"),
    ("{.users[?(@.user.password)].name}", "e2e"),
    ('{.items[?(@.status.capacity.cpu!="4")].metadata.name}', "127.0.0.2"),
    ("{$.kind}", "List"),
    ("{range .items[*]}{range .status.addresses[*]}{.address};{end}{end}",
     "127.0.0.1;127.0.0.2;127.0.0.3;"),
    ("{.nothing.here}", ""),
    ("{.items[0].status.capacity}", '{"cpu":"4"}'),
]


@pytest.mark.parametrize(("function", "template", "result"), EXAMPLES,
                         ids=[e[0] for e in EXAMPLES])
def test_kubectl_documented_examples(function: str, template: str, result: str) -> None:
    assert jsonpath.render(jsonpath.parse(template), DOC) == result


def test_current_object_is_the_input() -> None:
    import json

    assert json.loads(jsonpath.render(jsonpath.parse("{@}"), DOC)) == DOC


@pytest.mark.parametrize(("template", "result"), MORE)
def test_more_of_the_dialect(template: str, result: str) -> None:
    assert jsonpath.render(jsonpath.parse(template), DOC) == result


def test_numbers_compare_as_numbers_in_filters() -> None:
    doc = {"items": [{"n": 2, "name": "two"}, {"n": 10, "name": "ten"}]}
    assert jsonpath.render(jsonpath.parse("{.items[?(@.n>3)].name}"), doc) == "ten"
    assert jsonpath.render(jsonpath.parse("{.items[?(@.n<=2)].name}"), doc) == "two"


def test_values_are_escaped_but_template_literals_are_not() -> None:
    doc = {"name": "evil\x1b[2J"}
    out = jsonpath.render(jsonpath.parse("{.name}{'\\t'}"), doc,
                          escape=lambda s: s.replace("\x1b", "\\x1b"))
    assert out == "evil\\x1b[2J\t"


@pytest.mark.parametrize(("template", "position"), [
    ("{.a", 1),
    ("x {range .items[*]}", 3),
    ("{end}", 2),
    ("{.a[x]}", 5),
    ("{.a b}", 4),
    ("{'abc'x}", 7),
    ("{.items[?(@.a==b)]}", 16),
    ("{.items[?(@.a=='b']}", 19),
    ("{.items[?(a==1)]}", 11),
    ("{.a[}", 4),
    ("{}", 2),
    ("{'\\q'}", 3),
])
def test_template_errors_are_usage_errors_naming_the_position(template: str,
                                                              position: int) -> None:
    with pytest.raises(TemplateError, match=f"at position {position}:") as caught:
        jsonpath.parse(template)
    assert caught.value.exit_code == 2


def test_index_out_of_range_is_an_error_not_an_empty_answer() -> None:
    with pytest.raises(TemplateEvaluationError, match="out of bounds"):
        jsonpath.render(jsonpath.parse("{.items[5]}"), DOC)


def test_relaxed_paths_of_custom_columns_and_sort_by() -> None:
    for expression in (".metadata.name", "metadata.name", "{.metadata.name}"):
        nodes = jsonpath.relaxed(expression, what="test")
        assert jsonpath.render(nodes, DOC["items"][0]) == "127.0.0.1"


@pytest.mark.parametrize("template", ["{.items[-:]}", "{.items[:-]}", "{.items[::-]}",
                                      "{.items[- :1]}"])
def test_a_sign_without_a_number_in_a_slice_is_a_usage_error(template: str) -> None:
    with pytest.raises(TemplateError, match="invalid array index"):
        jsonpath.parse(template)


@pytest.mark.parametrize("template", [
    "{.items" + "[?(@.a" * 500 + ")]" * 500 + "}",
    "{range .items[*]}" + "{range @}" * 2000 + "{@}" + "{end}" * 2001,
])
def test_deep_nesting_is_a_usage_error_not_a_recursion_error(template: str) -> None:
    with pytest.raises(TemplateError, match="nested more than"):
        jsonpath.render(jsonpath.parse(template), DOC)


def test_nesting_up_to_the_limit_still_works() -> None:
    depth = jsonpath.MAX_NESTING - 1
    template = "{range .items[*]}" + "{range @}" * depth + "{.kind}" + "{end}" * (depth + 1)
    assert jsonpath.render(jsonpath.parse(template), {"items": [{"kind": "k"}]}) == "k"


# kubectl's evalArray (k8s.io/client-go/util/jsonpath/jsonpath.go): a negative bound counts
# from the end once; what is still outside the list is an error, never clamped; the step must
# be positive (no reversing); asking for no elements is allowed.
ITEMS = {"items": ["a", "b", "c"]}


@pytest.mark.parametrize(("template", "message"), [
    ("{.items[::-1]}", "step must be > 0"),
    ("{.items[::0]}", "step must be > 0"),
    ("{.items[0:100]}", "index out of bounds: index 99, length 3"),
    ("{.items[-100:]}", "index out of bounds: index -97, length 3"),
    ("{.items[3]}", "index out of bounds: index 3, length 3"),
    ("{.items[-4]}", "index out of bounds: index -1, length 3"),
    ("{.items[2:1]}", "starting index 2 is greater than ending index 1"),
    ("{.items[4:]}", "index out of bounds: index 4, length 3"),
    ("{.items[0][0]}", "string is not an array"),
])
def test_out_of_bounds_slices_and_non_positive_steps_are_errors_as_kubectl(
        template: str, message: str) -> None:
    nodes = jsonpath.parse(template)  # well-formed: the data cannot answer it
    with pytest.raises(TemplateEvaluationError, match=message):
        jsonpath.render(nodes, ITEMS)


@pytest.mark.parametrize(("template", "result"), [
    ("{.items[-1]}", "c"),
    ("{.items[-3]}", "a"),
    ("{.items[1:]}", "b c"),
    ("{.items[:-1]}", "a b"),
    ("{.items[-2:]}", "b c"),
    ("{.items[0:3:2]}", "a c"),
    ("{.items[1:1]}", ""),  # no elements asked for: allowed
    ("{.items[3:3]}", ""),
    ("{.items[3:]}", ""),
    ("{.missing[5]}", ""),  # a missing key is nothing, before any index
])
def test_slices_within_bounds_as_kubectl(template: str, result: str) -> None:
    assert jsonpath.render(jsonpath.parse(template), ITEMS) == result


def test_an_empty_selection_ends_the_step_as_kubectl() -> None:
    # client-go returns what it has when a list yields no elements (`return result, nil`),
    # so the later lists are not read: the same answer as kubectl, not a "fixed" one
    doc = {"l": [{"v": ["x", "y"]}, {"v": ["z"]}, {"v": ["p", "q"]}]}
    assert jsonpath.render(jsonpath.parse("{.l[*].v[1:]}"), doc) == "y"


@pytest.mark.parametrize("template", [
    "{.items[?(@.s<2)].name}", '{.items[?(@.n=="1")].name}', "{.items[?(@.s>1)].name}",
    "{.items[?(@.b<true)].name}",
])
def test_a_filter_comparing_incompatible_types_is_a_usage_error_naming_it(
        template: str) -> None:
    doc = {"items": [{"n": 1, "s": "1", "b": False, "name": "x"}]}
    with pytest.raises(TemplateError, match=r"filter '\[\?\(.*\)\]': cannot compare") as caught:
        jsonpath.render(jsonpath.parse(template), doc)
    assert caught.value.exit_code == 2


def test_filters_compare_like_kinds() -> None:
    doc = {"items": [{"n": 1, "s": "1", "b": False, "name": "x"}]}
    for template in ('{.items[?(@.s<"2")].name}', "{.items[?(@.n<2.5)].name}",
                     "{.items[?(@.b==false)].name}", "{.items[?(@.s==@.s)].name}"):
        assert jsonpath.render(jsonpath.parse(template), doc) == "x", template


def _lines_run(template: str) -> int:
    """How many lines of jsonpath.py parsing `template` executes: a count, not a time."""
    import sys
    from types import FrameType

    count = 0

    def tracer(frame: FrameType, event: str, arg: object) -> object:
        nonlocal count
        if frame.f_code.co_filename != jsonpath.__file__:
            return None
        count += event == "line"
        return tracer

    sys.settrace(tracer)
    try:
        jsonpath.parse(template)
    finally:
        sys.settrace(None)
    return count


def test_parsing_is_linear_in_the_template_length() -> None:
    # a long path inside nested filters: a parser that scans each filter's text again (for
    # its brackets, then for each comparator) reads that path once per level
    def template(depth: int) -> str:
        return "{.a" + "[?(@.a" * depth + ".b" * 2_000 + ")]" * depth + "}"

    shallow, deep = template(1), template(jsonpath.MAX_NESTING - 1)
    per_char_shallow = _lines_run(shallow) / len(shallow)
    per_char_deep = _lines_run(deep) / len(deep)
    assert per_char_deep < 2 * per_char_shallow  # 63x the nesting, about the same work


def test_a_template_larger_than_64_kib_is_refused_before_parsing() -> None:
    with pytest.raises(TemplateError, match="at most 65536"):
        jsonpath.parse("{.a}" + "x" * jsonpath.MAX_TEMPLATE_BYTES)
    jsonpath.parse("{.a}" + "x" * (jsonpath.MAX_TEMPLATE_BYTES - 4))


def test_a_long_template_error_names_a_shortened_template() -> None:
    with pytest.raises(TemplateError) as caught:
        jsonpath.parse("{.a b}" + "x" * 10_000)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("template", [
    "{" + "['','']" * 60 + "}",  # each union doubles its input: 2**60 values under 1 KiB
    "{.items[*]" + "['','','','']" * 30 + "}",
    "{range $.items[*]}" * 20 + "{..}" + "{end}" * 20,  # 10**20 items from the root
    "{range " + "['','']" * 30 + "}x{end}",
])
def test_a_template_that_multiplies_its_results_is_refused_within_the_budget(
        template: str) -> None:
    """Before the budget, 24 doubling unions took 125 s and 1.3 GB; 60 never ended."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TemplateEvaluationError, match="selects more than 2,000,000 values"):
        jsonpath.render(jsonpath.parse(template), {"items": [DOC] * 10})
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 200 * 1024, f"{grown} KiB"  # the budget's lists, at most a few dozen MB


def test_the_budget_leaves_ordinary_templates_alone() -> None:
    big = {"items": [{"metadata": {"name": f"c{i}"}} for i in range(100_000)]}
    text = jsonpath.render(jsonpath.parse("{range .items[*]}{.metadata.name} {end}"), big)
    assert text.split() == [f"c{i}" for i in range(100_000)]


def test_a_filters_comparisons_count_against_the_budget() -> None:
    """100 items each comparing 2,000 values with 2,000 others: 400,000 values selected (under
    the budget) but 400 million comparisons, minutes of work. Comparisons are paid as values."""
    data = {"ys": list(range(2000)), "items": [{"xs": list(range(5000, 7000))}] * 100}
    nodes = jsonpath.parse("{.items[?(@.xs[*] == $.ys[*])]}")
    with pytest.raises(TemplateEvaluationError, match="selects more than 2,000,000 values"):
        jsonpath.render(nodes, data)


def test_printed_text_is_bounded_per_command() -> None:
    """`{range .items[*]}{$}{end}` prints the whole document once per item: 1,000 items of a
    100 KB document were 100 MB of output from two thousand values."""
    data = {"items": [{"pad": "x" * 100}] * 1000}
    nodes = jsonpath.parse("{range .items[*]}{$}{end}")
    with pytest.raises(TemplateEvaluationError, match="output passes 67,108,864 characters"):
        jsonpath.render(nodes, data)


def test_custom_columns_and_sort_by_share_one_budget_across_documents() -> None:
    from devcell.cli import printers

    docs = [{"xs": list(range(1000))}] * 1500  # 1.5 million values in all, 1,000 per document
    columns = printers.parse_output("custom-columns=X:.xs[*]").columns
    assert len(printers.column_rows(columns, docs[:10])) == 10
    budget = jsonpath.Budget()
    printers.sort_order(".xs[0]", docs, budget)
    with pytest.raises(TemplateEvaluationError, match="selects more than"):
        printers.column_rows(columns, docs + docs, budget)  # 3 million: past the one budget
