#!/usr/bin/env python3
"""The HTTP API against the direct CLI over 10,000 recorded cells, in one run: a list, a watch
event's latency, and many concurrent clients listing and watching.

Set-up (untimed but printed). The cells are applied in one `devcell apply -f DIR` on the fake
backend (as bench/get_cells.py makes them: the whole DevCell path, no rows written by hand), a
viewer token is made (`devcell token create`), then one daemon serves the state directory:
`devcell controller run --manifests EMPTY --allow-empty --listen unix:SOCK --listen
tcp:127.0.0.1:0 --resync 0 --no-runtime-events` (cells applied with `apply -f` are never
pruned by the daemon's directory; no resync and no runtime events, because the fake backend's
stand-in for an engine's event stream polls its whole world every 0.1 s, ~5% of a CPU at 200
cells, and a resync re-queues every cell each minute: both would be the reconcile loop's noise
in the API's figures). Everything below runs once the daemon is idle.

1. List, whole processes (interleaved, medians): `devcell get cells` on the state directory
   vs `devcell --server unix:SOCK get cells` vs `devcell --server https://127.0.0.1:PORT ...
   get cells` (TLS, the daemon's own certificate, a bearer token), the same three with `-o
   json`, and `python -c pass`. In this process (interleaved, medians): the SDK's
   `Client.list("cells")` over the socket and over TLS vs the library call the server makes
   for it (api.listing's rows and documents on a connection of our own), and the SDK's
   `Client.rows("cells")` (what `--server get` reads) vs `listing.rows`.
2. A watch event's latency: a new cell applied in this process (the library's apply, as `apply
   -f` records it; the daemon converges it), timed from the moment its record is committed
   (the apply returned) to its row arriving at a watcher: `devcell get cells -w` direct, `-w`
   through the socket and through TLS (subprocesses, their stdout read line by line), and the
   SDK's `Client.watch("cells")` over the socket and over TLS (threads here). The watchers take
   turns, one at a time (order reversed every other round), each started fresh, given one
   untimed change first, then --changes timed ones; each change waits for the cell to show
   Running at the watcher before the next. Also: to Running (the daemon's converge included).
3. --clients concurrent clients (default 100; threads in --procs processes, each a
   `devcell.client.Client` over TLS, each its own user's viewer token, as a team's would be,
   under the per-user bounds): each lists every cell (`Client.list`),
   watches cells from the version it read (`Client.watch(resource_version=...)`), and lists
   again every --list-every seconds (jittered) for --seconds (--limit N: each list in pages of
   N, following the continue tokens). Meanwhile this process applies a
   new cell every --change-every seconds; each client's watch must deliver every one of them.
   Reported: p50/p99 of the list latency and of event delivery (commit -> arrival at each
   client), the errors (any exception, any change not delivered: must be 0), and the daemon's
   RSS (VmRSS now, VmHWM peak) after each part, and its CPU per change (user + system over
   the changes and the grace after them, divided by the changes; also less its rate over 5 s
   of watching before them: with --list-every longer than --seconds, what a commit costs the
   daemon: converging the new cell and telling every watch).

Never timed assertions: the checks are counts (rows, deliveries, errors). Run by hand:
    .venv/bin/python bench/api_list_watch.py [--cells 10000] [--runs 9] [--rounds 3]
        [--changes 4] [--clients 100] [--procs 4] [--seconds 60]
"""

from __future__ import annotations

import abc
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import _common as c

