"""A pull's progress, one bar per layer: the engine's pull stream turned into devcell.progress
tasks.

The engine reports each layer by its short id: `Pulling fs layer`, `Downloading` with
`progressDetail: {current, total}` (bytes), `Download complete` or `Already exists`, then
`Extracting` and `Pull complete`. A layer's bar starts at its first download report and ends
when its download is done, so a terminal shows what is still coming. Without a reporter
(no terminal, the daemon) each event costs a dictionary lookup; nothing is drawn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devcell import progress
from devcell.names import printable

_DONE = ("Download complete", "Verifying Checksum", "Pull complete", "Extracting")


@dataclass
class _Layer:
    exit: contextlib.ExitStack
    advance: Callable[[int], None]
    total: int
    done: int = 0


@dataclass
class LayerBars:
    """Feed every event of one pull; `close()` (or the with-block) ends the bars left open."""

    image: str
    layers: dict[str, _Layer] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    downloaded: int = 0
    """Bytes the engine reported downloading (layers it already had count nothing)."""

    def __enter__(self) -> LayerBars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def feed(self, event: dict[str, Any]) -> None:
        layer_id = event.get("id")
        status = event.get("status")
        if not isinstance(layer_id, str) or not isinstance(status, str):
            return
        if status == "Downloading":
            detail = event.get("progressDetail") or {}
            current, total = detail.get("current"), detail.get("total")
            if isinstance(current, int) and isinstance(total, int) and total > 0:
                self._downloading(layer_id, current, total)
        elif status in _DONE:
            self._finish(layer_id)

    def _downloading(self, layer_id: str, current: int, total: int) -> None:
        if layer_id in self.finished:
            return
        layer = self.layers.get(layer_id)
        if layer is None:
            stack = contextlib.ExitStack()
            name = f"{printable(self.image)} {printable(layer_id)}"
            advance = stack.enter_context(progress.track(name, total, small=True))
            layer = self.layers[layer_id] = _Layer(stack, advance, total)
        step = min(current, layer.total) - layer.done
        if step > 0:
            layer.advance(step)
            layer.done += step
            self.downloaded += step

    def _finish(self, layer_id: str) -> None:
        layer = self.layers.pop(layer_id, None)
        self.finished.add(layer_id)
        if layer is None:
            return
        rest = layer.total - layer.done
        if rest > 0:
            layer.advance(rest)
            self.downloaded += rest
        layer.exit.close()

    def close(self) -> None:
        for layer_id in list(self.layers):
            layer = self.layers.pop(layer_id)
            layer.exit.close()
