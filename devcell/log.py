"""DevCell's logger: loguru's, silent until the application enables it, and imported only when
a record can reach a sink.

A library stays quiet unless the program using it asks (loguru's own advice for libraries):
DevCell's records are disabled until an entry point that owns the terminal or the log file
(the `devcell` CLI and `celld`, through devcell.cli.log_sink) enables them as it adds its sinks.
Every DevCell module logs through `from devcell.log import logger` rather than loguru directly,
so whichever module a program imports first, the library is already silent: `devcell.runs`
used on its own writes nothing to stderr.

`logger` is a stand-in for loguru's: importing loguru costs more than most commands' work
(asyncio, multiprocessing, and its default sink's exception formatter walks sysconfig's paths:
~0.1 s of a `devcell snapshot create` that took 0.4), so it is imported the first time a record
could be shown. Until then a record the library's state would drop (disabled, or below the
least level of the sinks `configure` asked for) costs one comparison. Once loguru is imported
(by DevCell or by anyone else in the process) every record goes to it and it decides, as before.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

PACKAGE = "devcell"
LEVELS = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "SUCCESS": 25, "WARNING": 30, "ERROR": 40,
          "CRITICAL": 50}
"""loguru's standard levels, by number (the only ones DevCell logs at)."""

Install = Callable[[Any], None]
"""Adds the application's sinks to the loguru logger it is given."""


class _State:
    """What the process asked of DevCell's logging, and loguru's logger once imported."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.enabled = False
        self.threshold = 0
        """The least level the sinks `configure` asked for take (0: no such sinks)."""
        self.pending: Install | None = None
        """Sinks `configure` asked for while loguru was not imported yet."""
        self.real: Any = None


_state = _State()


def _loaded() -> Any:
    """loguru's logger, imported now if need be, DevCell's state and pending sinks applied."""
    if _state.real is not None:
        return _state.real
    with _state.lock:
        if _state.real is not None:
            return _state.real
        imported_elsewhere = "loguru" in sys.modules
        pending, _state.pending = _state.pending, None
        if pending is not None and not imported_elsewhere:
            # The application's sinks replace the default one: do not build it just to drop it.
            before = os.environ.get("LOGURU_AUTOINIT")
            os.environ["LOGURU_AUTOINIT"] = "false"
            try:
                from loguru import logger as real
            finally:
                if before is None:
                    os.environ.pop("LOGURU_AUTOINIT", None)
                else:
                    os.environ["LOGURU_AUTOINIT"] = before
        else:
            from loguru import logger as real
        if not (imported_elsewhere and _decided_there(real)):
            (real.enable if _state.enabled else real.disable)(PACKAGE)
        if pending is not None:
            if imported_elsewhere:
                _remove_default(real)
            pending(real)
        _state.real = real
        return real


def _decided_there(real: Any) -> bool:
    """Whether whoever imported loguru has enabled or disabled DevCell's records through it
    since: that came after any call here (loguru was not imported then), so it stands."""
    activations = getattr(getattr(real, "_core", None), "activation_list", [])
    return any(name.startswith(PACKAGE + ".") for name, _ in activations)


def _remove_default(real: Any) -> None:
    """Drop loguru's default stderr sink (id 0), as `configure` would have had loguru been
    imported then; sinks others added since stay."""
    try:
        real.remove(0)
    except ValueError:
        pass


class Logger:
    """loguru's logging methods, with `bind`; anything else is loguru's own (imported)."""

    __slots__ = ("_extra",)

    def __init__(self, extra: dict[str, Any] | None = None) -> None:
        self._extra = extra or {}

    def bind(self, **extra: Any) -> Logger:
        return Logger({**self._extra, **extra})

    def _emit(self, level: str, exception: bool, message: str, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> None:
        if _state.real is None and "loguru" not in sys.modules and (
                not _state.enabled or LEVELS[level] < _state.threshold):
            return
        real = _loaded()
        if self._extra:
            real = real.bind(**self._extra)
        # depth 2: the record names the module that called warning(), not this one
        real.opt(exception=exception or None, depth=2).log(level, message, *args, **kwargs)

    def trace(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._emit("TRACE", False, message, args, kwargs)

    def debug(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._emit("DEBUG", False, message, args, kwargs)

    def info(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._emit("INFO", False, message, args, kwargs)

    def success(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._emit("SUCCESS", False, message, args, kwargs)

    def warning(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._emit("WARNING", False, message, args, kwargs)

    def error(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._emit("ERROR", False, message, args, kwargs)

    def critical(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._emit("CRITICAL", False, message, args, kwargs)

    def exception(self, message: str, *args: Any, **kwargs: Any) -> None:
        """An error record with the exception being handled."""
        self._emit("ERROR", True, message, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        real = _loaded()
        return getattr(real.bind(**self._extra) if self._extra else real, name)


logger = Logger()


def enable() -> None:
    """Let DevCell's log records reach the sinks (the application configured them)."""
    _activate(True)


def disable() -> None:
    """Silence DevCell's log records again (the library's default)."""
    _activate(False)


def _activate(enabled: bool) -> None:
    if _state.real is None and "loguru" in sys.modules:
        _loaded()  # imported anyway: apply it there now, in the order it was asked
    with _state.lock:
        _state.enabled = enabled
        if _state.real is not None:
            (_state.real.enable if enabled else _state.real.disable)(PACKAGE)


def configure(install: Install, *, level: str) -> None:
    """Replace every sink by those `install(loguru_logger)` adds, taking records of `level`
    and above, and enable DevCell's records: now if loguru is imported, else at the first
    record of `level` or above (a command that logs nothing never imports loguru)."""
    enable()
    with _state.lock:
        _state.threshold = LEVELS[level]
        real = _state.real
        if real is None and "loguru" not in sys.modules:
            _state.pending = install
            return
        _state.pending = None
    real = _loaded()
    real.remove()
    install(real)


def loaded() -> bool:
    """Whether loguru has been imported through this module (tests, start-up checks)."""
    return _state.real is not None


__all__ = ["configure", "disable", "enable", "loaded", "logger"]
