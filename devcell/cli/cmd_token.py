"""`token create`, `token list`, `token revoke`: the tokens HTTP clients present.

A token is printed once, on stdout alone (`TOKEN=$(devcell token create ...)` keeps it out of
the terminal's scrollback); what was made is said on stderr. Nothing else ever shows it:
the store keeps only its HMAC (devcell.auth.tokens), and `token list` shows ids. So a token
whose printing failed (a pipe its reader closed, a full disk) is revoked at once: nobody
could ever present it, and an active credential nobody holds was left behind (final43, F2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from devcell.auth import principals, tokens
from devcell.auth.principals import Role
from devcell.errors import DevCellError, UsageError
from devcell.names import printable
from devcell.store import db as dbmod
from devcell.store import guard


def expires_in(args: argparse.Namespace) -> int | None:
    """--expires in seconds (None: until revoked), refused when it is not a duration."""
    from devcell.manifests.quantities import duration_seconds

    if args.expires is None:
        return None
    try:
        return duration_seconds(args.expires)
    except ValueError:
        raise UsageError(f"--expires {args.expires!r}: a duration such as 30m, 12h or 90d"
                         ) from None


def run_token_create(args: argparse.Namespace) -> int:
    seconds = expires_in(args)
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    db = dbmod.open_database(state_dir)
    try:
        info, token = tokens.create(db, user=args.user, role=Role(args.role),
                                    expires_in=seconds,
                                    created_by=principals.local_user(state_dir))
    finally:
        db.close()

    def revoke(token_id: str) -> None:
        again = dbmod.open_database(state_dir)
        try:
            tokens.revoke(again, token_id)
        finally:
            again.close()

    return print_made(info, token, revoke)


def print_made(info: tokens.TokenInfo, token: str, revoke: Callable[[str], object]) -> int:
    """The token on stdout alone, what was made on stderr (here and through a server). When
    stdout cannot take it, the token is revoked with `revoke(id)` and the command fails
    saying so; when that fails too, the error names the id to revoke."""
    try:
        sys.stdout.write(token + "\n")
        sys.stdout.flush()
    except OSError as exc:  # BrokenPipeError too: a secret nobody read is lost all the same
        from devcell.cli import output

        output.discard()  # the buffered token goes nowhere, not at the interpreter's exit
        raise unwritten(info, exc, revoke) from None
    until = (f", valid until {printable(info.expires_at)}" if info.expires_at
             else ", valid until revoked")
    sys.stderr.write(f"token/{info.id} made for {printable(info.user)} ({info.role}){until}; "
                     "it is shown only this once\n")
    return 0


def unwritten(info: tokens.TokenInfo, exc: OSError, revoke: Callable[[str], object]
              ) -> DevCellError:
    """The error for a token made whose secret could not be written, once it is revoked."""
    made = (f"token/{info.id} was made for {printable(info.user)} ({info.role}), but the "
            f"standard output did not take it ({exc.strerror or type(exc).__name__})")
    try:
        revoke(info.id)
    except Exception as failed:  # the store's or the server's: said, never lost
        why = printable(str(failed))[:300] or type(failed).__name__
        return DevCellError(f"{made}, and revoking it failed ({why}): nobody holds its "
                            f"secret: revoke it with `devcell token revoke {info.id}`")
    return DevCellError(f"{made}: it was revoked (nobody holds its secret); make another "
                        "with an output that takes it")


def run_token_list(args: argparse.Namespace) -> int:
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    if not guard.database_exists(state_dir):  # a lost database is refused, never "none"
        listed: list[tokens.TokenInfo] = []
    else:
        db = dbmod.open_database(state_dir, create=False)
        try:
            listed = tokens.listed(db)
        finally:
            db.close()
    return print_list(args.output, listed)


def print_list(output: str | None, listed: list[tokens.TokenInfo]) -> int:
    """`token list`'s table or JSON (here and through a server)."""
    if output == "json":
        items = [tokens.document(t) for t in listed]
        sys.stdout.write(json.dumps({"items": items}, indent=2) + "\n")
        return 0
    if not listed:
        sys.stderr.write("No tokens.\n")
        return 0
    rows = [("ID", "USER", "ROLE", "STATE", "CREATED", "EXPIRES", "CREATED-BY")]
    rows += [(printable(t.id), printable(t.user), printable(t.role), t.state(),
              printable(t.created_at), printable(t.expires_at or "never"),
              printable(t.created_by or "-")) for t in listed]  # a server's, through --server
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        sys.stdout.write("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                         + "\n")
    return 0


def run_token_revoke(args: argparse.Namespace) -> int:
    db = dbmod.open_database(dbmod.resolve_state_dir(args.state_dir))
    try:
        info, was_active = tokens.revoke(db, args.id)
    finally:
        db.close()
    return print_revoked(info.id, was_active)


def print_revoked(token_id: str, was_active: bool) -> int:
    word = "revoked" if was_active else "already revoked"
    sys.stdout.write(f"token/{token_id} {word}\n")
    return 0
