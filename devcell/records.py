"""Records that cost nothing to define: a dataclass's behaviour without its price at import.

`@dataclass(frozen=True)` compiles six methods (init, repr, eq, hash, setattr, delattr) by
`exec` when its module is imported, ~1 ms of CPU each class, and `dataclasses` brings
`inspect` along; a command such as `snapshot create` imported ~60 of them (issue 26: most of
its import time). A `Record` subclass only notes its fields when defined; its `__init__` is
compiled the first time one is built (a class never built costs nothing), and equality,
hashing and repr are shared methods. Its first records are built by one shared `__init__`
(COMPILE_AFTER): a class built a few times in a command is never compiled at all.

Semantics are a dataclass's (type checkers are told so by `dataclass_transform`): fields are
the class's own annotations in order, after its record bases' (ClassVar ones are not fields);
a default is a plain value or `field(default=..., default_factory=..., compare=...,
repr=...)`; positional or keyword construction; `__post_init__` is called when defined;
equality by the compared fields, for the same class only. `Record` is frozen (assignment
raises, hashable); `MutableRecord` is not (and, like a dataclass with eq, unhashable).
`replace` is `dataclasses.replace`, `as_dict` a shallow `dataclasses.asdict`; those and
`dataclasses.fields` accept a record too (importing `dataclasses` then).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar, dataclass_transform, overload

    R = TypeVar("R", bound="_Base")
    T = TypeVar("T")
else:
    def overload(function: object) -> object:
        """typing.overload's part at run time: none (the last definition is the function)."""
        return function

    def dataclass_transform(**_: object) -> object:
        """typing.dataclass_transform's part at run time: none (it tells type checkers)."""
        return lambda cls: cls


class FrozenRecord(AttributeError):
    """An attempt to assign or delete a field of a frozen record."""


class _Field:
    __slots__ = ("default", "factory", "compare", "repr")

    def __init__(self, default: Any, factory: Callable[[], Any] | None, compare: bool,
                 repr: bool) -> None:  # noqa: A002 (dataclasses' name)
        self.default, self.factory, self.compare, self.repr = default, factory, compare, repr


_NO_DEFAULT: Any = object()
_FACTORY: Any = object()
"""The default of a parameter whose default comes from a factory (called in __init__)."""


# ruff's F811 does not see the run-time `overload` above as typing's
@overload
def field(*, default: T, compare: bool = True, repr: bool = True) -> T: ...
@overload
def field(  # noqa: F811
        *, default_factory: Callable[[], T], compare: bool = True, repr: bool = True) -> T: ...
@overload
def field(*, compare: bool = True, repr: bool = True) -> Any: ...  # noqa: F811
def field(*, default: Any = _NO_DEFAULT,  # noqa: F811
          default_factory: Callable[[], Any] | None = None,
          compare: bool = True, repr: bool = True) -> Any:  # noqa: A002
    """A field's default (`default`, or a new `default_factory()` for each record) and
    whether it takes part in equality (`compare`) and in repr, as `dataclasses.field`."""
    return _Field(default, default_factory, compare, repr)


def _is_classvar(annotation: object) -> bool:
    return isinstance(annotation, str) and annotation.partition("[")[0].endswith("ClassVar")


class _DataclassFields:
    """A record's `__dataclass_fields__`, made the first time something asks for it
    (`dataclasses.replace`, `fields`, `asdict`, `is_dataclass`), so code written for the
    dataclass a record replaced keeps working, and only that code imports `dataclasses`."""

    def __get__(self, instance: object, owner: type[_Base]) -> dict[str, Any]:
        made: dict[str, Any] | None = owner.__dict__.get("_made_fields")
        if made is None:  # once per class (not inherited: a subclass has more fields)
            import dataclasses

            shadow = dataclasses.make_dataclass(owner.__name__, list(owner._fields))
            made = shadow.__dataclass_fields__  # type: ignore[attr-defined]
            type.__setattr__(owner, "_made_fields", made)
        return made