START_TIMEOUT_S = 300.0
ARRIVAL_TIMEOUT_S = 120.0
CHANGE_PREFIX = "w-"
"""Cells this script applies while watchers watch (their names start with it)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=9)
    p.add_argument("--cells", type=int, default=10000, help="cells to record (default 10000)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of the watch latency part, each watcher once a round "
                        "(default 3)")
    p.add_argument("--changes", type=int, default=4,
                   help="timed changes per watcher and round (default 4)")
    p.add_argument("--clients", type=int, default=100,
                   help="concurrent clients of part 3 (default 100; 0: skip it)")
    p.add_argument("--procs", type=int, default=4,
                   help="processes the clients' threads are spread over (default 4)")
    p.add_argument("--seconds", type=float, default=60.0,
                   help="how long the clients go on once they all watch (default 60)")
    p.add_argument("--list-every", type=float, default=20.0,
                   help="seconds between a client's lists, jittered +-50%% (default 20)")
    p.add_argument("--change-every", type=float, default=3.0,
                   help="seconds between the changes of part 3 (default 3)")
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds the clients are given after the last change of part 3 "
                        "(default 30): a change not delivered by then is an error")
    p.add_argument("--client-timeout", type=float, default=300.0,
                   help="the SDK's timeout per request in part 3 (default 300 s)")
    p.add_argument("--limit", type=int, default=0,
                   help="part 3: each client lists in pages of this many (limit and continue; "
                        "default 0: the whole list at once)")
    p.add_argument("--skip", default="",
                   help="comma-separated parts to skip: list, watch, clients")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return args
    c.check_args(args)
    if not 1 <= args.cells <= 50000:
        sys.exit("--cells must be between 1 and 50000")
    if not 1 <= args.rounds <= 20 or not 1 <= args.changes <= 50:
        sys.exit("--rounds between 1 and 20, --changes between 1 and 50")
    if not 0 <= args.clients <= 1000 or not 1 <= args.procs <= 32:
        sys.exit("--clients between 0 and 1000, --procs between 1 and 32")
    if not 0 <= args.limit <= 10000:
        sys.exit("--limit between 0 and 10000")
    if not 1 <= args.seconds <= 3600 or args.change_every < 0.2 or args.list_every < 0.5:
        sys.exit("--seconds 1-3600, --change-every >= 0.2, --list-every >= 0.5")
    args.skipped = {s for s in args.skip.split(",") if s}
    if args.skipped - {"list", "watch", "clients"}:
        sys.exit("--skip takes list, watch, clients")
    return args


# -- the server --------------------------------------------------------------------------------

@dataclass
class Server:
    """The daemon serving the state directory on a unix socket and on TLS."""

    devcell: str
    state: Path
    work: Path
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    token_file: Path | None = None
    log: Path | None = None
    memory: dict[str, dict[str, float]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.work / "api.sock"

    @property
    def certificate(self) -> Path:
        return self.state / "api-tls" / "cert.pem"

    @property
    def token(self) -> str:
        assert self.token_file is not None
        return self.token_file.read_text().strip()

    def start(self, env: dict[str, str]) -> None:
        self.env = env
        made = c.run_ok([self.devcell, "token", "create", "--user", "bench", "--role", "viewer"],
                        env, capture=True)
        self.token_file = self.work / "token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(made.stdout)
        empty = self.work / "watched"
        empty.mkdir()
        self.log = self.work / "daemon.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [self.devcell, "controller", "run", "--manifests", str(empty), "--allow-empty",
                 "--resync", "0", "--no-runtime-events",
                 "--listen", f"unix:{self.socket}", "--listen", "tcp:127.0.0.1:0"],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.work,
                stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                sys.exit(f"the daemon exited ({self.process.returncode}); see {self.log} "
                         "(--keep)")
            served = re.search(r"API served on (https://127\.0\.0\.1:\d+)",
                               self.log.read_text(errors="replace"))
            if served and self.socket.exists():
                self.url = served.group(1)
                break
            if time.monotonic() > deadline:
                sys.exit(f"the API was not served within {START_TIMEOUT_S:.0f} s; see {self.log}")
            time.sleep(0.05)
        wait_idle(self.process.pid)
        self.note_memory("idle")

    def client_tokens(self, count: int) -> Path:
        """A viewer token each for `count` users (bench-c0, ...), one per line of an
        owner-only file: part 3's clients are a team, each under the per-user bounds (a
        user's watches: server.app.MAX_WATCHES_PER_USER), as 100 developers would be."""
        path = self.work / "client-tokens"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            for i in range(count):
                made = c.run_ok([self.devcell, "token", "create", "--user", f"bench-c{i}",
                                 "--role", "viewer"], self.env, capture=True)
                out.write(made.stdout.strip() + b"\n")
        return path

    def note_memory(self, when: str) -> None:
        assert self.process is not None
        self.memory[when] = c.process_memory_mb(self.process.pid)

    def stop(self) -> int:
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code

    def remote(self, tls: bool) -> list[str]:
        """The global options of a CLI talking to this server."""
        if not tls:
            return ["--server", f"unix:{self.socket}"]
        assert self.token_file is not None
        return ["--server", self.url, "--certificate-authority", str(self.certificate),
                "--token-file", str(self.token_file)]

    def client(self, tls: bool, timeout: float = 300.0) -> Any:
        from devcell.client import Client

        if not tls:
            return Client(f"unix:{self.socket}", timeout=timeout)
        return Client(self.url, token=self.token, ca=str(self.certificate), timeout=timeout)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid: int, timeout: float = START_TIMEOUT_S) -> float:
    """Until the process used < 3% of a CPU over a second; the seconds it took."""
    t0 = time.monotonic()
    before = cpu_seconds(pid)
    while time.monotonic() - t0 < timeout:
        time.sleep(1.0)
        now = cpu_seconds(pid)
        if now - before < 0.03:
            return time.monotonic() - t0
        before = now
    sys.exit(f"the daemon (pid {pid}) did not go idle within {timeout:.0f} s")


