"""Run the GitOps daemon in this process, on the main thread (it installs signal handlers),
while a helper thread drives it and sets its stop event; restores the test's handlers."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from devcell.reconciler.daemon import Daemon


def run_daemon(daemon: Daemon, drive: Callable[[], None], *, join_s: float = 20.0) -> None:
    """`daemon.run()` with `drive` on a thread; the daemon exits 0 once drive (or this) stops it."""
    previous = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    driver = threading.Thread(target=drive)
    driver.start()
    try:
        assert daemon.run() == 0
    finally:
        daemon.stop_event.set()
        driver.join(join_s)
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
