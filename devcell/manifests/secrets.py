"""Where a document's secrets are, and what of them may be shown or hashed.

A secret is found by its position, never by its value: everything under an env entry marked
`secret` (other than the entry's `name` and `secret` fields) is secret, whatever its YAML
type (a number, a date, a list, a multi-line string). Matching values instead would miss a
secret that a message renders differently (`90210417` as `number 90210417`) and would hide
innocent text that happens to equal a secret. An entry whose `secret` is anything but false
(or absent) counts as secret, so a mistyped flag (`secret: "true"`) still hides the value.

Hashes that cover a spec (the runtime hash on a container's label, the stored spec hashes)
see a secret only through an HMAC under the state directory's own key: a short secret cannot
be recovered by hashing guesses. A spec without secrets hashes exactly as before.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import Any

REDACTED = "<redacted>"
CHANGED = "<secret changed>"
_PUBLIC = ("name", "secret")
"""The fields of a secret entry that are not secret."""


def _is_secret_entry(item: object) -> bool:
    return isinstance(item, dict) and "secret" in item and item["secret"] is not False


def entries(spec: object) -> list[int]:
    """Indexes of the secret entries of `spec.env` (any input, valid or not)."""
    env = spec.get("env") if isinstance(spec, dict) else None
    if not isinstance(env, list):
        return []
    return [i for i, item in enumerate(env) if _is_secret_entry(item)]


def may_cover(path: tuple[str | int, ...]) -> bool:
    """Whether `path` is where a secret can be (an env entry's value: the cell's, or a
    sidecar's, which validation refuses but never quotes), for a parser that has not read
    the entry's `secret` flag yet (it may follow the value)."""
    if len(path) >= 6 and path[:2] == ("spec", "sidecars") and path[3] == "env":
        return path[5] not in _PUBLIC
    return len(path) >= 4 and path[:2] == ("spec", "env") and path[3] not in _PUBLIC


def covers(document: object, path: tuple[str | int, ...]) -> bool:
    """Whether `path` (from the document's root) lies inside a secret."""
    if not may_cover(path):
        return False
    spec = document.get("spec") if isinstance(document, dict) else None
    if path[1] == "sidecars":
        sidecars = spec.get("sidecars") if isinstance(spec, dict) else None
        index = path[2]
        if not isinstance(sidecars, list) or not isinstance(index, int) \
                or not 0 <= index < len(sidecars):
            return False
        return path[4] in entries(sidecars[index])
    return path[2] in entries(spec)


def _replace(spec: dict[str, Any], shown: Any) -> dict[str, Any]:
    """`spec` with every secret field of every secret entry replaced by `shown(index, field,
    value)`; `spec` itself when it has no secret entry (the common case costs nothing)."""
    secret = entries(spec)
    if not secret:
        return spec
    env = list(spec["env"])
    for i in secret:
        env[i] = {k: (v if k in _PUBLIC else shown(i, k, v)) for k, v in env[i].items()}
    return dict(spec, env=env)


def redact(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as a person or a log may see it."""
    return _replace(spec, lambda i, k, v: REDACTED)


def keyed(spec: dict[str, Any], key: bytes) -> dict[str, Any]:
    """The spec as a hash may see it: each secret replaced by its HMAC under `key`."""
    import hashlib
    import hmac

    from devcell.manifests.canonical import canonical_json

    def seal(i: int, k: str, v: Any) -> str:
        mac = hmac.new(key, canonical_json(v).encode(), hashlib.sha256).hexdigest()
        return f"hmac-sha256:{mac}"

    return _replace(spec, seal)


def redact_pair(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both specs redacted for a diff, a changed secret shown as CHANGED on the new side
    (matched by variable name), so a change of a secret alone still shows as a change."""
    before = {item.get("name"): item for item in old.get("env", []) if isinstance(item, dict)}

    def mark(i: int, k: str, v: Any) -> str:
        was = before.get(new["env"][i].get("name"))
        same = was is not None and _is_secret_entry(was) and k in was and was[k] == v
        return REDACTED if same else CHANGED

    return redact(old), _replace(new, mark)
