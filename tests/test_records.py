"""devcell.records: a Record behaves as the frozen dataclass it replaces."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import ClassVar

import pytest

from devcell.records import FrozenRecord, MutableRecord, Record, field


class Point(Record):
    """A test record."""

    x: int
    y: int = 0
    label: str = "p"
    origin: ClassVar[int] = 0


class Labelled(Point):
    note: str = ""


def test_fields_defaults_and_construction() -> None:
    assert Point._fields == ("x", "y", "label")
    assert Point(1) == Point(x=1, y=0, label="p")
    assert Point(1, 2, "q").y == 2
    assert Labelled(1, note="n") == Labelled(x=1, y=0, label="p", note="n")
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, z=2)  # type: ignore[call-arg]


def test_frozen_equal_hashable_and_shown() -> None:
    p = Point(1, 2)
    with pytest.raises(FrozenRecord):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y
    assert hash(p) == hash(Point(1, 2)) and {p, Point(1, 2)} == {p}
    assert p != Labelled(1, 2)  # another class is never equal, as with dataclasses
    assert repr(p) == "Point(x=1, y=2, label='p')"


def test_replace_as_dict_copy_pickle_and_match() -> None:
    p = Point(1, 2)
    assert p.replace(label="z") == Point(1, 2, "z") and p.label == "p"
    with pytest.raises(TypeError):
        p.replace(z=1)
    assert p.as_dict() == {"x": 1, "y": 2, "label": "p"}
    assert copy.copy(p) == p and pickle.loads(pickle.dumps(p)) == p
    match p:
        case Point(x, y):
            assert (x, y) == (1, 2)


def test_a_default_before_a_required_field_is_refused() -> None:
    with pytest.raises(TypeError, match="follows"):
        class Bad(Record):
            a: int = 0
            b: int  # type: ignore[misc]


class Bag(MutableRecord):
    name: str
    items: list[int] = field(default_factory=list)
    where: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    clock: Callable[[], int] = field(default=lambda: 7)


def test_a_mutable_record_takes_assignments_new_defaults_and_is_unhashable() -> None:
    a, b = Bag("a"), Bag("a")
    assert a.items == [] and a.items is not b.items and a.clock() == 7
    a.items.append(1)
    a.name = "z"
    assert a == Bag("z", [1], {"ignored": 1}) and repr(a) == "Bag(name='z', items=[1], clock=" \
        f"{a.clock!r})"
    with pytest.raises(TypeError):
        hash(a)
    assert a.replace(name="y").items == [1] and "where" not in Bag.__dict__


def test_code_written_for_dataclasses_still_works_on_a_record() -> None:
    import dataclasses

    p = Point(1, 2)
    assert dataclasses.is_dataclass(p)
    assert dataclasses.replace(p, label="r") == Point(1, 2, "r")
    assert [f.name for f in dataclasses.fields(p)] == ["x", "y", "label"]
    assert dataclasses.asdict(Labelled(1, note="n")) == {"x": 1, "y": 0, "label": "p",
                                                         "note": "n"}
    bag = Bag("b", [1])
    assert dataclasses.replace(bag, name="c") == Bag("c", [1])


def test_the_shared_init_and_the_compiled_one_build_the_same_records() -> None:
    from devcell.records import COMPILE_AFTER

    class Item(MutableRecord):
        name: str
        count: int = 1
        tags: list[str] = field(default_factory=list)

        def __post_init__(self) -> None:
            self.count += 0  # called on both paths

    calls = [lambda: Item("a"), lambda: Item("a", 2, ["t"]), lambda: Item(name="a", tags=["t"]),
             lambda: Item("a", tags=["t"], count=3)]
    errors: list[Callable[[], object]] = [
        lambda: Item(),  # type: ignore[call-arg]
        lambda: Item("a", 1, [], 4),  # type: ignore[call-arg]
        lambda: Item("a", name="b"),  # type: ignore[misc]
        lambda: Item("a", size=1)]  # type: ignore[call-arg]
    shared = [make() for make in calls]
    for error in errors:
        with pytest.raises(TypeError):
            error()
    assert "__init__" not in Item.__dict__ or Item.__init__ is MutableRecord.__init__
    for _ in range(COMPILE_AFTER):
        Item("x")
    compiled = [make() for make in calls]
    assert Item.__init__ is not MutableRecord.__init__  # compiled by now
    assert shared == compiled and [vars(r) for r in shared] == [vars(r) for r in compiled]
    assert shared[0].tags is not compiled[0].tags
    for error in errors:
        with pytest.raises(TypeError):
            error()
