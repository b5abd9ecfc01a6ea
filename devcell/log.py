"""DevCell's logger: loguru's, silent until the application enables it.

A library stays quiet unless the program using it asks (loguru's own advice for libraries):
importing this module disables the `devcell` loggers, and the entry points that own the
terminal or the log file (the `devcell` CLI and `celld`, through devcell.cli.logs) enable them
when they add their sinks. Every DevCell module logs through `from devcell.log import logger`
rather than loguru directly, so whichever module a program imports first, the library is
already silent: `devcell.runs` used on its own writes nothing to stderr.
"""

from __future__ import annotations

from loguru import logger

PACKAGE = "devcell"

logger.disable(PACKAGE)


def enable() -> None:
    """Let DevCell's log records reach the sinks (the application configured them)."""
    logger.enable(PACKAGE)


def disable() -> None:
    """Silence DevCell's log records again (the library's default)."""
    logger.disable(PACKAGE)


__all__ = ["disable", "enable", "logger"]
