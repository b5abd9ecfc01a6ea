"""The CLI entry point: argument parsing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_building_one_command_parses_exactly_like_the_full_parser() -> None:
    """main() builds only the command it runs; the full parser must know no other command."""
    import argparse

    from devcell.cli import main as cli_main

    full = cli_main.build_parser()
    subactions = [a for a in full._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(subactions[0].choices) == set(cli_main.COMMANDS)
    for command in cli_main.COMMANDS:
        one = cli_main.build_parser(command)
        one_sub = [a for a in one._actions if isinstance(a, argparse._SubParsersAction)][0]
        assert list(one_sub.choices) == [command]
        assert (one_sub.choices[command].format_help()
                == subactions[0].choices[command].format_help())


def test_get_imports_neither_the_library_verbs_nor_the_reconciler(tmp_path: Path) -> None:
    """`devcell get` starts fast because it loads only what it uses (bench/get_cells.py)."""
    code = ("import sys; from devcell.cli import main; main.main(['get', 'cells']); "
            "print(sorted(m for m in sys.modules if m.startswith(('devcell.api', "
            "'devcell.reconciler', 'loguru'))), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, DEVCELL_HOME=str(tmp_path / "state")),
                          cwd=REPO, check=True)
    assert proc.stderr.strip().splitlines()[-1] == "[]"


def test_durations_every_wait_can_honour_and_no_other() -> None:
    """A duration beyond a lock's TIMEOUT_MAX once killed the daemon's resync thread with
    an OverflowError (the daemon ran on with no resync); it is a usage error now."""
    import argparse
    import threading

    import pytest

    from devcell.cli import main as cli_main

    assert cli_main._duration("1h30m") == 5400.0
    assert cli_main._duration("0") == 0.0
    assert cli_main._duration(f"{int(threading.TIMEOUT_MAX)}") == int(threading.TIMEOUT_MAX)
    for text in ("99999999999999999999h", f"{int(threading.TIMEOUT_MAX) + 1}s", "1" * 400):
        with pytest.raises(argparse.ArgumentTypeError, match="too long"):
            cli_main._duration(text)