# -- changes -----------------------------------------------------------------------------------

class Changer:
    """Applies new cells in this process through the library (api.apply, as `apply -f`
    records them; the daemon holds the lease and converges them): the moment each apply
    returned is when its record was committed."""

    def __init__(self, state: Path) -> None:
        self.state, self.made = state, 0
        self.committed: dict[str, float] = {}

    def apply(self, name: str) -> float:
        from devcell.api import apply, converging, reports
        from devcell.manifests import loader

        data = c.cell_yaml(name, self.made).encode()
        self.made += 1
        report = apply.apply_sources(self.state, [loader.from_bytes(f"{name}.yaml", data)],
                                     options=converging.Options(wait=False))
        done = time.monotonic()
        if not reports.document(report).get("ok", False):
            sys.exit(f"the apply of {name} failed: {reports.document(report)}")
        self.committed[name] = done
        return done


# -- part 1: lists -----------------------------------------------------------------------------

def part_list(args: argparse.Namespace, server: Server, env: dict[str, str]) -> None:
    d = args.devcell
    cli_cases = {
        "get cells direct": [d, "get", "cells"],
        "get cells --server unix": [d, *server.remote(False), "get", "cells"],
        "get cells --server https": [d, *server.remote(True), "get", "cells"],
        "get cells -o json direct": [d, "get", "cells", "-o", "json"],
        "get cells -o json --server unix": [d, *server.remote(False), "get", "cells", "-o",
                                            "json"],
        "get cells -o json --server https": [d, *server.remote(True), "get", "cells", "-o",
                                             "json"],
    }
    outputs = {}
    for label, argv in cli_cases.items():  # untimed: each prints every cell
        out = c.run_ok(argv, env, capture=True).stdout
        outputs[label] = out
        count = (len(out.splitlines()) - 1 if "json" not in label
                 else len(json.loads(out)["items"]))
        if count < args.cells:
            sys.exit(f"{label}: {count} cells, expected at least {args.cells}")
    tables = [_names(outputs[k]) for k in list(cli_cases)[:3]]
    if not tables[0] == tables[1] == tables[2]:
        sys.exit("get cells printed different rows direct and through the API")
    subjects = [c.Subject(label, argv, c.fixed(env)) for label, argv in cli_cases.items()]
    subjects.append(c.Subject("python -c pass (floor)", [args.python, "-c", "pass"],
                              c.fixed(env)))
    samples = c.time_interleaved(subjects, args.runs, args.warmup, alternate=True)
    c.print_timings(f"1a. list {args.cells} cells, whole processes, {args.runs} runs each "
                    f"(interleaved, order reversed every other round; stdout to /dev/null)",
                    samples, baseline="get cells direct")
    for fmt in ("", "-o json "):
        base = statistics.median(samples[f"get cells {fmt}direct"])
        for how in ("unix", "https"):
            med = statistics.median(samples[f"get cells {fmt}--server {how}"])
            print(f"  get cells {fmt}through the API ({how}) / direct: {med / base:.2f} "
                  f"(+{(med - base) * 1000:.0f} ms)")

    # in this process
    from devcell.api import listing
    from devcell.store.db import Database

    def direct_documents() -> int:
        db = Database(server.state, create=False)
        try:
            rows = listing.rows(db, "cells", [], None)
            return len(listing.documents(db, "cells", rows))
        finally:
            db.close()

    def direct_rows() -> int:
        db = Database(server.state, create=False)
        try:
            return len(listing.rows(db, "cells", [], None))
        finally:
            db.close()

    unix, tls = server.client(False), server.client(True)
    calls: dict[str, Callable[[], int]] = {
        "listing.rows + documents (the server's own call)": direct_documents,
        "Client.list('cells') unix": lambda: len(unix.list("cells")),
        "Client.list('cells') https": lambda: len(tls.list("cells")),
        "listing.rows": direct_rows,
        "Client.rows('cells') unix": lambda: len(unix.rows("cells")["items"]),
        "Client.rows('cells') https": lambda: len(tls.rows("cells")["items"]),
    }
    timed = time_calls(calls, args.runs, args.warmup, minimum=args.cells)
    c.print_timings(f"1b. list {args.cells} cells in this process (one interpreter; "
                    f"{args.runs} runs each, interleaved)", timed,
                    baseline="listing.rows + documents (the server's own call)")
    first = list(calls)
    for base, pair in ((first[0], first[1:3]), (first[3], first[4:6])):
        for label in pair:
            ratio = statistics.median(timed[label]) / statistics.median(timed[base])
            print(f"  {label} / {base}: {ratio:.2f}")
    size = len(json.dumps({"items": tls.list("cells")}).encode())
    print(f"  a list of every cell is {size / 2**20:.1f} MiB of JSON")


