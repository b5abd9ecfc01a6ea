"""`devcell version [-o json|yaml]`: what this DevCell is and what this machine lets it run.

As `kubectl version` shows the client and the server, this shows the client, the versions of
what it reads and writes (the manifests' apiVersion, the state database's schema, the snapshot
archive format), and each backend with the reason it can or cannot be used here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from devcell import __version__, schemas
from devcell.backends import availability
from devcell.names import printable


def report(state_dir: Path) -> dict[str, Any]:
    from devcell.backends.archives import format as archive_format
    from devcell.store import migrations

    return {
        "clientVersion": {"devcell": __version__,
                          "python": sys.version.split()[0]},
        "schemaVersion": {
            "apiVersion": schemas.schema("cell")["properties"]["apiVersion"]["const"],
            "stateDatabase": migrations.LATEST,
            "snapshotArchive": archive_format.VERSION,
        },
        "backends": [{"name": a.name, "available": a.available, "reason": a.reason,
                      **({"version": a.version} if a.version else {})}
                     for a in availability.check_all(state_dir)],
    }


def run_version(args: argparse.Namespace) -> int:
    from devcell.store import db

    found = report(db.resolve_state_dir(args.state_dir))
    if args.output in ("json", "yaml"):
        from devcell.api import render

        (render.as_json if args.output == "json" else render.as_yaml)(found)
        return 0
    schema = found["schemaVersion"]
    lines = [f"Client Version: devcell {found['clientVersion']['devcell']} "
             f"(Python {found['clientVersion']['python']})",
             f"Schema Version: {schema['apiVersion']} (state database {schema['stateDatabase']}, "
             f"snapshot archive {schema['snapshotArchive']})",
             "Backends:"]
    for b in found["backends"]:
        mark = "available" if b["available"] else "unavailable"
        lines.append(f"  {b['name']}: {mark}: {printable(b['reason'])}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
