#!/usr/bin/env python3
"""GitOps latency: a manifest file saved in the watched directory -> the desired state recorded
in state.db, and -> the cell Ready, with the daemon (`devcell controller run`) on the fake
backend; side by side for a small and a large watched directory, plus the large daemon's start
time and memory.

Method. One daemon per directory size (--files, default 20 and 10,000 files) runs on its own
temp state dir and watches its own temp directory (one Cell per file, one of them the cell
that is edited). This process saves files there one at a time and measures from the moment
the save returned (time.perf_counter() right after os.replace of a fully written temp file,
the way editors save atomically; or after an in-place write with --write inplace) until it
sees, on its own read-only connection to that daemon's state.db:
  recorded: the cell row with the new generation (a new cell: the row exists);
  ready:    phase Running, observedGeneration == generation (the Ready condition is True).
It polls `PRAGMA data_version` (which moves only when another connection commits) every
0.2 ms and reads the row only when it moved. Two kinds of save, --saves each per size (>= 50):
  create: a new file with a new Cell (plan: create-volume, create, start);
  edit:   one existing Cell's spec changed (an env value; plan: stop, delete, create, start).
The sizes take turns (save i to the small directory, then save i to the large one, create then
edit for each), so drift on the machine hits both alike. Saves are 50 ms apart after the
previous one was Ready, so each is its own watch event.

Start and memory. Each daemon is started twice before the saves: a cold start on a fresh state
dir (it records every file, then converges every cell; both times are printed) and, after a
SIGTERM, a warm start on the recorded state (the restart a user sees). `start` is the time
from the process being spawned to its watching the directory (an inotify instance in
/proc/<pid>/fd; it watches only after its startup sync). The saves begin once the restarted
daemon is idle (its CPU time stops growing). RSS: VmRSS from /proc/<pid>/status once the
restarted daemon is idle, and VmRSS/VmHWM (peak) after the saves.
Targets (issues 3 and 9): p50 <= 50 ms to recorded for every size, p50 <= 100 ms to Ready;
RSS <= 100 MB.

Run by hand: .venv/bin/python bench/daemon_latency.py [--saves 60] [--files 20,10000]
             [--write replace|inplace]
(about 3-5 minutes with the defaults, most of it converging the 10,000 cells once.)
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import _common as c

TARGET_RECORDED_MS = 50.0
TARGET_READY_MS = 100.0
TARGET_RSS_MB = 100.0
SAVE_TIMEOUT_S = 10.0
START_TIMEOUT_S = 300.0
CONVERGE_TIMEOUT_S = 900.0
KINDS = ("create", "edit")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--saves", type=int, default=60,
                   help="saves of each kind per directory size (>= 50; default 60)")
    p.add_argument("--files", default="20,10000",
                   help="comma-separated sizes of the watched directories, in files "
                        "(default 20,10000)")
    p.add_argument("--write", choices=["replace", "inplace"], default="replace",
                   help="atomic save (temp file + rename, default) or in-place write")
    p.add_argument("--workers", type=int, default=4, help="daemon --workers (default 4)")
    p.add_argument("--devcell", default=str(c.VENV_BIN / "devcell"),
                   help="the devcell console script (default: the project's .venv)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir and print its path")
    p.add_argument("--listen", action="store_true",
                   help="each daemon also serves the HTTP API on a unix socket, with two "
                        "clients watching it all along (cells and events; docs/api.md)")
    c.add_compare_options(p)
    args = p.parse_args()
    if not 50 <= args.saves <= 1000:
        sys.exit("--saves must be between 50 and 1000")
    try:
        args.sizes = sorted({int(s) for s in args.files.split(",")})
    except ValueError:
        sys.exit("--files takes comma-separated integers, e.g. 20,10000")
    if not args.sizes or not all(1 <= s <= 20000 for s in args.sizes):
        sys.exit("--files: each size between 1 and 20000")
    if not os.access(args.devcell, os.X_OK):
        sys.exit(f"{args.devcell} not found; run ./scripts/setup first (or pass --devcell)")
    return args


@dataclass
class Subject:
    """One daemon and its directory of `files` manifest files."""

    files: int
    work: Path
    process: subprocess.Popen[bytes] | None = None
    conn: sqlite3.Connection | None = None
    logs: list[Path] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    samples: dict[str, tuple[list[float], list[float]]] = field(
        default_factory=lambda: {k: ([], []) for k in KINDS})
    _log: IO[bytes] | None = None
    watchers: list[Watcher] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.work / f"state-{self.files}"

    @property
    def watched(self) -> Path:
        return self.work / f"watched-{self.files}"

    def populate(self) -> None:
        c.write_cells(self.watched, self.files - 1)
        (self.watched / "edited.yaml").write_text(edited_cell(0))

    @property
    def socket(self) -> Path:
        return self.work / f"api-{self.files}.sock"

    def start(self, devcell: str, workers: int, listen: bool = False) -> float:
        """Spawn the daemon; seconds until it watches its directory."""
        log = self.work / f"daemon-{self.files}-{len(self.logs)}.log"
        self.logs.append(log)
        self._log = open(log, "wb")
        t0 = time.perf_counter()
        serving = ["--listen", f"unix:{self.socket}"] if listen else []
        self.process = subprocess.Popen(
            [devcell, "controller", "run", "--manifests", str(self.watched), "--workers",
             str(workers), *serving], stdout=self._log, stderr=subprocess.STDOUT,
            env=c.env_for(self.state), cwd=self.work)
        wait_watching(self.process, log)
        seconds = time.perf_counter() - t0
        self.conn = wait_started(self.state, self.process, log)
        if listen:
            self.watchers = [Watcher(self.socket, "cells"), Watcher(self.socket, "events")]
        return seconds

    def stop(self) -> int:
        for w in self.watchers:
            w.stop()
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self._log is not None:
            self._log.close()
        self.process = None
        return code


class Watcher:
    """A client of the API watching one resource for the whole run (a thread reading its
    JSON lines), so the daemon serves while it reconciles; counts what it read."""

    def __init__(self, sock: Path, resource: str) -> None:
        import http.client
        import socket as socketlib
        import threading

        deadline = time.monotonic() + 30
        while not sock.exists():
            if time.monotonic() > deadline:
                sys.exit(f"{sock}: the API did not start")
            time.sleep(0.05)
        conn = http.client.HTTPConnection("devcell")
        conn.sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        conn.sock.connect(str(sock))
        conn.request("GET", f"/api/v1/{resource}?watch=true")
        self.response = conn.getresponse()
        if self.response.status != 200:
            sys.exit(f"watch {resource}: HTTP {self.response.status}")
        self.conn, self.lines = conn, 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for _ in self.response:
                self.lines += 1
        except Exception:  # noqa: BLE001  (the connection closed under it at the end)
            pass

    def stop(self) -> None:
        try:
            self.conn.sock.shutdown(2)
        except OSError:
            pass
        self.conn.close()


def save(path: Path, text: str, how: str) -> float:
    """Write `path`; return perf_counter() at the moment the save completed."""
    if how == "inplace":
        path.write_text(text)
    else:
        tmp = path.with_name(f".{path.name}.tmp")  # hidden: the loader skips it
        tmp.write_text(text)
        os.replace(tmp, path)
    return time.perf_counter()


def edited_cell(i: int) -> str:
    return c.cell_yaml("edited", 0).replace("value: debug", f"value: debug-{i}")


def watch(conn: sqlite3.Connection, name: str, generation: int, t0: float
          ) -> tuple[float, float]:
    """Seconds from t0 until the row of `name` reaches `generation` (recorded) and is Running
    with observed_generation == generation (ready)."""
    recorded = None
    last = None
    deadline = t0 + SAVE_TIMEOUT_S
    while True:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        now = time.perf_counter()
        if version != last:
            last = version
            row = conn.execute(
                "SELECT generation, observed_generation, phase FROM cells "
                "WHERE name = ? AND deleted_at IS NULL", (name,)).fetchone()
            if row is not None and row[0] >= generation:
                if recorded is None:
                    recorded = now - t0
                if row[2] == "Running" and row[1] == row[0] == generation:
                    return recorded, now - t0
        if now > deadline:
            sys.exit(f"{name}: generation {generation} not Ready within {SAVE_TIMEOUT_S} s "
                     f"(recorded after {recorded})")
        time.sleep(0.0002)


def wait_started(state: Path, daemon: subprocess.Popen[bytes], log: Path) -> sqlite3.Connection:
    """A read-only connection once the daemon has recorded itself as the controller."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if time.monotonic() > deadline or daemon.poll() is not None:
            sys.exit(f"the daemon did not start; see {log} (--keep)")
        if (state / "state.db").exists():
            conn = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
            try:
                row = conn.execute("SELECT pid FROM controllers").fetchone()
            except sqlite3.OperationalError:
                row = None
            if row is not None and row[0] == daemon.pid:
                return conn
            conn.close()
        time.sleep(0.01)


