"""Immutable records that cost nothing to define: a frozen dataclass's behaviour without its
price at import.

`@dataclass(frozen=True)` compiles six methods (init, repr, eq, hash, setattr, delattr) by
`exec` when its module is imported: ~1 ms of CPU each class, and a command such as `snapshot
create` imports ~60 of them (issue 26: most of its import time). A `Record` subclass only
notes its fields when defined; its `__init__` is compiled the first time one is built (a
class never built costs nothing), and equality, hashing and repr are shared methods.

Semantics are a frozen dataclass's (type checkers are told so by `dataclass_transform`):
fields are the class's own annotations in order, after its Record bases' (ClassVar ones are
not fields); plain defaults only (no `field()`), so every default is immutable; positional
or keyword construction; equality and hashing by the fields, for the same class only;
assignment raises. `replace` is `dataclasses.replace`; `as_dict` a shallow `asdict`.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar, dataclass_transform

R = TypeVar("R", bound="Record")


class FrozenRecord(AttributeError):
    """An attempt to assign or delete a field of a record."""


@dataclass_transform(frozen_default=True)
class Record:
    """Base of an immutable record (see the module's docstring)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__annotations__", {})
        names = [name for name, kind in own.items()
                 if not (isinstance(kind, str) and kind.partition("[")[0].endswith("ClassVar"))]
        inherited = [name for name in cls._fields if name not in names]
        defaults = dict(cls._defaults)
        for name in names:
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
            else:
                defaults.pop(name, None)
        fields = (*inherited, *names)
        seen_default = False
        for name in fields:
            if name in defaults:
                seen_default = True
            elif seen_default:
                raise TypeError(f"{cls.__name__}: field {name} without a default follows "
                                "one with a default")
        cls._fields, cls._defaults = fields, defaults
        setattr(cls, "__match_args__", fields)  # noqa: B010 (mypy: not assignable)
        if "__init__" not in cls.__dict__:
            setattr(cls, "__init__", Record.__init__)  # noqa: B010 compiled on first use

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        if cls.__init__ is Record.__init__:
            setattr(cls, "__init__", _compile_init(cls))  # noqa: B010
        cls.__init__(self, *args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenRecord(f"cannot assign to field {name!r} of {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise FrozenRecord(f"cannot delete field {name!r} of {type(self).__name__}")

    def _values(self) -> tuple[Any, ...]:
        data = self.__dict__
        return tuple(data[name] for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in
                          zip(self._fields, self._values(), strict=True))
        return f"{type(self).__qualname__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._values())

    def as_dict(self) -> dict[str, Any]:
        """Field name -> value (shallow: a field holding a record stays one)."""
        return dict(zip(self._fields, self._values(), strict=True))

    def replace(self: R, **changes: Any) -> R:
        """A copy with `changes` (field name -> new value), as `dataclasses.replace`."""
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        return type(self)(**{**self.__dict__, **changes})


def _compile_init(cls: type[Record]) -> Any:
    """The class's `__init__`, as a dataclass would write it: one `exec`, once."""
    params, body = [], []
    for name in cls._fields:
        params.append(f"{name}=_defaults[{name!r}]" if name in cls._defaults else name)
        body.append(f"    _d[{name!r}] = {name}")
    post = "    self.__post_init__()\n" if hasattr(cls, "__post_init__") else ""
    source = (f"def __init__(self, {', '.join(params)}):\n"
              f"    _d = self.__dict__\n" + "\n".join(body) + "\n" + post)
    if not cls._fields:
        source = "def __init__(self):\n" + (post or "    pass\n")
    namespace: dict[str, Any] = {}
    exec(source, {"_defaults": cls._defaults}, namespace)  # our own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init
