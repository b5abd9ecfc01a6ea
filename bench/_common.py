"""Shared helpers for the scripts in bench/ (stdlib only; run by hand, never by pytest).

Every measurement is a whole process started with subprocess and timed with
time.perf_counter() around it, so interpreter start-up, site/.pth processing, imports,
SQLite open and exit are all included, the same for DevCell and for its peer.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"
MIN_RUNS = 5
MAX_RUNS = 200  # every loop in these scripts is bounded


# -- command line ------------------------------------------------------------------------------

def base_parser(description: str, *, runs: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--runs", type=int, default=runs,
                   help=f"timed runs of each command (>= {MIN_RUNS}; default {runs})")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed runs of each command before timing (default 1)")
    p.add_argument("--python", default=str(VENV_BIN / "python"),
                   help="interpreter for the peers and the profiles (default: the project's .venv)")
    p.add_argument("--devcell", default=str(VENV_BIN / "devcell"),
                   help="the devcell console script to time (default: the project's .venv)")
    p.add_argument("--profile", nargs="?", const="cprofile", choices=["cprofile", "pyinstrument"],
                   help="after timing, run one more iteration under cProfile (top 25 cumulative) "
                        "or pyinstrument, then three runs with -X importtime")
    p.add_argument("--keep", action="store_true", help="keep the temp dir and print its path")
    p.add_argument("--no-pyc-cache", action="store_true",
                   help="run with the inherited bytecode settings; by default the commands get "
                        "PYTHONPYCACHEPREFIX=<tmp>/pycache and no PYTHONDONTWRITEBYTECODE, so "
                        "compiled modules are cached as in a normal install (an editable install "
                        "under PYTHONDONTWRITEBYTECODE=1 recompiles devcell/ in every process)")
    add_compare_options(p)
    return p


def parse_cells_args(description: str, *, runs: int) -> argparse.Namespace:
    """The common options plus --cells (manifest files to apply), parsed and checked: the
    set-up of the benches that apply a directory of generated cells to the fake backend."""
    p = base_parser(description, runs=runs)
    p.add_argument("--cells", type=int, default=1000, help="cells (files) to apply (default 1000)")
    args = p.parse_args()
    check_args(args)
    if not 1 <= args.cells <= 20000:
        sys.exit("--cells must be between 1 and 20000")
    return args


def add_workspace_options(p: argparse.ArgumentParser, *, mib: int, what: str = "workspace"
                          ) -> None:
    """--files and --mib: the size of the filled workspace of the checkpoint benches."""
    p.add_argument("--files", type=int, default=10_000,
                   help="files in the filled workspace (default 10000)")
    p.add_argument("--mib", type=int, default=mib, help=f"{what} size in MiB (default {mib})")


def require_free_disk(mib: int, copies: int, why: str = "") -> int:
    """Exit unless `copies` times `mib` MiB fit on this disk (the benches' temp dirs are on
    it); returns the free bytes, for benches that scale down to what fits."""
    free = shutil.disk_usage(Path.cwd()).free
    if free < copies * mib * 2**20:
        sys.exit(f"not enough free disk for this benchmark{f' ({why})' if why else ''}")
    return free


def add_compare_options(p: argparse.ArgumentParser) -> None:
    """--compare-devcell/--compare-label: a second build timed in the same run. Two builds
    are compared this way rather than from two separate runs because on a shared two-CPU
    machine the drift between runs is larger than the differences worth finding."""
    p.add_argument("--compare-devcell", metavar="PATH",
                   help="a second devcell console script (another build, e.g. a checkout of "
                        "the previous revision with its own venv) timed as one more subject in "
                        "the same round-robin; --devcell is then labelled 'after'")
    p.add_argument("--compare-label", default="before",
                   help="label of the --compare-devcell build in the tables (default 'before')")


_SETTINGS: dict[str, Any] = {"pyc_cache": True, "pycache_dir": None}


def check_args(args: argparse.Namespace) -> None:
    if not MIN_RUNS <= args.runs <= MAX_RUNS:
        sys.exit(f"--runs must be between {MIN_RUNS} and {MAX_RUNS}")
    if not 0 <= args.warmup <= 10:
        sys.exit("--warmup must be between 0 and 10")
    for exe in (args.python, args.devcell):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} not found; run ./scripts/setup first (or pass --python/--devcell)")
    check_compare(args)
    _SETTINGS["pyc_cache"] = not args.no_pyc_cache
    probe = ("import sys, devcell, yaml; print(sys.version.split()[0], devcell.__version__, "
             "yaml.__version__, yaml.__with_libyaml__, devcell.__file__)")
    version = subprocess.run([args.python, "-c", probe], capture_output=True, text=True,
                             check=False, timeout=60, cwd=tempfile.gettempdir()).stdout.split()
    if len(version) != 5:
        sys.exit(f"{args.python} cannot import devcell and yaml; run ./scripts/setup first")
    package = Path(version[4]).parent
    where = f"from {package}"
    if package.is_relative_to(REPO):
        git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=False).stdout.strip() or "?"
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "devcell"],
                               capture_output=True, text=True, check=False).stdout.strip()
        where += f" at {git}{' + uncommitted changes' if dirty else ''}"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    bytecode = ("cached in a temp PYTHONPYCACHEPREFIX" if _SETTINGS["pyc_cache"] else
                "inherited (PYTHONDONTWRITEBYTECODE="
                f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})")
    print(f"devcell {version[1]} {where}; "
          f"python {version[0]} ({args.python}); PyYAML {version[2]} (libyaml {version[3]})\n"
          f"{os.cpu_count()} CPUs, load average {load}; bytecode: {bytecode}")
    print_builds(args)


@contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="devcell-bench-"))
    _SETTINGS["pycache_dir"] = path / "pycache"
    try:
        yield path
    finally:
        if keep:
            print(f"\nkept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def env_for(state_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["DEVCELL_HOME"] = str(state_dir)
    env.pop("DEVCELL_FAKE_FAIL", None)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    if _SETTINGS["pyc_cache"] and _SETTINGS["pycache_dir"] is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(_SETTINGS["pycache_dir"])
    return env


# -- comparing two builds ----------------------------------------------------------------------

AFTER = "after"  # the label of --devcell when a --compare-devcell build is timed beside it
RATIO_NOTE = 1.05  # an after/before median ratio above this is called out as slower


@dataclass(frozen=True)
class Build:
    """One devcell console script under test. `tag` is put into the labels of its subjects
    (" (after)", " (before)"), or is empty when only one build is timed, so that a run without
    --compare-devcell prints the same tables as before the option existed."""

    devcell: str
    name: str

    @property
    def tag(self) -> str:
        return f" ({self.name})" if self.name else ""


def builds(args: argparse.Namespace) -> list[Build]:
    """--devcell, then the --compare-devcell build if there is one."""
    if not args.compare_devcell:
        return [Build(args.devcell, "")]
    return [Build(args.devcell, AFTER), Build(args.compare_devcell, args.compare_label)]


def check_compare(args: argparse.Namespace) -> None:
    if not args.compare_devcell:
        return
    if not os.access(args.compare_devcell, os.X_OK):
        sys.exit(f"{args.compare_devcell} (--compare-devcell) is not an executable")
    if not args.compare_label or args.compare_label == AFTER:
        sys.exit(f"--compare-label must be a non-empty word other than {AFTER!r}")
    if os.path.realpath(args.compare_devcell) == os.path.realpath(args.devcell):
        sys.exit("--compare-devcell is the same console script as --devcell")


def describe_build(devcell: str) -> str:
    """Version, package directory and git revision of the devcell a console script runs: the
    interpreter is read from the script's #! line, since each build has its own venv."""
    try:
        first = Path(devcell).read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return f"{devcell}: unreadable"
    interpreter = first[2:].strip() if first.startswith("#!") else sys.executable
    probe = "import devcell; print(devcell.__version__, devcell.__file__)"
    out = subprocess.run([interpreter, "-c", probe], capture_output=True, text=True,
                         check=False, timeout=60, cwd=tempfile.gettempdir()).stdout.split()
    if len(out) != 2:
        return f"{devcell}: its interpreter {interpreter} cannot import devcell"
    package = Path(out[1]).parent
    git = ["git", "-C", str(package.parent)]
    rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, check=False).stdout.strip() or "?"
    # a checkout made for the benches may have commits of its own that touch only bench/
    changed = subprocess.run([*git, "log", "-1", "--format=%h", "--", str(package)],
                             capture_output=True, text=True, check=False).stdout.strip() or "?"
    dirty = subprocess.run([*git, "status", "--porcelain", "--", str(package)],
                           capture_output=True, text=True, check=False).stdout.strip()
    return (f"devcell {out[0]} from {package} at {rev} (devcell/ last changed in {changed})"
            f"{' + uncommitted changes' if dirty else ''} ({devcell})")


