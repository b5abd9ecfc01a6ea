"""The CLI as a client of DevCell's HTTP API (docs/api.md): `devcell --server URL ...`,
`--context NAME`, or the contexts file's current context (cli/contexts.py).

A command the API serves runs its own handler with `args.remote` set to a `Client`, and prints
through the same printers as on the state directory, so its output is the same bytes. A
command the API does not serve is refused, naming it, before anything is done: it never acts
on a local state directory while a server was asked for. Commands that use no state (schema,
explain, version, completion, import devcontainer, context) run here as always.

Imported only when a server is given or the contexts file exists (cli/main.py).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import NamedTuple

from devcell.errors import DevCellError, UsageError
from devcell.names import printable

TOKEN_ENV = "DEVCELL_TOKEN"
MAX_TOKEN_BYTES = 4096

SERVED = {("get", None): "remote_get:run_get",
          ("apply", None): "remote_apply:run_apply",
          ("delete", None): "remote_apply:run_delete",
          ("diff", None): "remote_apply:run_diff",
          ("op", "resume"): "remote_ops:run_op_resume",
          ("op", "cancel"): "remote_ops:run_op_cancel",
          ("node", "cordon"): "remote_nodes:run_cordon",
          ("node", "uncordon"): "remote_nodes:run_uncordon",
          ("node", "drain"): "remote_nodes:run_drain",
          ("wait", None): "remote_wait:run_wait",
          ("snapshot", "create"): "remote_cells:run_snapshot_create",
          ("snapshot", "list"): "remote_get:run_snapshot_list",
          ("snapshot", "restore"): "remote_cells:run_snapshot_restore",
          ("snapshot", "export"): "remote_transfer:run_snapshot_export",
          ("snapshot", "import"): "remote_transfer:run_snapshot_import",
          ("snapshot", "push"): "remote_transfer:run_snapshot_push",
          ("snapshot", "pull"): "remote_transfer:run_snapshot_pull",
          ("cell", "sleep"): "remote_cells:run_cell_sleep",
          ("cell", "start"): "remote_cells:run_cell_start",
          ("cell", "fork"): "remote_cells:run_cell_fork",
          ("cell", "restart"): "remote_cells:run_cell_restart",
          ("cell", "rerun-hooks"): "remote_cells:run_cell_rerun_hooks",
          ("exec", None): "remote_streams:run_exec",
          ("logs", None): "remote_streams:run_logs",
          ("port-forward", None): "remote_streams:run_port_forward",
          ("ssh-proxy", None): "remote_streams:run_ssh_proxy",
          ("ssh-config", None): "remote_ssh:run_ssh_config",
          ("ssh", None): "remote_ssh:run_ssh",
          ("describe", None): "remote_describe:run_describe",
          ("code", None): "remote_code:run_code",
          ("df", None): "remote_df:run_df",
          ("gc", None): "remote_machine:run_gc",
          ("image", "ls"): "remote_machine:run_image_ls",
          ("image", "prune"): "remote_machine:run_image_prune",
          ("image", "build-base"): "remote_machine:run_image_build_base",
          ("token", "create"): "remote_tokens:run_token_create",
          ("token", "list"): "remote_tokens:run_token_list",
          ("token", "revoke"): "remote_tokens:run_token_revoke"}
"""The commands the API serves, and the handler ("module:function" under devcell.cli) that
runs each through it (`args.remote` is the client)."""


class Target(NamedTuple):
    url: str
    token: str | None
    ca: str | None
    context: str | None
    """The context it came from (None: --server)."""


def target(args: argparse.Namespace) -> Target | None:
    """The server this command line asks for (None: use the state directory)."""
    from devcell.cli import contexts

    if args.server is not None:
        if args.context is not None:
            raise UsageError("give --server URL or --context NAME, not both")
        url, token_file, ca, name = args.server, None, None, None
    else:
        found = contexts.chosen(args.context)
        if found is None:
            return None
        name, ctx = found
        url, token_file, ca = ctx["server"], ctx.get("tokenFile"), ctx.get(
            "certificateAuthority")
    url = check_url(url)
    token_file = args.token_file or token_file
    if args.certificate_authority is not None:
        ca = args.certificate_authority
    token = None
    if url.startswith("unix:"):
        _no_token(args, url)
    elif args.token_file is None and os.environ.get(TOKEN_ENV):
        token = os.environ[TOKEN_ENV].strip()
    elif token_file:
        token = read_token(token_file)
    if url.startswith("https:") and not token:
        raise UsageError(f"no token for {printable(url)}: give --token-file FILE (a file "
                         f"only you can read) or set ${TOKEN_ENV}; an admin makes one with "
                         "`devcell token create --user NAME --role ROLE`")
    if ca is not None:
        _readable(ca, "certificate authority")
    return Target(url, token, ca, name)


def _no_token(args: argparse.Namespace, url: str) -> None:
    """The unix socket acts as the state directory's owner, an admin, whatever token is
    given: a --token-file given for it was read, checked, then silently not used, and a
    user who gave a viewer's token to act with less acted as an admin (final43, F7). It is
    said (a context's tokenFile and $DEVCELL_TOKEN, configured once, are passed over)."""
    if args.token_file is not None:
        sys.stderr.write(f"note: {printable(url)} is the daemon's unix socket, which acts as "
                         "the state directory's owner (an admin): --token-file is not used "
                         "(a token's role applies over https)\n")


def check_url(url: str) -> str:
    """unix:PATH (made absolute) or https://HOST[:PORT]; anything else a usage error."""
    if url.startswith("unix:") and len(url) > len("unix:"):
        return "unix:" + os.path.abspath(url[len("unix:"):])
    if url.startswith("https://") and len(url) > len("https://"):
        import urllib.parse

        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018  (raises on a port that is not a number)
        except ValueError:
            parts = None
        if parts is not None and parts.hostname and parts.path in ("", "/") \
                and not parts.query and not parts.username:
            return url.rstrip("/")
    raise UsageError(f"--server {printable(url)!r}: unix:PATH (the daemon's socket) or "
                     "https://HOST:PORT (its TLS listener); plain http is never served")


def read_token(file: str) -> str:
    """The token in `file`: a regular file only its owner can read, its first line."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(f"--token-file {printable(file)}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"--token-file {printable(file)}: not a regular file")
        if info.st_mode & 0o077:
            raise UsageError(f"--token-file {printable(file)}: readable by others than its "
                             f"owner; a token is a password: chmod 600 {printable(file)}")
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    finally:
        os.close(fd)
    token = data[:MAX_TOKEN_BYTES].decode("utf-8", "replace").strip().partition("\n")[0]
    if not token:
        raise UsageError(f"--token-file {printable(file)}: empty")
    return token.strip()


def _readable(file: str, what: str) -> None:
    if not os.path.isfile(file) or not os.access(file, os.R_OK):
        raise UsageError(f"{what} {printable(file)}: no such readable file")


def dispatch(args: argparse.Namespace) -> int | None:
    """Run the command through the server the command line asks for; None when it asks for
    none (the caller uses the state directory)."""
    words = (args.command, getattr(args, "verb", None))
    explicit_state = args.state_dir is not None
    if explicit_state and (args.server is not None or args.context is not None):
        raise UsageError("--state-dir uses a state directory here; --server and --context "
                         "a server: give one of them")
    if explicit_state or words == ("controller", "run"):
        return None  # --state-dir wins over the contexts file; the daemon is the server
    where = target(args)
    if where is None:
        return None
    if words not in SERVED:
        shown = " ".join(w for w in words if w)
        raise UsageError(
            f"`devcell {shown}` is not served through the DevCell API yet (server "
            f"{printable(where.url)}{_context(where)}): run it on the server's machine, or "
            "give --state-dir DIR to use a state directory here")
    import importlib

    from devcell.client import Client

    module, _, function = SERVED[words].partition(":")
    handler = getattr(importlib.import_module(f"devcell.cli.{module}"), function)
    args.remote = Client(where.url, token=where.token, ca=where.ca)
    args.remote_target = where
    try:
        return int(handler(args))
    except DevCellError as exc:
        raise explained(exc, where) from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError,
            RecursionError) as exc:
        # what the server answered is read by the same printers as the state directory's
        # records, which trust their fields: a server answering another shape (another
        # version, or not DevCell; a field nested deeper than the YAML printer recurses) is
        # said in one line, never a traceback
        what = printable(f"{type(exc).__name__}: {exc}")[:200]
        raise DevCellError(f"DevCell API at {printable(where.url)}: its answer could not be "
                           f"read ({what}): is it DevCell's API, of the same version as this "
                           "CLI (devcell version)?") from None


def _context(where: Target) -> str:
    return f", context {printable(where.context)}" if where.context else ""


def explained(exc: DevCellError, where: Target) -> DevCellError:
    """The client's error, with what to do when the server could not be used."""
    from devcell import errors

    url = printable(where.url)
    cause = getattr(exc, "cause", None)
    if cause == "unreachable":
        what = ("is the daemon running with --listen on it (`devcell controller run "
                "--listen ...`)?" if where.url.startswith("unix:") else
                "is the daemon running with --listen tcp:HOST:PORT, and the address right?")
        return errors.TemporaryError(f"{exc}: cannot reach the DevCell API{_context(where)}: "
                                     f"{what}")
    if cause == "certificate":
        return errors.TemporaryError(
            f"{exc}: give the certificate that signed the server's (DevCell's own: the "
            "server's <state-dir>/api-tls/cert.pem) with --certificate-authority FILE or "
            "the context's certificateAuthority (devcell context set NAME "
            "--certificate-authority FILE)")
    if isinstance(exc, errors.Unauthenticated):
        return errors.Unauthenticated(
            f"{url}: the token is not valid (unknown, expired or revoked): ask an admin for "
            "a new one (`devcell token create`) and give it with --token-file FILE, "
            f"${TOKEN_ENV} or the context's tokenFile")
    return exc


def warn(text: str) -> None:
    sys.stderr.write(f"warning: {printable(text)}\n")
