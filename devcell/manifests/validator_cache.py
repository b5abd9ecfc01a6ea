"""fastjsonschema's validator of a kind, its compiled code kept in the state directory.

Making the Cell validator costs ~0.7 s (fastjsonschema writes ~600 KB of Python, ~0.3 s, then
Python compiles it, ~0.4 s), paid by every command that validates a new or changed manifest.
The compiled code is kept in `<state>/validators/` as marshal data, named by everything it is
made from (the schema's text, the Python and fastjsonschema versions, how DevCell asks for it),
so an entry never goes stale: the next command loads it in about a millisecond.

Loading is running code, so an entry is loaded only when it is a regular file (no link) owned
by the state directory's owner, who runs this command, with mode 0600, in an owner-only
directory of that owner's, and its content carries an HMAC-SHA256 under the state's hash key
that matches (a file someone else could write, or one copied in from elsewhere, would be code
run as the user); anything else and the validator is compiled as without a cache, and the entry
written again. Without a state directory (or one not of this user's, or without its key yet),
commands just compile: nothing is written anywhere else.
"""

from __future__ import annotations

import hashlib
import hmac
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
from devcell.records import Record

DIRECTORY = "validators"
FORMAT = "devcell-validator-1 draft-07 use_default=False"
"""What else the compiled code depends on: DevCell's way of asking fastjsonschema for it."""
MAX_BYTES = 32 << 20
_MAC = 32  # HMAC-SHA256's length, the entry's first bytes
_ENTRY = re.compile(r"^def (validate\w*)\(", re.MULTILINE)


class Place(Record):
    """Where compiled validators are kept (a state directory's `validators/`) and the key
    their digests are made with (the state's hash key)."""

    directory: Path
    key: bytes


def at(state_dir: Path, key: bytes | None) -> Place | None:
    """The place of `state_dir`'s validators, or None when it has no key (nothing kept)."""
    return None if key is None else Place(state_dir / DIRECTORY, key)


def validator(kind: str, schema_text: str, place: Place | None) -> Callable[[Any], Any]:
    """The validator of `kind` (raises fastjsonschema.JsonSchemaException on a bad document),
    loaded from `place` or compiled (and then kept there)."""
    import fastjsonschema

    name = entry_name(kind, schema_text)
    directory = _directory(place) if place is not None else None
    found = _load(directory, name, place.key) if directory and place else None
    if found is None:
        schema = json.loads(schema_text)  # a private copy: generating mutates it
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
        source = fastjsonschema.compile_to_code(schema, use_default=False)
        entry = _ENTRY.search(source)
        if entry is None:  # not the generator's usual shape: let it compile as it knows
            compiled: Callable[[Any], Any] = fastjsonschema.compile(schema, use_default=False)
            return compiled
        found = (entry.group(1), compile(source, f"<{kind} validator>", "exec"))
        if directory and place:
            _keep(directory, name, found, place.key)
    namespace: dict[str, Any] = {}
    exec(found[1], namespace)  # noqa: S102 - DevCell's own generated code (see _load)
    function: Callable[[Any], Any] = namespace[found[0]]
    return function


def entry_name(kind: str, schema_text: str) -> str:
    """`cell-<digest>.marshal`: the digest of all the compiled code is made from."""
    import fastjsonschema

    made_of = "\0".join((FORMAT, sys.version, fastjsonschema.VERSION, schema_text))
    return f"{kind.lower()}-{hashlib.sha256(made_of.encode()).hexdigest()[:40]}.marshal"


def _owner_only(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _directory(place: Place) -> Path | None:
    """`place.directory`, made owner-only if missing; None unless it and the state directory
    are directories of this user's (no link) that only this user can write."""
    directory = place.directory
    try:
        state = os.lstat(directory.parent)
        if not stat.S_ISDIR(state.st_mode) or state.st_uid != os.geteuid() \
                or state.st_mode & 0o022:
            return None
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(directory)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not _owner_only(st):
        return None
    return directory


def _load(directory: Path, name: str, key: bytes) -> tuple[str, CodeType] | None:
    """The entry `name`, if it is safely this state's own (see the module's docstring)."""
    try:
        fd = safeio.open_regular(directory, name)
    except (OSError, safeio.UnsafeFile):
        return None
    try:
        st = os.fstat(fd)
        if not _owner_only(st) or st.st_size > MAX_BYTES:
            return None
        data = safeio.read_some(fd, MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    mac, body = data[:_MAC], data[_MAC:]
    if len(data) > MAX_BYTES or not hmac.compare_digest(mac, _mac(key, name, body)):
        return None
    try:
        entry, code = marshal.loads(body)
    except (ValueError, EOFError, TypeError):
        return None
    if not (isinstance(entry, str) and isinstance(code, CodeType)):
        return None
    return entry, code


def _mac(key: bytes, name: str, body: bytes) -> bytes:
    """The entry's digest, keyed, over its name too: an entry renamed is not another's."""
    return hmac.new(key, name.encode() + b"\0" + body, hashlib.sha256).digest()


def _keep(directory: Path, name: str, found: tuple[str, CodeType], key: bytes) -> None:
    """Written whole under a temporary name, then renamed: a reader sees all or nothing.
    The kind's entries of other schemas or versions are removed (no growth with upgrades),
    and so are temporary files a killed writer left (its process gone). A cache that cannot
    be written (a full disk) is no error: the next command compiles."""
    body = marshal.dumps(found)
    tmp = directory / f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(_mac(key, name, body) + body)
        os.replace(tmp, directory / name)
    except OSError:
        tmp.unlink(missing_ok=True)
        return
    kind = name.split("-", 1)[0] + "-"
    try:
        for old in os.scandir(directory):
            if old.name.startswith(kind) and old.name.endswith(".marshal") and old.name != name:
                os.unlink(old.path)
            elif _abandoned(old.name):
                os.unlink(old.path)
    except OSError:
        pass


_TMP = re.compile(r"\.[a-z]+-[0-9a-f]+\.marshal\.(\d+)\.[0-9a-f]{8}\.tmp")


def _abandoned(name: str) -> bool:
    """Whether `name` is a temporary entry whose writer (the pid in its name) has ended."""
    found = _TMP.fullmatch(name)
    if found is None:
        return False
    pid = int(found.group(1))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False