def print_builds(args: argparse.Namespace) -> None:
    """One line per build when two are compared (nothing otherwise)."""
    if args.compare_devcell:
        for b in builds(args):
            print(f"build {b.name!r}: {describe_build(b.devcell)}")


def print_build_ratios(samples: dict[str, list[float]], builds_: list[Build],
                       label: Callable[[Build], str]) -> None:
    """The median of the first build over that of the second, for one kind of subject whose
    label per build is `label(build)`."""
    if len(builds_) < 2:
        return
    after, before = (statistics.median(samples[label(b)]) for b in builds_[:2])
    ratio = after / before
    note = f"  > {RATIO_NOTE:.2f}: {builds_[0].name} is slower" if ratio > RATIO_NOTE else ""
    print(f"{builds_[0].name}/{builds_[1].name} (median): {ratio:.2f}  {label(builds_[0])}{note}")


def rerun_per_build(script: str, args: argparse.Namespace, *, rounds: int = 2) -> int:
    """Compare two builds in a script that starts one long-lived daemon per run: run the script
    itself once per build and round, the builds taking turns and swapping which goes first in
    each round (A B, B A), with --devcell set to that build. Every run prints its own table
    and checks; this prints them, then for each table row seen in both builds' output (the
    words before its first decimal figure) the median over rounds of that figure per build.
    Re-running keeps the script's own code untouched, so the option needs only a few lines
    in the script."""
    pair = builds(args)
    check_compare(args)
    print_builds(args)
    argv = _without_compare_options(sys.argv[1:])
    figures: dict[str, dict[str, list[float]]] = {b.name: {} for b in pair}
    failed = 0
    for round_no in range(rounds):
        for b in pair if round_no % 2 == 0 else pair[::-1]:
            print(f"\n=== round {round_no + 1}/{rounds}: {b.name} ({b.devcell})", flush=True)
            proc = subprocess.run([sys.executable, script, *argv, "--devcell", b.devcell],
                                  stdout=subprocess.PIPE, text=True, check=False, timeout=3600)
            print(proc.stdout, end="", flush=True)
            failed += proc.returncode != 0
            for key, value in first_decimals(proc.stdout).items():
                figures[b.name].setdefault(key, []).append(value)
    after, before = (figures[b.name] for b in pair)
    keys = [k for k in after if k in before]
    print(f"\n=== {pair[0].name} vs {pair[1].name}: the first decimal figure of each table row, "
          f"median over {rounds} rounds")
    width = max((len(k) for k in keys), default=10) + 2
    print(f"{'row':<{width}}{pair[0].name:>10}{pair[1].name:>10}{'ratio':>8}")
    for key in keys:
        a, b_ = statistics.median(after[key]), statistics.median(before[key])
        ratio = f"{a / b_:8.2f}" if b_ else "       -"
        note = "  slower" if b_ and a / b_ > RATIO_NOTE else ""
        print(f"{key:<{width}}{a:10.2f}{b_:10.2f}{ratio}{note}")
    if failed:
        print(f"\n{failed} of {rounds * len(pair)} runs FAILED their checks (see above)")
    return 1 if failed else 0


