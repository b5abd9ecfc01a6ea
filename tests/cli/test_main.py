"""The CLI entry point: argument parsing."""

from __future__ import annotations


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
