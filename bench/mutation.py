"""Mutation testing: small deliberate breaks in DevCell's core packages, each run against the fast
unit tests that cover the broken line; a break no test notices (a survivor) is a guarantee
nothing checks.

    .venv/bin/python bench/mutation.py                          # store/, reconciler/, runs/
    .venv/bin/python bench/mutation.py devcell/reconciler/queue.py devcell/runs
    .venv/bin/python bench/mutation.py devcell/store --sample 150 --seed 3 --jobs 2
    .venv/bin/python bench/mutation.py devcell/runs --list      # the mutants, nothing run

How it works (a small AST mutator of its own: mutmut copies the tree and rewrites every
function into a trampoline, which DevCell's lazy imports and subprocess tests do not survive):

1. The git-tracked tree is copied once per job into a temporary directory, so the worktree is
   never touched (a run killed half-way leaves no mutant behind).
2. A baseline run of the unit tests under coverage, one coverage context per test, maps every
   line of the mutated packages to the tests that execute it, and times each test.
3. Each mutant (an operator swapped, a condition negated, a constant changed, a call statement
   removed, min/max or break/continue exchanged) is written into a copy, and only the tests
   covering its line run, with `-x` and a timeout of a few times their baseline duration.
   A line run only when the module is imported (a default, a constant) gets every test that
   covers the module (or its package, for a module of constants). Killed: a test failed (or
   timed out). Survived: they all passed. Uncovered: no unit test runs the line at all.

The score is killed / (killed + survived + uncovered). Needs `coverage` (in the test extras);
the unit tests use the fake backend only: tests/e2e and tests/backends/container are not run.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import copy
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ["devcell/store", "devcell/reconciler", "devcell/runs"]
DEFAULT_TESTS = ["tests/store", "tests/reconciler", "tests/runs", "tests/api", "tests/controllers"]
SLOW_TESTS = ["tests/runs/test_crash.py", "tests/store/test_concurrency.py",
              "tests/store/test_concurrent_apply.py"]
"""Left out of every run: minutes each, and they guard crashes and races, not logic."""
QUIET_CALLS = {"debug", "info", "warning", "error", "exception", "bind", "contextualize"}
"""Calls on a logger: removing or changing them is not a break a unit test should catch."""

PLUGIN = '''
import json, os, time
import coverage

_durations = {}

def _switch(item):
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(item.nodeid)

def pytest_runtest_setup(item):
    _switch(item)
    item._mutation_started = time.perf_counter()

def pytest_runtest_teardown(item):
    _switch(item)

def pytest_runtest_makereport(item, call):
    if call.when == "teardown":
        started = getattr(item, "_mutation_started", None)  # None: skipped before setup
        _durations[item.nodeid] = 0.0 if started is None else time.perf_counter() - started

def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["MUTATION_DURATIONS"], "w") as out:
        json.dump(_durations, out)
'''


# -- mutants ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the repository
    line: int
    end_line: int
    col: int  # byte offsets in the line, as ast gives them
    end_col: int
    original: str
    replacement: str
    what: str

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}:{self.col}:{self.what}"


SWAPS: dict[type[ast.AST], type[ast.AST]] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
    ast.LtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.And: ast.Or, ast.Or: ast.And, ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div,
}
"""(Div is not swapped: in DevCell it is mostly pathlib's `/`, where Mult is only a TypeError.)"""


class _Finder(ast.NodeVisitor):
    """Every mutation point of one module, skipping docstrings, annotations, f-strings and
    log calls."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.lines = source.encode().splitlines(keepends=True)
        self.found: list[Mutant] = []

    def segment(self, node: ast.AST) -> str:
        return _segment(self.lines, node)

    def add(self, node: ast.AST, replacement: str, what: str) -> None:
        self.found.append(Mutant(self.path, node.lineno, node.end_lineno or node.lineno,  # type: ignore[attr-defined]
                                 node.col_offset, node.end_col_offset or 0,  # type: ignore[attr-defined]
                                 self.segment(node), replacement, what))

    # what is never mutated
    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(default)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        for statement in body:
            self.visit(statement)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        for statement in body:
            self.visit(statement)

    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_log_call(node):
            return
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            other = "max" if node.func.id == "min" else "min"
            swapped = copy.deepcopy(node)
            swapped.func = ast.Name(other, ast.Load())
            self.add(node, f"({ast.unparse(swapped)})", f"{node.func.id} -> {other}")
        self.generic_visit(node)

    # the mutations
    def visit_Compare(self, node: ast.Compare) -> None:
        for i, op in enumerate(node.ops):
            if type(op) in SWAPS:
                mutated = copy.deepcopy(node)
                mutated.ops[i] = SWAPS[type(op)]()
                self.add(node, f"({ast.unparse(mutated)})",
                         f"{type(op).__name__} -> {SWAPS[type(op)].__name__}")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        mutated = copy.deepcopy(node)
        mutated.op = SWAPS[type(node.op)]()
        self.add(node, f"({ast.unparse(mutated)})",
                 f"{type(node.op).__name__} -> {type(mutated.op).__name__}")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) in SWAPS and not _is_text(node):
            mutated = copy.deepcopy(node)
            mutated.op = SWAPS[type(node.op)]()
            self.add(node, f"({ast.unparse(mutated)})",
                     f"{type(node.op).__name__} -> {type(mutated.op).__name__}")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if type(node.op) in (ast.Add, ast.Sub):
            mutated = copy.deepcopy(node)
            mutated.op = SWAPS[type(node.op)]()
            self.add(node, ast.unparse(mutated), f"{type(node.op).__name__}= swapped")
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            self.add(node, f"({ast.unparse(node.operand)})", "not removed")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bool):
            self.add(node, str(not value), f"{value} -> {not value}")
        elif isinstance(value, int):
            self.add(node, str(value + 1), f"{value} -> {value + 1}")
        elif isinstance(value, float):
            self.add(node, repr(value * 2 if value else 1.0), f"{value} -> {value * 2 or 1.0}")

    def visit_While(self, node: ast.While) -> None:
        self._negate(node.test, "while condition negated")
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._negate(node.test, "condition negated")
        self.generic_visit(node)

    def _negate(self, test: ast.expr, what: str) -> None:
        if not isinstance(test, ast.Constant):
            self.add(test, f"(not ({self.segment(test)}))", what)

    def visit_Break(self, node: ast.Break) -> None:
        self.add(node, "continue", "break -> continue")

    def visit_Continue(self, node: ast.Continue) -> None:
        self.add(node, "break", "continue -> break")

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call) and not _is_log_call(node.value):
            self.add(node, "pass", "call removed")
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        return  # annotations

    def visit_arguments(self, node: ast.arguments) -> None:
        return  # annotations (defaults are visited by visit_FunctionDef)


def _is_log_call(node: ast.Call) -> bool:
    func = node.func
    while isinstance(func, ast.Call):
        func = func.func
    if isinstance(func, ast.Attribute):
        base = func.value
        while isinstance(base, ast.Call | ast.Attribute):
            base = base.func if isinstance(base, ast.Call) else base.value
        if isinstance(base, ast.Name) and base.id in ("logger", "log") \
                and func.attr in QUIET_CALLS:
            return True
    return False


def _is_text(node: ast.BinOp) -> bool:
    """An operation on literal strings (concatenated messages): swapping it is noise."""
    return any(isinstance(side, ast.Constant | ast.JoinedStr) and
               isinstance(getattr(side, "value", ""), str)
               for side in (node.left, node.right))


def _segment(lines: list[bytes], node: ast.AST) -> str:
    start, end = node.lineno - 1, (node.end_lineno or node.lineno) - 1  # type: ignore[attr-defined]
    col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    if start == end:
        return lines[start][col:end_col].decode()
    parts = [lines[start][col:]] + lines[start + 1:end] + [lines[end][:end_col]]
    return b"".join(parts).decode()


def mutants_of(path: str) -> list[Mutant]:
    source = (REPO / path).read_text()
    finder = _Finder(path, source)
    finder.visit(ast.parse(source))
    return finder.found


def apply(source: str, mutant: Mutant) -> str:
    lines = source.encode().splitlines(keepends=True)
    start, end = mutant.line - 1, mutant.end_line - 1
    head = lines[start][:mutant.col]
    tail = lines[end][mutant.end_col:]
    mutated = head + mutant.replacement.encode() + tail
    return b"".join(lines[:start] + [mutated] + lines[end + 1:]).decode()


def python_files(paths: list[str]) -> list[str]:
    files: list[str] = []
    for given in paths:
        target = REPO / given
        found = sorted(target.rglob("*.py")) if target.is_dir() else [target]
        files += [str(f.relative_to(REPO)) for f in found if f.name != "__init__.py"
                  or f.stat().st_size > 2000]
    return files


# -- running ---------------------------------------------------------------------------------


def copy_tree(into: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def environment(tree: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1",
               DOCKER_HOST="unix:///nonexistent/docker.sock")  # the engine hidden: fake only
    env.pop("DEVCELL_HOME", None)
    env.update(extra or {})
    return env


def baseline(tree: Path, tests: list[str], files: list[str]
             ) -> tuple[dict[str, dict[int, set[str]]], dict[str, float]]:
    """line -> covering test node ids, per file; and each test's duration."""
    (tree / "mutation_plugin.py").write_text(textwrap.dedent(PLUGIN))
    rc = tree / ".mutation-coveragerc"
    rc.write_text("[run]\nsource = devcell\ndata_file = .mutation-coverage\n")
    durations = tree / ".mutation-durations.json"
    deselect = [arg for t in SLOW_TESTS for arg in ("--ignore", t)]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest", "-q",
         "-p", "no:cacheprovider", "-p", "mutation_plugin", *deselect, *tests],
        cwd=tree, env=environment(tree, {"MUTATION_DURATIONS": str(durations)}),
        capture_output=True, text=True)
    print(f"baseline: {time.monotonic() - started:.0f} s, {done.stdout.strip().splitlines()[-1]}")
    if done.returncode != 0:
        sys.exit(f"the unit tests fail without any mutant:\n{done.stdout[-3000:]}")
    import coverage

    data = coverage.CoverageData(basename=str(tree / ".mutation-coverage"))
    data.read()
    covered: dict[str, dict[int, set[str]]] = {}
    for name in files:
        by_line = data.contexts_by_lineno(str(tree / name))
        covered[name] = {line: {c for c in contexts if c} for line, contexts in by_line.items()}
    return covered, json.loads(durations.read_text())


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed | survived | timeout | uncovered
    tests: int = 0
    seconds: float = 0.0
    failed: str = ""