def wait_watching(daemon: subprocess.Popen[bytes], log: Path) -> None:
    """Until the daemon has an inotify instance: it starts watching only after its startup
    sync and its workers."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            sys.exit(f"the daemon exited ({daemon.returncode}); see {log} (--keep)")
        try:
            fds = os.listdir(f"/proc/{daemon.pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                if os.readlink(f"/proc/{daemon.pid}/fd/{fd}") == "anon_inode:inotify":
                    return
            except OSError:
                continue
        time.sleep(0.005)
    sys.exit("the daemon never started watching its directory")


def wait_converged(conn: sqlite3.Connection, want: int) -> None:
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    done = 0
    while time.monotonic() < deadline:
        done = conn.execute("SELECT count(*) FROM cells WHERE phase = 'Running' AND "
                            "observed_generation = generation AND deleted_at IS NULL"
                            ).fetchone()[0]
        if done >= want:
            return
        time.sleep(0.1)
    sys.exit(f"only {done} of {want} cells Running after {CONVERGE_TIMEOUT_S} s")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid: int, timeout: float = 300.0) -> None:
    """Until the process used < 2% of a CPU over a second (its startup reconciles are done)."""
    deadline = time.monotonic() + timeout
    before = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_seconds(pid)
        if now - before < 0.02:
            return
        before = now
    sys.exit(f"the daemon (pid {pid}) did not go idle within {timeout} s")



def bring_up(s: Subject, args: argparse.Namespace) -> None:
    """Cold start, converge, stop, warm start, idle: the figures of one daemon."""
    s.populate()
    t0 = time.perf_counter()
    s.figures["cold start s"] = s.start(args.devcell, args.workers)
    assert s.conn is not None
    wait_converged(s.conn, s.files)
    s.figures["cold converged s"] = time.perf_counter() - t0
    assert s.process is not None
    s.figures["cold VmHWM MB"] = c.process_memory_mb(s.process.pid)["VmHWM"]
    if s.stop() != 0:
        sys.exit(f"the daemon for {s.files} files did not exit cleanly; see {s.logs[-1]}")
    s.figures["warm start s"] = s.start(args.devcell, args.workers, args.listen)
    assert s.process is not None
    wait_idle(s.process.pid)
    s.figures["idle VmRSS MB"] = c.process_memory_mb(s.process.pid)["VmRSS"]


def one_save(s: Subject, kind: str, i: int, how: str) -> None:
    assert s.conn is not None
    if kind == "create":
        name = f"lat-{i:04d}"
        t0 = save(s.watched / f"{name}.yaml", c.cell_yaml(name, i), how)
        recorded, ready = watch(s.conn, name, 1, t0)
    else:
        t0 = save(s.watched / "edited.yaml", edited_cell(i + 1), how)
        recorded, ready = watch(s.conn, "edited", i + 2, t0)
    s.samples[kind][0].append(recorded)
    s.samples[kind][1].append(ready)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))]


def verify(s: Subject, saves: int) -> list[str]:
    assert s.conn is not None
    conn, label = s.conn, f"{s.files} files"
    problems = []
    running = conn.execute("SELECT count(*) FROM cells WHERE name LIKE 'lat-%' AND phase = "
                           "'Running' AND generation = 1 AND observed_generation = 1").fetchone()[0]
    if running != saves:
        problems.append(f"{label}: {running} of {saves} created cells Running")
    row = conn.execute("SELECT generation, observed_generation, phase FROM cells "
                       "WHERE name = 'edited' AND deleted_at IS NULL").fetchone()
    if row is None or tuple(row) != (saves + 1, saves + 1, "Running"):
        problems.append(f"{label}: edited cell: {row}")
    live = conn.execute("SELECT count(*) FROM cells WHERE deleted_at IS NULL").fetchone()[0]
    if live != s.files + saves:
        problems.append(f"{label}: {live} live cells, expected {s.files + saves}")
    ops = conn.execute("SELECT count(*), sum(status = 'Succeeded') FROM operations").fetchone()
    if ops[0] != ops[1] or ops[0] != s.files + 2 * saves:
        problems.append(f"{label}: {ops[1]} of {ops[0]} operations Succeeded, expected "
                        f"{s.files + 2 * saves}")
    return problems


def print_latency(subjects: list[Subject]) -> None:
    print(f"\n{'files':>6} {'save':<7}{'n':>4} {'to':<9}{'p50 ms':>8} {'p95 ms':>8} "
          f"{'min ms':>8} {'max ms':>8}  target")
    for s in subjects:
        both = [v for k in KINDS for v in s.samples[k][0]], [v for k in KINDS
                                                             for v in s.samples[k][1]]
        rows = [(kind, label, values)
                for kind, (to_recorded, to_ready) in [*s.samples.items(), ("both", both)]
                for label, values in (("recorded", to_recorded), ("Ready", to_ready))]
        for kind, label, values in rows:
            target = TARGET_RECORDED_MS if label == "recorded" else TARGET_READY_MS
            p50 = statistics.median(values) * 1000
            print(f"{s.files:>6} {kind:<7}{len(values):>4} {label:<9}{p50:8.1f} "
                  f"{pct(values, 0.95) * 1000:8.1f} {min(values) * 1000:8.1f} "
                  f"{max(values) * 1000:8.1f}  p50 <= {target:.0f} ms {c.verdict(p50 <= target)}")


def print_figures(subjects: list[Subject]) -> None:
    print(f"\n{'files':>6} {'cold start s':>13} {'converged s':>12} {'cold HWM MB':>12} "
          f"{'warm start s':>13} {'idle RSS MB':>12} {'end RSS MB':>11} {'end HWM MB':>11}")
    for s in subjects:
        f = s.figures
        worst = max(f["cold VmHWM MB"], f["end VmHWM MB"])
        print(f"{s.files:>6} {f['cold start s']:13.2f} {f['cold converged s']:12.1f} "
              f"{f['cold VmHWM MB']:12.1f} {f['warm start s']:13.2f} {f['idle VmRSS MB']:12.1f} "
              f"{f['end VmRSS MB']:11.1f} {f['end VmHWM MB']:11.1f}  "
              f"RSS <= {TARGET_RSS_MB:.0f} MB {c.verdict(worst <= TARGET_RSS_MB)}")
        if "API watch lines read" in f:
            print(f"{'':>6} API watchers read {f['API watch lines read']:.0f} lines")


def main() -> int:
    args = parse_args()
    if args.compare_devcell:  # the whole run once per build, builds taking turns (_common.py)
        return c.rerun_per_build(__file__, args)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    rev = subprocess.run(["git", "-C", str(c.REPO), "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, check=False).stdout.strip() or "?"
    print(f"daemon latency at {rev}: {args.saves} saves of each kind per size, sizes "
          f"{args.sizes} files, write={args.write}, workers={args.workers}"
          f"{', serving the API with 2 watchers' if args.listen else ''}; "
          f"{os.cpu_count()} CPUs, load average {load}")
    problems: list[str] = []
    with c.workdir(args.keep) as work:
        subjects = [Subject(n, work) for n in args.sizes]
        c.warm_bytecode(args.devcell, work)  # the first cold start does not compile modules
        try:
            for s in subjects:
                bring_up(s, args)
                print(f"  {s.files} files: cold start {s.figures['cold start s']:.2f} s, "
                      f"warm start {s.figures['warm start s']:.2f} s", flush=True)
            for i in range(args.saves):
                for s in subjects:
                    for kind in KINDS:
                        one_save(s, kind, i, args.write)
                        time.sleep(0.05)
            for s in subjects:
                assert s.process is not None
                mem = c.process_memory_mb(s.process.pid)
                s.figures["end VmRSS MB"], s.figures["end VmHWM MB"] = mem["VmRSS"], mem["VmHWM"]
                if s.watchers:
                    s.figures["API watch lines read"] = sum(w.lines for w in s.watchers)
                problems += verify(s, args.saves)
        finally:
            codes = {s.files: s.stop() for s in subjects}
        for s in subjects:
            text = "".join(log.read_text(errors="replace") for log in s.logs)
            if codes[s.files] != 0 or c.daemon_log_errors(text):
                problems.append(f"{s.files} files: daemon exit {codes[s.files]}; its log has "
                                "errors (see --keep)")
        print_latency(subjects)
        print_figures(subjects)
        print("\nthe daemon's watch settings: watchfiles step 15 ms (quiet time before a batch "
              "is handed over), debounce 400 ms (cap for a change storm)")
        if problems:
            print("\nCHECK FAILED:\n  " + "\n  ".join(problems))
            return 1
        print(f"checks, per size: {args.saves} lat-* cells Running at generation 1, 'edited' "
              f"Running at generation {args.saves + 1}, one Succeeded operation per initial "
              "cell and per save, clean daemon logs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