def _names(table: bytes) -> list[bytes]:
    return sorted(line.split(None, 1)[0] for line in table.splitlines()[1:] if line.strip())


def time_calls(calls: dict[str, Callable[[], int]], runs: int, warmup: int, *, minimum: int
               ) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {k: [] for k in calls}
    order = list(calls)
    for round_no in range(warmup + runs):
        for label in order if round_no % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            got = calls[label]()
            seconds = time.perf_counter() - t0
            if got < minimum:
                sys.exit(f"{label}: {got} items, expected at least {minimum}")
            if round_no >= warmup:
                samples[label].append(seconds)
    return samples


# -- part 2: a watch event's latency ------------------------------------------------------------

class Watcher(abc.ABC):
    """One watcher: the moment each cell of ours first arrived, and first arrived Running."""

    label = ""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.lock = threading.Condition()
        self.failed: str | None = None

    def saw(self, name: str, running: bool) -> None:
        now = time.monotonic()
        with self.lock:
            self.arrived.setdefault(name, now)
            if running:
                self.running.setdefault(name, now)
            self.lock.notify_all()

    def wait_for(self, name: str, running: bool, timeout: float = ARRIVAL_TIMEOUT_S) -> None:
        seen = self.running if running else self.arrived
        deadline = time.monotonic() + timeout
        with self.lock:
            while name not in seen:
                if self.failed:
                    sys.exit(f"{self.label}: {self.failed}")
                left = deadline - time.monotonic()
                if left <= 0:
                    sys.exit(f"{self.label}: {name} did not arrive{' Running' if running else ''}"
                             f" within {timeout:.0f} s")
                self.lock.wait(min(left, 0.5))

    @abc.abstractmethod
    def start(self) -> None:
        """Begin watching (a process or a thread reporting to saw())."""

    @abc.abstractmethod
    def stop(self) -> None:
        """End the watch and what it started."""


class CliWatcher(Watcher):
    """`devcell [--server ...] get cells -w`: its rows read from stdout as printed."""

    def __init__(self, label: str, argv: list[str], env: dict[str, str], rows: int) -> None:
        super().__init__()
        self.label, self.argv, self.env, self.rows = label, argv, env, rows
        self.lines = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                     cwd=self.env.get("DEVCELL_HOME", "/"))
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.lines < self.rows + 1:  # the header and every row: it now watches
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{self.label}: its first table did not come ({self.lines} lines)")
            time.sleep(0.02)

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            self.lines += 1
            if line.startswith(CHANGE_PREFIX.encode()):
                words = line.split()
                self.saw(words[0].decode(), b"Running" in words)
        self.failed = "its output ended"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class SdkWatcher(Watcher):
    """`Client.watch("cells", resource_version=...)` in a thread of this process, from the
    version a `Client.rows` read (the changes after it come whatever the watch's start)."""

    def __init__(self, label: str, client: Any) -> None:
        super().__init__()
        self.label, self.client = label, client
        self.stopping = False

    def start(self) -> None:
        version = self.client.rows("cells", names=["no-such-cell"])["metadata"][
            "resourceVersion"]
        threading.Thread(target=self._read, args=(version,), daemon=True).start()

    def _read(self, version: str) -> None:
        try:
            for change in self.client.watch("cells", resource_version=version, timeout=3600):
                if self.stopping:
                    return
                meta = change.get("object", {}).get("metadata", {})
                name = str(meta.get("name", ""))
                if name.startswith(CHANGE_PREFIX) and change["type"] in ("ADDED", "MODIFIED"):
                    phase = (change["object"].get("status") or {}).get("phase")
                    self.saw(name, phase == "Running")
        except Exception as exc:  # noqa: BLE001  (said where it is waited for)
            if not self.stopping:
                self.failed = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self.stopping = True  # its thread ends at its next change; the server drops it then


