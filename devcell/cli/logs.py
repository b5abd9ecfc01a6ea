"""Log sinks: only the CLI configures loguru; libraries just log with bound context."""

from __future__ import annotations

import sys


def configure(verbose: int) -> None:
    from loguru import logger

    logger.remove()
    level = "WARNING" if verbose == 0 else "INFO" if verbose == 1 else "DEBUG"
    logger.add(sys.stderr, level=level,
               format="<dim>{time:HH:mm:ss.SSS}</dim> {level: <7} "
                      "{extra[kind]}/{extra[name]} {extra[op]} {message}",
               filter=lambda r: bool(r["extra"].setdefault("kind", "-") and
                                     r["extra"].setdefault("name", "-") and
                                     r["extra"].setdefault("op", "-")))
