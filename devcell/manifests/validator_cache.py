"""fastjsonschema's validator of a kind, its compiled code kept between commands.

Compiling a kind's validator (fastjsonschema writes ~600 KB of Python for the Cell schema,
then Python compiles it) costs ~0.5 s, paid by every command that validates a new or changed
manifest. The compiled code is kept in the user's cache directory as marshal data, named by
everything it depends on (the schema's text, the Python and fastjsonschema versions): the
next command loads it in milliseconds. An entry is loaded only when it is a regular file the
user owns, in a directory only the user can write (anyone else's file would be code run as
the user); anything wrong with the directory or the entry, and the validator is compiled as
before.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any

from devcell import safeio

MAX_BYTES = 32 << 20
_ENTRY = re.compile(r"^def (validate\w*)\(", re.MULTILINE)


def validator(kind: str, schema_text: str) -> Callable[[Any], Any]:
    """The validator of `kind` (raises fastjsonschema.JsonSchemaException on a bad document),
    loaded from the cache or compiled (and then kept there)."""
    import fastjsonschema

    digest = hashlib.sha256("\0".join((sys.version, fastjsonschema.VERSION, schema_text))
                            .encode()).hexdigest()
    name = f"{kind.lower()}-{digest[:40]}.marshal"
    directory = _directory()
    found = _load(directory, name) if directory is not None else None
    if found is None:
        schema = json.loads(schema_text)  # a private copy: generating mutates it
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
        source = fastjsonschema.compile_to_code(schema, use_default=False)
        entry = _ENTRY.search(source)
        if entry is None:  # not the generator's usual shape: let it compile as it knows
            compiled: Callable[[Any], Any] = fastjsonschema.compile(schema, use_default=False)
            return compiled
        found = (entry.group(1), compile(source, f"<{kind} validator>", "exec"))
        if directory is not None:
            _keep(directory, name, found)
    namespace: dict[str, Any] = {}
    exec(found[1], namespace)  # noqa: S102 - DevCell's own generated code (see _load)
    function: Callable[[Any], Any] = namespace[found[0]]
    return function


def _directory() -> Path | None:
    """$XDG_CACHE_HOME/devcell/validators (or ~/.cache/...), made owner-only; None when it
    cannot be, or is not a directory only this user can write."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = Path(base) / "devcell" / "validators"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(directory)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return None
    return directory


def _load(directory: Path, name: str) -> tuple[str, CodeType] | None:
    try:
        fd = safeio.open_regular(directory, name)
    except (OSError, safeio.UnsafeFile):
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        data = safeio.read_some(fd, MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        entry, code = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None
    if not (isinstance(entry, str) and isinstance(code, CodeType) and len(data) <= MAX_BYTES):
        return None
    return entry, code


def _keep(directory: Path, name: str, found: tuple[str, CodeType]) -> None:
    """Written whole under a temporary name, then renamed: a reader sees all or nothing.
    A cache that cannot be written (a read-only home, a full disk) is no error."""
    tmp = directory / f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(marshal.dumps(found))
        os.replace(tmp, directory / name)
    except OSError:
        tmp.unlink(missing_ok=True)
