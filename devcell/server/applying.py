"""The query of POST /api/v1/apply beyond dryRun: where the client read each part of the
stream (`from=LINE:PATH`), and whether the apply prunes (`prune=true`, `labelSelector`,
`keepPrunedSeconds`), as `apply -f PATH... --prune -l SELECTOR --keep-pruned D` on the
state directory (store.client_sets says how it is recorded and what a prune deletes).

A prune deletes only what its caller may delete: one object the caller may not (a cell that
is another developer's now) refuses the whole apply, naming the object and the rule, and
nothing is recorded. DevCell's apply is all or nothing (one object of the stream the caller may
not change refuses all of it), and a prune's deletions are part of the apply; `-l` narrows
what a prune may delete.
"""

from __future__ import annotations

from typing import Any

from devcell.errors import Forbidden, UsageError
from devcell.names import printable

MAX_ORIGINS = 256
"""`from` values in one request: one per path given to `apply -f` (a folder is one)."""
MAX_PATH_CHARS = 4096


def origins(values: list[str]) -> tuple[tuple[int, str], ...]:
    """The `from` values: (line, the client's path or `-`), each checked."""
    if len(values) > MAX_ORIGINS:
        raise UsageError(f"from: at most {MAX_ORIGINS} values (one per path given to apply)")
    found: list[tuple[int, str]] = []
    for value in values:
        line, sep, path = value.partition(":")
        if not sep or not line.isascii() or not line.isdigit() or len(line) > 9 \
                or int(line) < 1 or not path or len(path) > MAX_PATH_CHARS \
                or "\x00" in path or not (path == "-" or path.startswith("/")):
            raise UsageError(f"from {printable(value[:200])!r}: LINE:PATH, the stream's line "
                             "(from 1) and the absolute path its documents from there were "
                             "read from (or - for standard input)")
        found.append((int(line), path))
    return tuple(sorted(found))


def keep_seconds(given: str | None) -> int:
    """keepPrunedSeconds: how long a pruned cell's workspace is kept (default 24 hours)."""
    from devcell.store import prunes

    if given is None:
        return prunes.DEFAULT_KEEP_SECONDS
    if not given.isascii() or not given.isdigit() or len(given) > 11 \
            or int(given) > 999999 * 86400:
        raise UsageError(f"keepPrunedSeconds: whole seconds, 0 to {999999 * 86400}, not "
                         f"{printable(given[:40])!r}")
    return int(given)


def client_set(query: Any, principal: Any, *, prune: bool) -> Any:
    """The store's ClientSet for this request (store.client_sets), its prune judged as the
    `delete` verb on each object it would delete."""
    from devcell.auth import policy, principals, resources
    from devcell.manifests import selectors
    from devcell.store import client_sets

    given = query.get("labelSelector")
    if given and not prune:
        raise UsageError("labelSelector on apply selects what a prune may delete: use it with "
                         "prune=true")
    selector = selectors.parse(given) if given else None

    def may_delete(conn: Any, kind: str, name: str) -> None:
        try:
            policy.require(principal, policy.Verb.delete, resources.recorded(conn, kind, name))
        except Forbidden as exc:
            raise Forbidden(f"{exc}; this apply's prune would delete it, so nothing was "
                            "recorded: narrow the prune with -l (labelSelector), or keep the "
                            "object's manifest among those applied", rule=exc.rule) from None

    admin = principal.role is principals.Role.admin
    return client_sets.ClientSet(principal.user, origins(query.getlist("from")), prune=prune,
                                 selector=selector, may_delete=None if admin else may_delete)
