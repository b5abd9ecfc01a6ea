"""What an applied manifest that came from `devcell get -o yaml` needs from recorded state:
its resourceVersion, when given, must be the recorded one; a secret get hid (`<redacted>`)
means the recorded value.

kubectl accepts its own output on apply, a stale resourceVersion being a conflict. DevCell's
get also hides secrets: applied as shown, `<redacted>` would have replaced every secret.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from devcell.errors import Conflict, Problem
from devcell.manifests import secrets
from devcell.manifests.model import Manifest, field_path
from devcell.store import objects


def check_versions(conn: sqlite3.Connection, manifests: list[Manifest]) -> None:
    """Raise Conflict for the first manifest whose resourceVersion is not the recorded one
    (or that names one for an object not recorded), as kubectl does: nothing is recorded."""
    for m in manifests:
        if m.resource_version is None:
            continue
        existing = objects.get(conn, m.kind, m.name)
        what = f'{m.kind.lower()} "{m.name}"'
        if existing is None:
            raise Conflict(f"{what}: metadata.resourceVersion {m.resource_version} is given, "
                           "but no such object is recorded (it was deleted); remove "
                           "metadata.resourceVersion to create it")
        if existing.resource_version != m.resource_version:
            raise Conflict(f"{what}: the object has been modified (resourceVersion "
                           f"{m.resource_version} given, {existing.resource_version} "
                           f"recorded); get it again (devcell get {m.kind.lower()} {m.name} "
                           "-o yaml), make your change to it and apply that")


def unredacted(conn: sqlite3.Connection, manifests: list[Manifest]
               ) -> tuple[list[Manifest], list[Problem]]:
    """`manifests` with each secret shown as `<redacted>` given its recorded value (matched by
    variable name); one with no recorded value is a problem."""
    out: list[Manifest] = []
    problems: list[Problem] = []
    for m in manifests:
        hidden = [i for i in secrets.entries(m.spec)
                  if secrets.REDACTED in _secret_values(m.spec["env"][i])]
        if not hidden:
            out.append(m)
            continue
        existing = objects.get(conn, m.kind, m.name)
        recorded = {e.get("name"): e for e in (existing.spec.get("env", []) if existing else [])
                    if isinstance(e, dict)}
        env = list(m.spec["env"])
        for i in hidden:
            was = recorded.get(env[i].get("name"), {})
            for key, value in env[i].items():
                if value != secrets.REDACTED or key in ("name", "secret"):
                    continue
                if key not in was or was.get("secret", False) is False:
                    path = ("spec", "env", i, key)
                    line, col = m.where(*path)
                    problems.append(Problem(
                        m.file, f"{secrets.REDACTED} is what get shows of a secret, and "
                        f"{m.kind.lower()} \"{m.name}\" has no recorded {env[i].get('name')} "
                        "to keep: write its value", line=line, column=col, kind=m.kind,
                        name=m.name, field=field_path(path)))
                    continue
                env[i] = {**env[i], key: was[key]}
        out.append(m.replace(spec={**m.spec, "env": env}))
    return out, problems


def _secret_values(entry: dict[str, Any]) -> list[Any]:
    return [v for k, v in entry.items() if k not in ("name", "secret")]
