"""POST /api/v1/nodes/NAME/drain: `devcell node drain` through the API, its lines streamed.

A drain moves cells for minutes (each a recorded operation the daemon carries out: stop,
checkpoint, push, pull, start), so its answer is JSON lines (application/x-ndjson) sent as
they come: each line `devcell node drain` prints ({"type": "line", "stream", "text"}), a
`keepalive` every KEEPALIVE_SECONDS while the moves go on (so a client's read timeout and
a proxy's idle one hold), and last a `result` with the exit status and what moved, or an
`error` (a problem document) when the drain itself failed half-way. Everything refusable is
refused before the stream begins, with its status: not an admin (rule `node-admin`), no
cluster, no such node, a cordoned node, a lost one without fromLastSnapshot, a node already
being drained (409, naming who drains it since when), MAX_DRAINS drains running (503).

The drain runs on a thread of its own, never the request's: a client that leaves (a closed
terminal, a lost connection, a reader that stopped) ends only the stream, never the drain,
which goes on to its end in the caller's name (its moves are recorded and kill -9 safe, but
one stopped between recording the moves and draining the node would leave the node active
with nothing said), and says its outcome in the daemon's log. The node stays claimed until
then: a second drain of it while the first runs is the 409, never a second set of moves.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from devcell.log import logger
from devcell.names import printable
from devcell.server.problems import HttpProblem

MAX_DRAINS = 4
"""Drains running at once (each holds a thread polling the database while the daemon moves
its cells, and the engine's job slots): a fifth is 503."""
KEEPALIVE_SECONDS = 15.0
"""A stream with nothing to say says `keepalive` this often."""
POLL_SECONDS = 0.2
"""How often the stream looks for the drain's next line."""
MEDIA = "application/x-ndjson"


@dataclass
class Running:
    """A drain in progress: whose, since when, and what it has said so far (`lines`: read by
    its one stream; nobody reads them once that stream's client left)."""

    node: str
    user: str
    since: str
    lines: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)


class Drains:
    """The drains of one server: at most MAX_DRAINS at once, one a node. A slot is taken
    before the node is even looked up (that asks the engine) and given back when the drain's
    thread ends, however it ends."""

    def __init__(self, total: int = MAX_DRAINS) -> None:
        self.total = total
        self.slots = 0
        self.running: dict[str, Running] = {}
        self._lock = threading.Lock()

    def take(self) -> None:
        """A slot for a drain to come (503 when MAX_DRAINS run or are being checked)."""
        with self._lock:
            if self.slots >= self.total:
                busy = ", ".join(sorted(self.running)) or "being checked"
                raise HttpProblem(503, "too-many-drains", "Too many drains",
                                  f"{self.total} drains are running ({printable(busy)}); try "
                                  "again once one ends")
            self.slots += 1

    def give(self) -> None:
        with self._lock:
            self.slots -= 1

    def claim(self, node: str, user: str) -> Running:
        """Node `node` for `user`'s drain, in the slot taken for it; 409 naming the drain
        already running there (the slot is then the caller's to give back)."""
        with self._lock:
            held = self.running.get(node)
            if held is not None:
                raise HttpProblem(409, "drain-running", "A drain of this node is running",
                                  printable(f"node {node} is being drained (by {held.user} "
                                            f"since {held.since}): its stream says how it "
                                            "ends; `devcell get nodes` shows its availability "
                                            "once it has"))
            running = self.running[node] = Running(
                node, user, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            return running

    def end(self, running: Running) -> None:
        """The drain's thread ended: its node and its slot free again."""
        with self._lock:
            if self.running.get(running.node) is running:
                del self.running[running.node]
            self.slots -= 1


def start(drains: Drains, running: Running, state_dir: Path, principal: Any, target: Any,
          timeout: float) -> None:
    """Run the drain of `target` (api.drain.target's) on a thread of its own in
    `principal`'s name, its lines put on `running.lines`; the claim and slot given back
    when it ends."""
    def work() -> None:
        from devcell.api import converging, drain
        from devcell.server import problems
        from devcell.store import actor

        said: list[dict[str, Any]] = []
        try:
            with actor.acting_as(principal.user):
                result = drain.move(state_dir, target,
                                    options=converging.Options(timeout=timeout))
            lines, code = drain.said(result)
            said += [{"type": "line", "stream": stream, "text": text} for stream, text in lines]
            said.append(_result(result, code))
            logger.info("drain of node {} by {}: exit {} ({} moved, {} left)", target.id,
                        printable(principal.user), code, len(result.moved),
                        len(result.failed))
        except Exception as exc:  # noqa: BLE001  (said on the stream; the daemon goes on)
            doc = problems.of_error(exc)
            if doc["status"] >= 500:
                logger.error("drain of node {} failed: {}: {}", target.id,
                             type(exc).__name__, printable(str(exc)))
            said.append({"type": "error", "problem": doc})
        finally:
            drains.end(running)  # the node free before its result is said: a client that
            for line in said:  # drains again on reading it is never the 409
                running.lines.put(line)

    threading.Thread(target=work, name=f"drain-{target.id}", daemon=True).start()


def _result(result: Any, code: int) -> dict[str, Any]:
    return {"type": "result", "exitCode": code, "node": result.node,
            "drained": result.drained,
            "moved": [{"cell": c, "node": n} for c, n in result.moved],
            "failed": [{"cell": c, "reason": why} for c, why in result.failed],
            "fromSnapshots": [{"cell": c, "snapshot": s, "takenAt": t}
                              for c, s, t in result.from_snapshots]}


async def stream(running: Running) -> AsyncIterator[bytes]:
    """The drain's lines as JSON lines until its result or error; a keepalive when it has
    been quiet for KEEPALIVE_SECONDS. Cancelled when the client leaves: the drain goes on."""
    quiet_since = time.monotonic()
    while True:
        try:
            line = running.lines.get_nowait()
        except queue.Empty:
            if time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                yield b'{"type":"keepalive"}\n'
                quiet_since = time.monotonic()
            await anyio.sleep(POLL_SECONDS)
            continue
        yield (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode()
        quiet_since = time.monotonic()
        if line["type"] in ("result", "error"):
            return