def _without_compare_options(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--compare-devcell", "--compare-label"):
            skip = True
        elif not arg.startswith(("--compare-devcell=", "--compare-label=")):
            out.append(arg)
    return out


def first_decimals(text: str) -> dict[str, float]:
    """Table rows as {words before the first decimal figure: that figure}. A row is a line with
    at least two decimal figures (a header line with one load average figure is not); rows
    whose words differ between runs (a path) simply find no partner."""
    rows: dict[str, float] = {}
    for line in text.splitlines():
        words = line.split()
        decimals = [i for i, w in enumerate(words)
                    if "." in w and w.replace(".", "", 1).isdigit()]
        if len(decimals) >= 2 and decimals[0] > 0:
            rows[" ".join(words[:decimals[0]])] = float(words[decimals[0]])
    return rows


# -- manifests ---------------------------------------------------------------------------------

def cell_yaml(name: str, i: int) -> str:
    """A realistic Cell: two services, env (one secret), labels, resources, workspace."""
    return f"""\
# generated by bench/ for DevCell benchmarks
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata:
  name: {name}
  labels:
    team: team-{i % 7}
    tier: {"web" if i % 2 else "worker"}
    bench: "true"
  annotations:
    owner: bench-{i % 13}@example.com
spec:
  backend: fake
  image: devcell/busybox:1.{i % 5}
  state: Running
  workspace:
    mountPath: /workspace
  services:
    - name: web
      command: [sh, -c, "httpd -f -p {8000 + i % 1000} -h /workspace"]
    - name: worker
      command: [python3, -m, worker, --queue, "q-{i % 17}", --concurrency, "4"]
      restart: OnFailure
  env:
    - name: LOG_LEVEL
      value: debug
    - name: DATABASE_URL
      value: postgres://app@db-{i % 3}.internal:5432/app
    - name: API_TOKEN
      value: tok-{i:08d}-not-a-real-secret
      secret: true
  resources:
    cpus: 0.5
    memory: 256Mi
"""


def idle_container_cell_yaml(name: str, *, image: str = "devcell/busybox:latest",
                             sleep: str = "1000000") -> str:
    """A container cell with no network whose one service only sleeps: a cell to fill,
    checkpoint, kill or move, whose own work never disturbs the figure."""
    return f"""\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: {name}}}
spec:
  backend: container
  image: {image}
  network: {{mode: none}}
  services:
    - name: idle
      command: [sleep, "{sleep}"]
"""


def write_cells(directory: Path, count: int, prefix: str = "cell") -> list[Path]:
    """One Cell per file, names `prefix-00000`...; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(count):
        name = f"{prefix}-{i:05d}"
        path = directory / f"{name}.yaml"
        path.write_text(cell_yaml(name, i))
        files.append(path)
    return files


def warm_bytecode(devcell: str, work: Path) -> None:
    """Apply one cell into a throwaway state dir, so that the first measured apply does not
    also compile every module into the fresh bytecode cache."""
    write_cells(work / "warm-manifests", 1, prefix="warm")
    run_ok([devcell, "apply", "-f", str(work / "warm-manifests")], env_for(work / "warm-state"))
    run_ok([devcell, "get", "cells"], env_for(work / "warm-state"))
    shutil.rmtree(work / "warm-manifests")
    shutil.rmtree(work / "warm-state")


# The peer for commands that read a manifest directory: walk it the way DevCell's loader does
# (sorted, recursive, .yaml/.yml/.json) and parse every file with libyaml's CSafeLoader.
PARSE_ONLY = """\
import os, sys, yaml
n = 0
for root, dirs, files in os.walk(sys.argv[1]):
    dirs.sort()
    for name in sorted(files):
        if name.endswith(('.yaml', '.yml', '.json')):
            with open(os.path.join(root, name), 'rb') as fh:
                n += len(list(yaml.load_all(fh.read(), Loader=yaml.CSafeLoader)))
assert n, 'no documents parsed'
"""


# -- running and timing ------------------------------------------------------------------------

@dataclass
class Result:
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float


def run(argv: Sequence[str], env: dict[str, str], *, capture: bool = False,
        timeout: float = 900.0) -> Result:
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    t0 = time.perf_counter()
    # cwd: the temp dir, so `python -m devcell` / `-c` never import a devcell/ from the
    # directory the script was started in instead of the installed one
    cwd = _SETTINGS["pycache_dir"].parent if _SETTINGS["pycache_dir"] else tempfile.gettempdir()
    proc = subprocess.run(list(argv), env=env, stdout=out, stderr=subprocess.PIPE, cwd=cwd,
                          stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    seconds = time.perf_counter() - t0
    return Result(proc.returncode, proc.stdout or b"", proc.stderr or b"", seconds)


def run_ok(argv: Sequence[str], env: dict[str, str], *, capture: bool = False,
           timeout: float = 900.0) -> Result:
    r = run(argv, env, capture=capture, timeout=timeout)
    if r.returncode != 0:
        sys.stderr.write(r.stderr.decode(errors="replace")[-4000:])
        sys.exit(f"command failed with exit code {r.returncode}: {' '.join(argv)[:300]}")
    return r


@dataclass
class Subject:
    """A command to time. `prepare` (untimed) runs before each timed run, e.g. a fresh state
    dir; it returns the env to use and a cleanup callable (untimed)."""

    label: str
    argv: Sequence[str]
    prepare: Callable[[], tuple[dict[str, str], Callable[[], None]]]


def _nothing() -> None:
    pass


def fixed(env: dict[str, str]) -> Callable[[], tuple[dict[str, str], Callable[[], None]]]:
    """A `prepare` for a command that always runs with the same env and needs no cleanup."""
    return lambda: (env, _nothing)


def time_interleaved(subjects: list[Subject], runs: int, warmup: int, *,
                     alternate: bool = False, settle: bool = False) -> dict[str, list[float]]:
    """Run the subjects round-robin (A B A B ...) so drift affects each the same. With
    `alternate`, every other round runs in reverse order (A B C, C B A, ...): two builds of
    DevCell timed side by side then each follow the other as often, so neither always runs
    right after the same process (warm page cache, a CPU just freed). With `settle`, each
    timed run starts after a sync (untimed): a subject that flushes its filesystem (syncfs)
    would otherwise also write back what the previous subject left dirty (another build's
    1 GiB copy), and be timed for it."""
    samples: dict[str, list[float]] = {s.label: [] for s in subjects}
    for round_no in range(warmup + runs):
        for s in subjects if not (alternate and round_no % 2) else subjects[::-1]:
            env, cleanup = s.prepare()
            if settle:
                os.sync()
            try:
                r = run_ok(s.argv, env)
            finally:
                cleanup()
            if round_no >= warmup:
                samples[s.label].append(r.seconds)
    return samples


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]  # nearest-rank


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


def print_timings(title: str, samples: dict[str, list[float]], *, baseline: str | None,
                  target: str | None = None) -> None:
    """A table: label, n, median, min, p90 (ms) and the median ratio to `baseline`."""
    print(f"\n{title}")
    width = max(len(k) for k in samples) + 2
    print(f"{'command':<{width}}{'n':>3} {'median ms':>10} {'min ms':>9} {'p90 ms':>9} "
          f"{'ratio':>7}")
    base = statistics.median(samples[baseline]) if baseline else None
    for label, values in samples.items():
        med = statistics.median(values)
        ratio = f"{med / base:7.2f}" if base else "      -"
        print(f"{label:<{width}}{len(values):>3} {fmt_ms(med):>10} {fmt_ms(min(values)):>9} "
              f"{fmt_ms(p90(values)):>9} {ratio}")
    if target:
        print(target)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


# -- state inspection --------------------------------------------------------------------------

def connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def db_fingerprint(path: Path) -> str:
    """sha256 over the schema and every row of every table, in a stable order."""
    h = hashlib.sha256()
    conn = connect_ro(path)
    try:
        tables = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
        for name, sql in tables:
            h.update(f"{name}\0{sql}\0".encode())
            order = ", ".join(str(i + 1) for i in range(_ncols(conn, name)))
            for row in conn.execute(f'SELECT * FROM "{name}" ORDER BY {order}'):
                h.update(repr(row).encode())
    finally:
        conn.close()
    return h.hexdigest()[:16]


def _ncols(conn: sqlite3.Connection, table: str) -> int:
    return len(conn.execute(f'PRAGMA table_info("{table}")').fetchall())


def file_stat(path: Path) -> tuple[int, int] | None:
    """(size, mtime_ns), or None when the file does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def db_files(db: Path) -> dict[str, object]:
    """What a commit would change on disk: the main file's (size, mtime_ns), and whether the
    WAL holds any frames. An absent and an empty WAL are the same state (SQLite creates and
    deletes it as connections, including these scripts' own reads, open and close)."""
    wal = file_stat(Path(str(db) + "-wal"))
    return {db.name: file_stat(db), f"{db.name}-wal": "empty" if not wal or not wal[0] else wal}


def count(db: Path, sql: str, params: tuple[object, ...] = ()) -> int:
    conn = connect_ro(db)
    try:
        return int(conn.execute(sql, params).fetchone()[0])
    finally:
        conn.close()


# -- profiling ---------------------------------------------------------------------------------

def profile(kind: str, python: str, devcell_args: Sequence[str],
            env: Callable[[], dict[str, str]], workdir: Path, *, top: int = 25) -> None:
    """Run `python -m devcell ARGS` once under the profiler and once with -X importtime.
    `env()` is called for each of the two runs (return a fresh state dir if the run needs one).
    Profiles go through `python -m devcell`, the timings through the console script: the
    same code (devcell/__main__.py calls the same main())."""
    import pstats

    print(f"\n=== profile ({kind}): devcell {' '.join(devcell_args)[:120]}")
    if kind == "pyinstrument":
        r = run([python, "-m", "pyinstrument", "--no-color", "-m", "devcell", *devcell_args],
                env(), capture=True)
        if r.returncode != 0 and b"No module named pyinstrument" in r.stderr:
            print("pyinstrument is not installed in that interpreter; use --profile cprofile")
        else:
            print(r.stdout.decode(errors="replace")[-12000:])
    else:
        out = workdir / "profile.pstats"
        run_ok([python, "-m", "cProfile", "-o", str(out), "-m", "devcell", *devcell_args], env())
        stats = pstats.Stats(str(out))
        stats.strip_dirs().sort_stats("cumulative").print_stats(top)
        print(f"--- the same profile, top {top // 2} by own time (tottime):")
        stats.sort_stats("tottime").print_stats(top // 2)
    importtime(python, devcell_args, env)


def importtime_entries(stderr: str) -> list[tuple[int, int, str]]:
    """(self_us, cumulative_us, module) from `python -X importtime` output."""
    entries = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line[len("import time:"):].split("|", 2)
        name = name[1:]  # one separating space; more means a nested import
        entries.append((int(self_us), int(cum_us), name))
    return entries


def importtime(python: str, devcell_args: Sequence[str], env: Callable[[], dict[str, str]],
               top: int = 20, repeat: int = 3) -> None:
    """Import times of one command, per module the minimum over `repeat` runs (the machine may
    be busy; the minimum is the least disturbed figure)."""
    best: dict[str, tuple[int, int]] = {}
    order: list[str] = []
    for _ in range(repeat):
        r = run([python, "-X", "importtime", "-m", "devcell", *devcell_args], env(), capture=True)
        for self_us, cum_us, name in importtime_entries(r.stderr.decode(errors="replace")):
            if name not in best:
                order.append(name)
                best[name] = (self_us, cum_us)
            else:
                old = best[name]
                best[name] = (min(old[0], self_us), min(old[1], cum_us))
    entries = [(best[n][0], best[n][1], n) for n in order]
    # top-level entries (no indentation) add up to the whole import time
    total = sum(cum for _, cum, name in entries if not name.startswith(" "))
    print(f"\n=== -X importtime (min of {repeat} runs): {len(entries)} modules, "
          f"{total / 1000:.1f} ms in imports (top-level sum); top {top} by cumulative:")
    print(f"{'cumul ms':>9} {'self ms':>8}  module")
    for self_us, cum_us, name in sorted(entries, key=lambda e: -e[1])[:top]:
        print(f"{cum_us / 1000:9.1f} {self_us / 1000:8.1f}  {name.strip()}")
    heavy = sorted(entries, key=lambda e: -e[0])[:10]
    print("heaviest by self time (ms): " + ", ".join(
        f"{name.strip()} {s / 1000:.1f}" for s, _, name in heavy))


def daemon_log_errors(text: str) -> bool:
    """Whether a daemon's log shows a failure: a traceback or "database is locked"."""
    return "Traceback" in text or "database is locked" in text


def process_memory_mb(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) of process `pid`, in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out