def part_watch(args: argparse.Namespace, server: Server, env: dict[str, str],
               changer: Changer) -> None:
    d = args.devcell

    def watchers() -> list[Watcher]:
        rows = args.cells + changer.made
        return [
            CliWatcher("get cells -w direct", [d, "get", "cells", "-w"], env, rows),
            CliWatcher("get cells -w --server unix", [d, *server.remote(False), "get",
                                                      "cells", "-w"], env, rows),
            CliWatcher("get cells -w --server https", [d, *server.remote(True), "get",
                                                       "cells", "-w"], env, rows),
            SdkWatcher("Client.watch('cells') unix", server.client(False)),
            SdkWatcher("Client.watch('cells') https", server.client(True)),
        ]

    labels = [w.label for w in watchers()]
    to_row: dict[str, list[float]] = {k: [] for k in labels}
    to_running: dict[str, list[float]] = {k: [] for k in labels}
    for round_no in range(args.rounds):
        group = watchers()
        for w in group if round_no % 2 == 0 else group[::-1]:
            w.start()
            try:
                for k in range(args.changes + 1):  # the first one untimed
                    name = f"{CHANGE_PREFIX}{round_no}-{labels.index(w.label)}-{k}"
                    committed = changer.apply(name)
                    w.wait_for(name, running=False)
                    w.wait_for(name, running=True)
                    if k:
                        to_row[w.label].append(w.arrived[name] - committed)
                        to_running[w.label].append(w.running[name] - committed)
                    time.sleep(0.3)
            finally:
                w.stop()
            time.sleep(0.5)
        print(f"  watch round {round_no + 1}/{args.rounds} done", flush=True)
    server.note_memory("after watches")
    n = args.rounds * args.changes
    print(f"\n2. a watch event's latency over {args.cells} cells: a new cell applied (its record "
          f"committed) -> its row at the watcher, and -> shown Running there (the daemon "
          f"converged it); {n} changes per watcher, watchers one at a time in turns")
    width = max(len(k) for k in labels) + 2
    print(f"{'watcher':<{width}}{'n':>3} {'to row p50':>11} {'min':>8} {'max':>8} "
          f"{'to Running p50':>15} {'ratio':>6}")
    base = statistics.median(to_row[labels[0]])
    for label in labels:
        v, r = to_row[label], to_running[label]
        print(f"{label:<{width}}{len(v):>3} {c.fmt_ms(statistics.median(v)):>11} "
              f"{c.fmt_ms(min(v)):>8} {c.fmt_ms(max(v)):>8} "
              f"{c.fmt_ms(statistics.median(r)):>15} {statistics.median(v) / base:6.2f}")
    print("(ms; ratio: median to row over the direct CLI's)")


# -- part 3: concurrent clients -----------------------------------------------------------------

