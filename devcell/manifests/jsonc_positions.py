"""Where each field of a JSONC (or JSON5) document is: the line of every key and array item,
by its path.

json5 parses devcontainer.json but gives no positions, and a search of the raw text for a key
finds it in a comment or a string as readily as in the document (`// "privileged": true` on
line 2 blamed for the real field on line 10). This pass reads the same tokens a JSONC parser
does (comments and strings skipped whole, never searched), so a path names exactly the key
the parser used. Run only on text json5 already accepted: malformed input is not diagnosed
here, it only yields fewer positions.
"""

from __future__ import annotations

from collections.abc import Iterator

Path = tuple[str | int, ...]

_PUNCT = "{}[]:,"
_SPACE = " \t\r\n\ufeff\u00a0\u2028\u2029\v\f"


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, value, line): kind is a punctuation character, "s" (a string's value) or "w"
    (a bare word: number, literal or unquoted key)."""
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in _SPACE:
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += text.count("\n", i, end)
            i = end
        elif c in _PUNCT:
            yield c, c, line
            i += 1
        elif c in "\"'":
            start_line, value, i = line, [], i + 1
            while i < n and text[i] != c:
                if text[i] == "\\" and i + 1 < n:
                    value.append(_escape(text, i))
                    if text[i + 1] == "\n":
                        line += 1
                    i += 2 if text[i + 1] != "u" else 6
                    continue
                value.append(text[i])
                i += 1
            i += 1
            yield "s", "".join(value), start_line
        else:
            start = i
            while i < n and text[i] not in _PUNCT and text[i] not in _SPACE \
                    and not text.startswith("//", i) and not text.startswith("/*", i):
                i += 1
            yield "w", text[start:i], line


def _escape(text: str, i: int) -> str:
    nxt = text[i + 1]
    if nxt == "u":
        try:
            return chr(int(text[i + 2:i + 6], 16))
        except ValueError:
            return ""
    return {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0",
            "\n": ""}.get(nxt, nxt)


def positions(text: str) -> dict[Path, list[int]]:
    """Line numbers of every key (by its path of keys and array indexes), in document order:
    a key given twice in one object has two."""
    found: dict[Path, list[int]] = {}
    stack: list[tuple[str, Path, int]] = []  # (container kind, its path, next array index)
    pending_key: str | None = None
    for kind, value, line in _tokens(text):
        top = stack[-1] if stack else None
        if top is not None and top[0] == "{" and pending_key is None and kind in "sw":
            pending_key = value
            found.setdefault((*top[1], value), []).append(line)
            continue
        if kind == ":":
            continue
        if kind == ",":
            pending_key = None
            continue
        if kind in "}]":
            if stack:
                stack.pop()
            pending_key = None
            continue
        # a value: in an object, under the pending key; in an array, at its next index
        if top is None:
            path: Path = ()
        elif top[0] == "{":
            path = (*top[1], pending_key or "")
        else:
            path = (*top[1], top[2])
            stack[-1] = (top[0], top[1], top[2] + 1)
            found.setdefault(path, []).append(line)
        if kind in "{[":
            stack.append((kind, path, 0))
            pending_key = None
    return found


def line_of(table: dict[Path, list[int]], path: Path, nth: int = 1) -> int | None:
    """The line of `path` (its `nth` occurrence), else of its nearest parent that has one."""
    for end in range(len(path), 0, -1):
        lines = table.get(path[:end])
        if lines:
            return lines[min(nth, len(lines)) - 1] if end == len(path) else lines[0]
    return None
