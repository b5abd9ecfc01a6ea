"""`controller run` (the daemon, also `celld`) and `wait`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell import ids
from devcell.cli import arguments
from devcell.errors import NotFound, UsageError
from devcell.names import name_problem, printable
from devcell.store import db as dbmod
from devcell.store import guard


def run_daemon(args: argparse.Namespace) -> int:
    from devcell.cli import log_sink
    from devcell.log import logger
    from devcell.reconciler.daemon import Daemon, DaemonConfig, json_sink

    manifests = Path(args.manifests)
    if not manifests.is_dir():
        raise UsageError(f"--manifests {args.manifests}: not a directory")
    log_sink.configure(max(args.verbose, 1))
    if args.log_json:
        logger.remove()
        logger.add(json_sink, level="DEBUG" if args.verbose > 1 else "INFO",
                   diagnose=False)  # never dump local variables (secrets) with a traceback
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    config = DaemonConfig(state_dir=state_dir, manifests=manifests, workers=args.workers,
                          resync_seconds=args.resync, run_store=args.run_store,
                          runtime_events=args.runtime_events, allow_empty=args.allow_empty,
                          keep_pruned=arguments.keep_seconds(args.keep_pruned),
                          serve=_serving(args, state_dir) if args.listen else None)
    logger.info("controller for {} watching {}", state_dir, manifests.absolute())
    return Daemon(config).run()


def _serving(args: argparse.Namespace, state_dir: Path) -> Callable[[], Callable[[], None]]:
    """What starts the HTTP API on each --listen address (once the daemon holds the lease) and
    returns what stops it. The addresses and the certificate given are checked now, before
    the daemon starts."""
    from devcell.server import serve, tls

    wanted = [serve.parse_listen(text) for text in args.listen]
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    given = tls.given_certificate(args.tls_cert, args.tls_key) if args.tls_cert else None
    if given is not None and not any(w.scheme == "tcp" for w in wanted):
        raise UsageError("--tls-cert/--tls-key are for --listen tcp:HOST:PORT")

    def start() -> Callable[[], None]:
        from devcell.log import logger

        running = []
        try:
            for listen in wanted:
                serving = serve.start(listen, state_dir, given)
                running.append(serving)
                logger.info("API served on {}", printable(serving.shown))
        except BaseException:
            for r in running:
                r.stop()
            raise

        def stop() -> None:
            for r in running:
                r.stop()
        return stop
    return start


def run_wait(args: argparse.Namespace) -> int:
    """kubectl wait for each object named, or each matching -l (those recorded when the wait
    starts; never both), one after the other within one --timeout; the first that fails ends
    the wait."""
    import time

    if not args.names and not args.selector:
        raise UsageError(f"wait needs a NAME or -l SELECTOR (e.g. devcell wait "
                         f"{args.kind.lower()} api --for condition=Ready)")
    if args.names and args.selector:
        from devcell.cli.cmd_get import NAMES_AND_SELECTOR

        raise UsageError(NAMES_AND_SELECTOR)
    names = list(dict.fromkeys(args.names))
    for name in names:  # waiting for it would only run out the --timeout
        problem = None if ids.looks_like_id(name) else name_problem(name)
        if problem:
            raise UsageError(f"{args.kind.lower()} name {printable(name)!r} can never be "
                             f"recorded: {problem}")
    if args.selector:
        from devcell.manifests import selectors
        from devcell.store import views

        selector = selectors.parse(args.selector)
        state_dir = dbmod.resolve_state_dir(args.state_dir)
        if guard.database_exists(state_dir):
            db = dbmod.Database(state_dir, create=False)
            try:
                names = list(views.names_matching(db.conn, args.kind, selector))
            finally:
                db.close()
        if not names:
            raise NotFound("no matching resources found")
    deadline = time.monotonic() + args.timeout
    for name in names:
        code = _wait_one(args, name, max(deadline - time.monotonic(), 0.0))
        if code:
            return code
    return 0


def _close_name(state_dir: Path, kind: str, name: str) -> str:
    """'; did you mean "NAME"?' for a recorded name close to `name`, or ''."""
    from devcell.store import objects

    if not guard.database_exists(state_dir):
        return ""
    db = dbmod.Database(state_dir, create=False)
    try:
        return objects.suggestion(db.conn, kind, name)
    finally:
        db.close()


OBSERVE_EVERY_S = 0.5
"""How often a wait on a cell observes its backend again (its services' readiness)."""


def _wait_observing(db: dbmod.Database, kind: str, object_id: str, *, timeout: float,
                    condition: str, want: str, started: float) -> dict[Any, str]:
    """Wait for the condition; a cell is observed first and then every OBSERVE_EVERY_S.

    A recorded Ready is only believed once the backend agrees with it: a runtime stopped
    behind DevCell's back is recorded as such, and the wait goes on for a repair (by the
    daemon) or times out saying why; a service whose readiness check has not passed keeps
    Ready False until it passes, which only observing again finds out."""
    import time

    from devcell.reconciler import observe, waiting

    key = (kind, object_id)
    if kind != "Cell" or condition == "delete":
        return waiting.wait_for(db, [key], timeout=timeout, condition=condition, want=want,
                                fail_fast=False, started=started)
    while True:
        observe.observe_and_record(db, [object_id])
        step = min(time.monotonic() - started + OBSERVE_EVERY_S, timeout)
        unmet = waiting.wait_until(db, [key], timeout=step, condition=condition, want=want,
                                   fail_fast=False, started=started)
        if not unmet:
            return {}
        if not unmet[key].timed_out or step >= timeout:
            return {k: v.message for k, v in unmet.items()}


def _wait_one(args: argparse.Namespace, name: str, timeout: float) -> int:
    """kubectl wait: --for=condition=TYPE[=STATUS] (the default, condition=Ready), --for=delete,
    --for=create. An object not recorded yet is waited for within the same timeout (except for
    --for=delete, where it is the answer)."""
    import time

    from devcell.reconciler import waiting
    from devcell.store import objects

    condition, want = args.condition  # checked when parsing (arguments.wait_condition)
    what = f"{args.kind.lower()}/{name}"
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    if condition == "delete":
        gone = (not guard.database_exists(state_dir)
                or objects.get(dbmod.Database(state_dir, create=False).conn, args.kind,
                               name) is None)
        if gone:
            sys.stdout.write(printable(f"{what} deleted") + "\n")
            return 0
    started = time.monotonic()
    found = waiting.wait_for_object(state_dir, args.kind, name, timeout=timeout)
    if found is None:
        raise NotFound(f'{args.kind.lower()} "{name}" not found (waited {args.timeout:g}s '
                       f"for it to be created){_close_name(state_dir, args.kind, name)}")
    db, record = found
    if condition == "create":
        sys.stdout.write(printable(f"{args.kind.lower()}/{record.name} created") + "\n")
        return 0
    failures = _wait_observing(db, args.kind, record.id, timeout=timeout,
                               condition=condition, want=want, started=started)
    if failures:
        sys.stderr.write(printable(f"error: {args.kind.lower()}/{record.name}: "
                                   f"{next(iter(failures.values()))}") + "\n")
        return 1
    met = "deleted" if condition == "delete" else f"condition met ({condition}={want})"
    sys.stdout.write(f"{args.kind.lower()}/{record.name} {met}\n")
    return 0
