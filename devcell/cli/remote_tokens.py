"""`token create`, `token list` and `token revoke` through a server (cli/remote.py): an admin
on their own machine makes a teammate's token on the team's server (GET, POST
/api/v1/tokens, DELETE /api/v1/tokens/ID), said as on the server's machine: the token on
stdout alone, once; a revoke sends the id alone, never a token in a URL."""

from __future__ import annotations

import argparse
from typing import Any

from devcell.auth import tokens
from devcell.auth.principals import Role
from devcell.auth.tokens import TokenInfo
from devcell.cli import cmd_token
from devcell.errors import DevCellError


def run_token_create(args: argparse.Namespace) -> int:
    cmd_token.expires_in(args)  # refused here, in the same words, before asking
    token, item = args.remote.create_token(args.user, args.role, expires=args.expires)
    info = _info(args.remote, item)
    if token == info.id or tokens.id_of(token) != info.id:  # a script reads it from stdout
        raise _not_api(args.remote, "a token")
    return cmd_token.print_made(info, token, args.remote.revoke_token)


def run_token_list(args: argparse.Namespace) -> int:
    return cmd_token.print_list(args.output, [_info(args.remote, i)
                                              for i in args.remote.tokens()])


def run_token_revoke(args: argparse.Namespace) -> int:
    item, was_active = args.remote.revoke_token(args.id)
    return cmd_token.print_revoked(_info(args.remote, item).id, was_active)


def _info(client: Any, item: dict[str, Any]) -> TokenInfo:
    """A token's record as the server lists it; another shape (an id that is not 12 hex
    digits, a role DevCell has not) is not DevCell's API."""
    def text(field: str, *, optional: bool = False) -> Any:
        value = item.get(field)
        if isinstance(value, str) or (optional and value is None):
            return value
        raise _not_api(client, f"a token record without {field}")

    info = TokenInfo(text("id"), text("user"), text("role"), text("createdAt"),
                     text("createdBy", optional=True), text("expiresAt", optional=True),
                     text("revokedAt", optional=True))
    if tokens.id_of(info.id) != info.id or len(info.id) != 12:
        raise _not_api(client, "a token record whose id is not one")
    if info.role not in [r.value for r in Role]:
        raise _not_api(client, "a token record whose role is not one")
    return info


def _not_api(client: Any, what: str) -> DevCellError:
    from devcell.client import not_api

    return not_api(client.url, what)
