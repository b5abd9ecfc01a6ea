"""`devcell import devcontainer`: print or write the Cell manifest a devcontainer.json makes,
and name on stderr every field it could not carry over."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devcell.errors import ManifestError
from devcell.names import printable


def run_import(args: argparse.Namespace) -> int:
    from devcell.api import devcontainer, manifest_output
    from devcell.store.db import resolve_state_dir

    state_dir = resolve_state_dir(args.state_dir)
    output = None if args.output is None else manifest_output.target(args.output, Path.cwd())
    source = devcontainer.find(args.path, Path.cwd())
    target = output or Path.cwd() / "<stdout>"
    try:
        conversion = devcontainer.convert(source, name=args.name, out_dir=target.parent,
                                          state_dir=state_dir, target=target)
    except devcontainer.Refused as exc:  # every warning too, so one round fixes everything
        _warn(source, exc.notes)
        raise
    text = devcontainer.render(conversion, source)
    for said in conversion.said:
        sys.stderr.write(printable(f"{source}: {said}") + "\n")
    _warn(source, conversion.notes)
    if conversion.problems:  # validated once, in convert
        raise ManifestError(conversion.problems)
    if output is None:
        sys.stdout.write(text)
        return 0
    manifest_output.write(output, text)
    name = conversion.manifest["metadata"]["name"]
    sys.stdout.write(printable(f"cell/{name} written to {target}") + "\n")
    return 0


def _warn(source: Path, notes: list[str]) -> None:
    for note in notes:
        sys.stderr.write(printable(f"warning: {source}: {note}") + "\n")
