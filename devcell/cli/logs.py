"""Log sinks: only the CLI configures loguru; libraries just log with bound context.

The library is silent until an application enables it (devcell.log); `configure` is where
the CLI and the daemon do, as they add their sinks."""

from __future__ import annotations

import sys
from typing import Any


def _with_context(record: dict[str, Any]) -> bool:
    """Fill the columns every line shows; backends bind `cell` (and `op`) rather than kind/name."""
    extra = record["extra"]
    if "name" not in extra and "cell" in extra:
        extra["kind"], extra["name"] = "Cell", extra["cell"]
    extra.setdefault("kind", "-")
    extra.setdefault("name", "-")
    extra.setdefault("op", "-")
    return True


def configure(verbose: int) -> None:
    from devcell import log
    from devcell.log import logger

    logger.remove()
    log.enable()
    level = "WARNING" if verbose == 0 else "INFO" if verbose == 1 else "DEBUG"
    from devcell import progress

    # Through devcell.progress: while a progress bar is drawn, lines go above it, not into it.
    logger.add(progress.write, level=level, colorize=sys.stderr.isatty(),
               format="<dim>{time:HH:mm:ss.SSS}</dim> {level: <7} "
                      "{extra[kind]}/{extra[name]} {extra[op]} {message}",
               filter=_with_context,  # type: ignore[arg-type]
               diagnose=False)  # never dump local variables (secrets) with a traceback
