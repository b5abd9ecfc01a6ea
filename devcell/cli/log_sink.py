"""Log sinks: only the CLI configures loguru; libraries just log with bound context.

The library is silent until an application enables it (devcell.log); `configure` is where
the CLI and the daemon do, as they ask for their sinks."""

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


def _format(record: dict[str, Any]) -> str:
    """The line a record prints as, every user-controlled part escaped (names.printable):
    one place for every text log line, so a hostile file name, kind or message cannot forge
    a line or drive the terminal. The traceback is formatted here too, without local variables
    (the sink's diagnose=False says the same), and escaped line by line."""
    import traceback

    from devcell.names import printable, printable_lines

    extra = record["extra"]
    shown = " ".join(printable(str(part)) for part in (
        f"{extra['kind']}/{extra['name']}", extra["op"], record["message"]))
    exc = record["exception"]
    if exc is not None and exc.type is not None:
        text = "".join(traceback.format_exception(exc.type, exc.value, exc.traceback))
        shown += "\n" + printable_lines(text.rstrip("\n"))
    extra["_line"] = shown
    return "<dim>{time:HH:mm:ss.SSS}</dim> {level: <7} {extra[_line]}\n"


def configure(verbose: int) -> None:
    """Sinks at the -v level (warnings and up by default), added when the first record that
    level shows is logged: a command that logs nothing never imports loguru (devcell.log)."""
    from devcell import log

    level = "WARNING" if verbose == 0 else "INFO" if verbose == 1 else "DEBUG"
    log.configure(lambda real: _add_sink(real, level), level=level)


def _add_sink(real: Any, level: str) -> None:
    from devcell import progress

    # Through devcell.progress: while a progress bar is drawn, lines go above it, not into it.
    real.add(progress.write, level=level, colorize=sys.stderr.isatty(), format=_format,
             filter=_with_context,
             diagnose=False)  # never dump local variables (secrets) with a traceback
