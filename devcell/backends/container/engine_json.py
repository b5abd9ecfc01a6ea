"""JSON for the engine's small requests and answers through `_json`, the C module that `json`
runs underneath: the same scanner and encoder, set up with json's defaults.

`json`'s own import brings `re`, and with it enum, functools and collections: ~10 ms on
`devcell exec`'s fast path, a fifth of what it spends beside `docker exec`. What `loads` and
`dumps` read and write is what `json.loads` and `json.dumps` do with UTF-8 bytes and with
dicts, lists, strings, numbers, booleans and None (a test pins both against json); a
malformed text is a ValueError, as there.
"""

from __future__ import annotations

import _json

_WHITESPACE = " \t\n\r"
"""What json skips around a value."""
_BOM = b"\xef\xbb\xbf"


class _Decoding:
    """json.JSONDecoder()'s settings, read by the C scanner from this class's attributes."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity: float reads the three as json does


# typeshed types the context as a scanner; the C code reads only the attributes above.
_scan = _json.make_scanner(_Decoding)  # type: ignore[arg-type]


def loads(data: bytes) -> object:
    """The value of the JSON text `data` (UTF-8, a BOM skipped, as json.loads reads bytes)."""
    text = data.removeprefix(_BOM).decode("utf-8", "surrogatepass")
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as stop:  # the C scanner's "no value here"
        raise ValueError(f"no JSON value at character {stop.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return value


def _unknown(value: object) -> object:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps(value: object) -> str:
    """json.dumps(value) with its defaults (ASCII, ", " and ": ", circular references
    refused)."""
    if isinstance(value, str):
        return str(_json.encode_basestring_ascii(value))
    encode = _json.make_encoder({}, _unknown, _json.encode_basestring_ascii, None, ": ", ", ",
                                False, False, True)
    return "".join(encode(value, 0))