def run_one(tree: Path, mutant: Mutant, tests: list[str], timeout: float) -> Outcome:
    target = tree / mutant.path
    original = target.read_text()
    target.write_text(apply(original, mutant))
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                               *tests], cwd=tree, env=environment(tree), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(mutant, "timeout", len(tests), time.monotonic() - started)
    finally:
        target.write_text(original)
    elapsed = time.monotonic() - started
    if done.returncode == 0:
        return Outcome(mutant, "survived", len(tests), elapsed)
    failed = next((line for line in done.stdout.splitlines() if line.startswith("FAILED")), "")
    return Outcome(mutant, "killed", len(tests), elapsed, failed[:200])


@dataclass
class Summary:
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, status: str, path: str | None = None) -> int:
        return sum(1 for o in self.outcomes
                   if o.status == status and (path is None or o.mutant.path == path))

    def score(self, path: str | None = None) -> float:
        killed = self.count("killed", path) + self.count("timeout", path)
        total = killed + self.count("survived", path) + self.count("uncovered", path)
        return killed / total if total else 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=DEFAULT_PATHS,
                        help="files or packages to mutate (default: store, reconciler, runs)")
    parser.add_argument("--tests", nargs="+", default=DEFAULT_TESTS,
                        help="the unit tests to run (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--sample", type=int, default=0, help="run only N mutants, at random")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-factor", type=float, default=4.0)
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--json", type=Path, help="write every outcome to this file")
    args = parser.parse_args(argv)

    files = python_files(args.paths)
    mutants = [m for f in files for m in mutants_of(f)]
    if args.list:
        for m in mutants:
            print(f"{m.path}:{m.line}: {m.what}: {m.original!r} -> {m.replacement!r}")
        print(f"{len(mutants)} mutants in {len(files)} files")
        return 0
    if args.sample and args.sample < len(mutants):
        mutants = sorted(random.Random(args.seed).sample(mutants, args.sample),
                         key=lambda m: (m.path, m.line, m.col))
    print(f"{len(mutants)} mutants in {len(files)} files; tests: {' '.join(args.tests)}")
    with tempfile.TemporaryDirectory(prefix="devcell-mutation-") as tmp:
        trees = [Path(tmp) / f"tree{n}" for n in range(max(1, args.jobs))]
        for tree in trees:
            copy_tree(tree)
        covered, durations = baseline(trees[0], args.tests, files)
        free: queue.Queue[Path] = queue.Queue()
        for tree in trees:
            free.put(tree)
        summary = Summary()
        started = time.monotonic()

        def work(mutant: Mutant) -> Outcome:
            lines = covered.get(mutant.path, {})
            span = range(mutant.line, mutant.end_line + 1)
            tests = sorted(set().union(*(lines.get(n, set()) for n in span)))
            if not tests and any(n in lines for n in span):
                # run only at import (a default, a constant): every test of the module, or
                # of its package when no test calls into the module (a table of constants)
                tests = sorted(set().union(*lines.values())) or sorted(set().union(
                    *(t for name, other in covered.items()
                      if os.path.dirname(name) == os.path.dirname(mutant.path)
                      for t in other.values())))
            if not tests:
                return Outcome(mutant, "uncovered")
            timeout = args.timeout_factor * sum(durations.get(t, 1.0) for t in tests) + 15
            tree = free.get()
            try:
                return run_one(tree, mutant, tests, timeout)
            finally:
                free.put(tree)

        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for n, outcome in enumerate(pool.map(work, mutants), 1):
                summary.outcomes.append(outcome)
                if outcome.status in ("survived", "uncovered"):
                    m = outcome.mutant
                    print(f"  {outcome.status.upper():9} {m.path}:{m.line}: {m.what}: "
                          f"{_short(m.original)} -> {_short(m.replacement)}", flush=True)
                if n % 25 == 0:
                    print(f"  ... {n}/{len(mutants)} in {time.monotonic() - started:.0f} s",
                          flush=True)
    _report(summary, files, time.monotonic() - started)
    if args.json:
        args.json.write_text(json.dumps([dict(asdict(o), mutant=asdict(o.mutant))
                                         for o in summary.outcomes], indent=1))
    return 0


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 70 else text[:69] + "…"


def _report(summary: Summary, files: list[str], elapsed: float) -> None:
    print(f"\n{'file':45} {'mutants':>7} {'killed':>6} {'timeout':>7} {'survived':>8} "
          f"{'uncovered':>9} {'score':>6}")
    for path in files:
        total = sum(1 for o in summary.outcomes if o.mutant.path == path)
        if total:
            print(f"{path:45} {total:7} {summary.count('killed', path):6} "
                  f"{summary.count('timeout', path):7} {summary.count('survived', path):8} "
                  f"{summary.count('uncovered', path):9} {summary.score(path):6.1%}")
    print(f"{'total':45} {len(summary.outcomes):7} {summary.count('killed'):6} "
          f"{summary.count('timeout'):7} {summary.count('survived'):8} "
          f"{summary.count('uncovered'):9} {summary.score():6.1%}   ({elapsed:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
