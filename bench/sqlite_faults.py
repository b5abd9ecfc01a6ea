"""What translating a faulty machine's SQLite errors costs (devcell/store/faults.py).

Every connection to a state file is a faults.Connection, whose statements and fetches are
Python methods wrapping sqlite3's. This times, in one process and interleaved, the same work
on a plain sqlite3 connection and on a faults.Connection over one database file: a small
statement run 20,000 times (the per-statement cost), and 10,000 rows fetched with fetchall()
and by iteration (the per-row cost; `get cells` uses fetchall). Run by hand:

    .venv/bin/python bench/sqlite_faults.py
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devcell.store import faults  # noqa: E402

ROWS = 10_000
STATEMENTS = 20_000
ROUNDS = 15


def _fill(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE cells (id TEXT PRIMARY KEY, name TEXT, phase TEXT)")
    conn.executemany("INSERT INTO cells VALUES (?, ?, ?)",
                     ((f"cell_{i:05d}", f"c{i}", "Running") for i in range(ROWS)))
    conn.commit()
    conn.close()


def _statements(conn: sqlite3.Connection) -> None:
    for _ in range(STATEMENTS):
        conn.execute("SELECT phase FROM cells WHERE id = 'cell_00042'").fetchone()


def _fetchall(conn: sqlite3.Connection) -> None:
    assert len(conn.execute("SELECT * FROM cells ORDER BY name").fetchall()) == ROWS


def _iterate(conn: sqlite3.Connection) -> None:
    assert sum(1 for _ in conn.execute("SELECT * FROM cells ORDER BY name")) == ROWS


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        _fill(path)
        plain = sqlite3.connect(path, isolation_level=None)
        wrapped = faults.connect(path, timeout=60)
        for conn in (plain, wrapped):
            conn.row_factory = sqlite3.Row
        work: dict[str, Callable[[sqlite3.Connection], None]] = {
            f"{STATEMENTS} statements": _statements, f"fetchall of {ROWS} rows": _fetchall,
            f"iterate over {ROWS} rows": _iterate}
        print(f"{'work':<28}{'sqlite3 ms':>12}{'faults ms':>12}{'extra us/unit':>15}")
        for label, fn in work.items():
            times: dict[str, list[float]] = {"plain": [], "faults": []}
            for _ in range(ROUNDS):
                for name, conn in (("plain", plain), ("faults", wrapped)):
                    started = time.perf_counter()
                    fn(conn)
                    times[name].append(time.perf_counter() - started)
            a, b = statistics.median(times["plain"]), statistics.median(times["faults"])
            units = STATEMENTS if "statements" in label else ROWS
            print(f"{label:<28}{a * 1000:>12.2f}{b * 1000:>12.2f}"
                  f"{(b - a) / units * 1e6:>15.3f}")
        plain.close()
        wrapped.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