class _Base:
    """What both kinds of record share (see the module's docstring)."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[Any] = _DataclassFields()
    _fields: ClassVar[tuple[str, ...]] = ()
    _compared: ClassVar[tuple[str, ...]] = ()
    _shown: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    _factories: ClassVar[dict[str, Callable[[], Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__annotations__", {})
        names = [name for name, kind in own.items() if not _is_classvar(kind)]
        fields = [*(name for name in cls._fields if name not in names), *names]
        defaults, factories = dict(cls._defaults), dict(cls._factories)
        uncompared = {n for n in cls._fields if n not in cls._compared}
        unshown = {n for n in cls._fields if n not in cls._shown}
        for name in names:
            defaults.pop(name, None)
            factories.pop(name, None)
            uncompared.discard(name)
            unshown.discard(name)
            if name not in cls.__dict__:
                continue
            value = cls.__dict__[name]
            if isinstance(value, _Field):
                if value.factory is not None:
                    factories[name] = value.factory
                elif value.default is not _NO_DEFAULT:
                    defaults[name] = value.default
                if not value.compare:
                    uncompared.add(name)
                if not value.repr:
                    unshown.add(name)
                if value.factory is not None or value.default is _NO_DEFAULT:
                    delattr(cls, name)  # as a dataclass leaves it: no class attribute
                else:
                    setattr(cls, name, value.default)
            else:
                defaults[name] = value
        seen_default = False
        for name in fields:
            if name in defaults or name in factories:
                seen_default = True
            elif seen_default:
                raise TypeError(f"{cls.__name__}: field {name} without a default follows "
                                "one with a default")
        cls._fields, cls._defaults, cls._factories = tuple(fields), defaults, factories
        cls._compared = tuple(n for n in fields if n not in uncompared)
        cls._shown = tuple(n for n in fields if n not in unshown)
        setattr(cls, "__match_args__", cls._fields)  # noqa: B010 (mypy: not assignable)
        if "__init__" not in cls.__dict__:
            setattr(cls, "__init__", _Base.__init__)  # noqa: B010 compiled on first use

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        built = cls.__dict__.get("_built", 0)  # this class's own count, not a base's
        if built < COMPILE_AFTER:
            type.__setattr__(cls, "_built", built + 1)
            _init_generic(self, cls, args, kwargs)
            return
        if cls.__init__ is _Base.__init__:
            setattr(cls, "__init__", _compile_init(cls))  # noqa: B010
        cls.__init__(self, *args, **kwargs)

    def _values(self) -> tuple[Any, ...]:
        data = self.__dict__
        return tuple(data[name] for name in self._compared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        data = self.__dict__
        shown = ", ".join(f"{name}={data[name]!r}" for name in self._shown)
        return f"{type(self).__qualname__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        data = self.__dict__
        return (type(self), tuple(data[name] for name in self._fields))

    def as_dict(self) -> dict[str, Any]:
        """Field name -> value (shallow: a field holding a record stays one)."""
        data = self.__dict__
        return {name: data[name] for name in self._fields}

    def replace(self: R, **changes: Any) -> R:
        """A copy with `changes` (field name -> new value), as `dataclasses.replace`."""
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        return type(self)(**{**self.as_dict(), **changes})


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Record(_Base):
    """Base of an immutable record (see the module's docstring)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenRecord(f"cannot assign to field {name!r} of {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise FrozenRecord(f"cannot delete field {name!r} of {type(self).__name__}")

    def __hash__(self) -> int:
        return hash(self._values())


@dataclass_transform(frozen_default=False, field_specifiers=(field,))
class MutableRecord(_Base):
    """Base of a record whose fields may be assigned (a dataclass without frozen=True):
    unhashable, as a dataclass with eq and without frozen."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]


COMPILE_AFTER = 16
"""Records of a class built by the shared `__init__` before the class's own is compiled.
Compiling one costs ~60 us of CPU; the shared one ~1 us more per record than a compiled one.
Most classes a command touches are built a few times (`snapshot create` built ~40 classes,
~2.5 ms of compiling), and the few built by the thousand (a 10,000-cell `get`) are compiled
after their 16th."""


def _init_generic(self: _Base, cls: type[_Base], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> None:
    """What the compiled `__init__` does, for any record class (the same TypeErrors)."""
    fields = cls._fields
    if len(args) > len(fields):
        raise TypeError(f"{cls.__qualname__}.__init__() takes {len(fields) + 1} positional "
                        f"arguments but {len(args) + 1} were given")
    data = self.__dict__
    for name, value in zip(fields, args, strict=False):
        data[name] = value
    for name in kwargs:
        if name not in fields:
            raise TypeError(f"{cls.__qualname__}.__init__() got an unexpected keyword "
                            f"argument {name!r}")
        if name in data:
            raise TypeError(f"{cls.__qualname__}.__init__() got multiple values for "
                            f"argument {name!r}")
    defaults, factories = cls._defaults, cls._factories
    missing = []
    for name in fields[len(args):]:
        if name in kwargs:
            data[name] = kwargs[name]
        elif name in defaults:
            data[name] = defaults[name]
        elif name in factories:
            data[name] = factories[name]()
        else:
            missing.append(name)
    if missing:
        raise TypeError(f"{cls.__qualname__}.__init__() missing {len(missing)} required "
                        f"argument{'s' if len(missing) > 1 else ''}: "
                        + ", ".join(repr(n) for n in missing))
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _compile_init(cls: type[_Base]) -> Any:
    """The class's `__init__`, as a dataclass would write it: one `exec`, once."""
    params, body = [], []
    for name in cls._fields:
        if name in cls._factories:
            params.append(f"{name}=_FACTORY")
            body.append(f"    _d[{name!r}] = _factories[{name!r}]() if {name} is _FACTORY "
                        f"else {name}")
            continue
        params.append(f"{name}=_defaults[{name!r}]" if name in cls._defaults else name)
        body.append(f"    _d[{name!r}] = {name}")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = (f"def __init__(self, {', '.join(params)}):\n"
              "    _d = self.__dict__\n" + "\n".join(body) + "\n")
    namespace: dict[str, Any] = {}
    exec(source, {"_defaults": cls._defaults, "_factories": cls._factories,  # our own names
                  "_FACTORY": _FACTORY}, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init