def part_clients(args: argparse.Namespace, server: Server, changer: Changer, work: Path
                 ) -> bool:
    per = [args.clients // args.procs + (i < args.clients % args.procs)
           for i in range(args.procs)]
    per = [n for n in per if n]
    tokens_file = server.client_tokens(args.clients)
    config = {"url": server.url, "tokens_file": str(tokens_file),
              "ca": str(server.certificate), "seconds": args.seconds,
              "list_every": args.list_every, "timeout": args.client_timeout,
              "prefix": f"{CHANGE_PREFIX}c-", "limit": args.limit or None}
    procs = []
    for i, n in enumerate(per):
        cfg = json.dumps({**config, "threads": n, "seed": i, "first": sum(per[:i])})
        procs.append(subprocess.Popen(
            [args.python, __file__, "--worker", cfg], stdout=subprocess.PIPE,
            stderr=open(work / f"worker-{i}.err", "wb"), env=dict(os.environ),
            stdin=subprocess.DEVNULL, text=True))
    t0 = time.monotonic()
    for p in procs:  # each says "ready" once all its clients listed and watch
        assert p.stdout is not None
        line = p.stdout.readline()
        if line.strip() != "ready":
            sys.exit(f"a client process did not start: {line!r}; see {work}/worker-*.err "
                     "(--keep)")
    ready_s = time.monotonic() - t0
    print(f"  {args.clients} clients listed and watch after {ready_s:.1f} s", flush=True)
    server.note_memory("clients watching")
    time.sleep(2.0)
    assert server.process is not None
    pid = server.process.pid
    idle_cpu, idle_t = cpu_seconds(pid), time.monotonic()
    time.sleep(5.0)  # the daemon's CPU with every client watching and nothing changing
    idle_rate = (cpu_seconds(pid) - idle_cpu) / (time.monotonic() - idle_t)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    end = time.monotonic() + args.seconds
    names: list[str] = []
    while time.monotonic() + args.change_every < end - 5:
        name = f"{config['prefix']}{len(names)}"
        changer.apply(name)
        names.append(name)
        time.sleep(args.change_every)
    time.sleep(args.grace)  # a change late by less than this is counted delivered
    window_cpu, window_s = cpu_seconds(pid) - cpu0, time.monotonic() - t0
    for p in procs:
        p.send_signal(signal.SIGUSR1)  # tells it the changes are done: report, then exit
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=args.client_timeout + 120)
        results.append(json.loads(out))
    server.note_memory("after clients")

    lists = [s for r in results for s in r["lists"]]
    first = [s for r in results for s in r["first_lists"]]
    errors = [e for r in results for e in r["errors"]]
    delivery, missed = [], 0
    for r in results:
        for arrivals in r["arrivals"]:
            for name in names:
                if name in arrivals:
                    delivery.append(arrivals[name] - changer.committed[name])
                else:
                    missed += 1
    print(f"\n3. {args.clients} concurrent clients (SDK over TLS with a token, threads in "
          f"{len(per)} processes) over {args.cells} cells for {args.seconds:.0f} s: each "
          f"listed every cell once at the start"
          f"{f' (in pages of {args.limit})' if args.limit else ''}, then every "
          f"~{args.list_every:.0f} s, and "
          f"watched cells all along; {len(names)} new cells applied "
          f"{args.change_every:.1f} s apart")
    print(f"{'what':<34}{'n':>6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for label, values in (("first list (all at once)", first), ("later lists", lists),
                          ("event delivery (commit -> client)", delivery)):
        if values:
            print(f"{label:<34}{len(values):>6} {c.fmt_ms(pct(values, 0.5)):>9} "
                  f"{c.fmt_ms(pct(values, 0.99)):>9} {c.fmt_ms(max(values)):>9}")
        else:
            print(f"{label:<34}{0:>6}")
    print(f"errors: {len(errors)}; changes not delivered within {args.grace:.0f} s of the "
          f"last: {missed} of {len(names) * args.clients}")
    if names:
        net = window_cpu - idle_rate * window_s
        print(f"daemon CPU per change (its commit converged, delivered to every watch): "
              f"{1000 * window_cpu / len(names):.0f} ms, {1000 * net / len(names):.0f} ms "
              f"less its idle rate ({1000 * idle_rate:.0f} ms/s with every client watching, "
              f"{len(names)} changes over {window_s:.0f} s; lists in the window: "
              f"{sum(1 for r in results for _ in r['lists'])})")
    for e in errors[:10]:
        print(f"  {e}")
    return not errors and not missed


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))]


