"""`devcell import devcontainer`: print or write the Cell manifest a devcontainer.json makes,
and name on stderr every field it could not carry over."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devcell.names import printable


def run_import(args: argparse.Namespace) -> int:
    from devcell.api import devcontainer, manifest_output
    from devcell.store.db import resolve_state_dir

    state_dir = resolve_state_dir(args.state_dir)
    output = None if args.output is None else manifest_output.target(args.output, Path.cwd())
    source = devcontainer.find(args.path, Path.cwd())
    target = output or Path.cwd() / "<stdout>"
    conversion = devcontainer.convert(source, name=args.name, out_dir=target.parent,
                                      state_dir=state_dir)
    text = devcontainer.render(conversion, source)
    devcontainer.check(text, target, state_dir)
    for said in conversion.said:
        sys.stderr.write(printable(f"{source}: {said}") + "\n")
    for note in conversion.notes:
        sys.stderr.write(printable(f"warning: {source}: {note}") + "\n")
    if output is None:
        sys.stdout.write(text)
        return 0
    manifest_output.write(output, text)
    name = conversion.manifest["metadata"]["name"]
    sys.stdout.write(printable(f"cell/{name} written to {target}") + "\n")
    return 0