def worker(cfg: dict[str, Any]) -> int:
    """A client process of part 3: `threads` clients; "ready" on stdout once each listed and
    watches; on SIGUSR1 (or after `seconds` + 10 minutes) its figures as one JSON line."""
    from devcell.client import Client

    tokens = Path(cfg["tokens_file"]).read_text().split()[cfg["first"]:]
    rng = random.Random(cfg["seed"])
    done = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: done.set())
    lock = threading.Lock()
    lists: list[float] = []
    first_lists: list[float] = []
    errors: list[str] = []
    arrivals: list[dict[str, float]] = []
    started = threading.Semaphore(0)

    def error(what: str, exc: BaseException) -> None:
        with lock:
            errors.append(f"{what}: {type(exc).__name__}: {exc}"[:300])

    def one(i: int) -> None:
        client = Client(cfg["url"], token=tokens[i], ca=cfg["ca"], timeout=cfg["timeout"])
        seen: dict[str, float] = {}
        arrivals.append(seen)
        try:
            t0 = time.monotonic()
            client.list("cells", limit=cfg["limit"])
            with lock:
                first_lists.append(time.monotonic() - t0)
            version = client.rows("cells", names=["no-such-cell"])["metadata"][
                "resourceVersion"]
        except Exception as exc:  # noqa: BLE001  (counted: the bench's check)
            error(f"client {i} first list", exc)
            started.release()
            return
        threading.Thread(target=watch, args=(i, client, version, seen), daemon=True).start()
        started.release()
        while not done.is_set():
            if done.wait(cfg["list_every"] * rng.uniform(0.5, 1.5)):
                return
            try:
                t0 = time.monotonic()
                client.list("cells", limit=cfg["limit"])
                with lock:
                    lists.append(time.monotonic() - t0)
            except Exception as exc:  # noqa: BLE001
                error(f"client {i} list", exc)

    def watch(i: int, client: Any, version: str, seen: dict[str, float]) -> None:
        try:
            for change in client.watch("cells", resource_version=version, timeout=3600):
                name = str(change.get("object", {}).get("metadata", {}).get("name", ""))
                if name.startswith(cfg["prefix"]) and name not in seen:
                    seen[name] = time.monotonic()
        except Exception as exc:  # noqa: BLE001
            if not done.is_set():
                error(f"client {i} watch", exc)

    for i in range(cfg["threads"]):
        threading.Thread(target=one, args=(i,), daemon=True).start()
    for _ in range(cfg["threads"]):
        started.acquire()
    print("ready", flush=True)
    done.wait(cfg["seconds"] + 600)
    time.sleep(1.0)  # the last change's stragglers
    with lock:
        print(json.dumps({"lists": lists, "first_lists": first_lists, "errors": errors,
                          "arrivals": arrivals}), flush=True)
    os._exit(0)  # the watches' threads block in their reads


# -- main ---------------------------------------------------------------------------------------

def main() -> int:
    args = parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    ok = True
    with c.workdir(args.keep) as work:
        manifests, state = work / "manifests", work / "state"
        c.write_cells(manifests, args.cells)
        c.warm_bytecode(args.devcell, work)
        env = c.env_for(state)
        env["DEVCELL_CONTEXTS"] = str(work / "no-contexts.json")  # never the user's
        os.environ["DEVCELL_CONTEXTS"] = env["DEVCELL_CONTEXTS"]
        bulk = c.run_ok([args.devcell, "apply", "-f", str(manifests)], env, timeout=3600)
        print(f"set-up: bulk apply of {args.cells} cells {bulk.seconds:.1f} s", flush=True)
        server = Server(args.devcell, state, work)
        try:
            t0 = time.monotonic()
            server.start(env)
            print(f"set-up: daemon serving {server.url} and unix:{server.socket}, idle after "
                  f"{time.monotonic() - t0:.1f} s, RSS {server.memory['idle']['VmRSS']:.0f} MB",
                  flush=True)
            changer = Changer(state)
            if "list" not in args.skipped:
                part_list(args, server, env)
                server.note_memory("after lists")
            if "watch" not in args.skipped:
                part_watch(args, server, env, changer)
            if args.clients and "clients" not in args.skipped:
                ok = part_clients(args, server, changer, work)
        finally:
            code = server.stop()
        print("\nthe daemon's memory (MB): " + "; ".join(
            f"{when} RSS {m['VmRSS']:.0f} (peak {m['VmHWM']:.0f})"
            for when, m in server.memory.items()))
        assert server.log is not None
        if code != 0 or c.daemon_log_errors(server.log.read_text(errors="replace")):
            print(f"CHECK FAILED: the daemon exited {code}; its log has errors (--keep)")
            ok = False
        print("checks: " + ("PASS (every list complete, every change delivered to every "
                            "watcher, no error)" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
