"""The values a command line's words convert to: durations, counts, kinds, output formats.

A leaf: the parser (cli/parser.py), the command table (cli/commands.py) and the commands that
read the same spellings elsewhere (`logs --since`) import it, and it imports nothing of the CLI.
A converter's `words` attribute is what shell completion offers for its value.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from devcell import kinds

OBJECT_KINDS = kinds.words()
"""What a user may type for a kind of desired object (cell, cells, snap...) -> its name."""
GET_KINDS = {
    **{word: kinds.get(name).plural for word, name in OBJECT_KINDS.items()},
    "volume": "volumes", "volumes": "volumes", "vol": "volumes",
    "operation": "operations", "operations": "operations", "op": "operations", "ops": "operations",
    "event": "events", "events": "events", "ev": "events",
    "controller": "controllers", "controllers": "controllers",
    "node": "nodes", "nodes": "nodes", "no": "nodes",
}


def kind(table: dict[str, str]) -> Callable[[str], str]:
    """A converter from what a user types for a kind to its name in `table`."""
    def convert(value: str) -> str:
        key = value.lower()
        if key not in table:
            raise argparse.ArgumentTypeError(
                f"unknown resource type {value!r} (one of: {', '.join(sorted(set(table)))})")
        return table[key]
    convert.words = sorted(table)  # type: ignore[attr-defined]  # what completion offers
    return convert


CONDITION_STATUSES = ("True", "False", "Unknown")
"""A condition's statuses, as Kubernetes spells them."""


def wait_condition(text: str) -> tuple[str, str]:
    """`wait --for`: `create`, `delete` or `condition=TYPE[=STATUS]` -> (what, status); the
    status (default True, any case, as kubectl compares it) is one of CONDITION_STATUSES, so
    a wait for a status no condition can have is refused, never waited out."""
    if text in ("create", "delete"):
        return text, ""
    prefix, _, rest = text.partition("=")
    ctype, has_status, status = rest.partition("=")
    if prefix != "condition" or not ctype:
        raise argparse.ArgumentTypeError(
            f"{text!r}: use condition=TYPE[=STATUS], create or delete")
    if not has_status:
        return ctype, "True"
    spelled = {word.lower(): word for word in CONDITION_STATUSES}.get(status.lower())
    if spelled is None:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a condition's status is True, False or Unknown (got {status!r})")
    return ctype, spelled


wait_condition.words = ["condition=Ready", "condition=Ready=False", "create",  # type: ignore[attr-defined]
                        "delete"]


def workers(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"invalid worker count {text!r} (a whole number 1-64)")
    return int(text)


MAX_FORKS = 100
"""The most forks one `cell fork --count` makes."""


def fork_count(text: str) -> int:
    """`cell fork --count N`: 1 to MAX_FORKS."""
    if not text.isdigit() or not 1 <= int(text) <= MAX_FORKS:
        raise argparse.ArgumentTypeError(f"invalid fork count {text!r} (a whole number "
                                         f"1-{MAX_FORKS})")
    return int(text)


KEEP_MAX_SECONDS = 999_999 * 86_400
"""The longest ttl a snapshot takes (999999d)."""


def keep_seconds(value: float | None) -> int:
    """`--keep-pruned`'s whole seconds (None: the default, 24 hours); 0 keeps nothing, so a
    value under a second, which would round to it, is refused rather than keep nothing."""
    from devcell.errors import UsageError
    from devcell.store import prunes

    if value is None:
        return prunes.DEFAULT_KEEP_SECONDS
    if 0 < value < 1:
        raise UsageError(f"--keep-pruned {value:g}s: keep a pruned cell's workspace at least "
                         "1s, or give 0 to keep nothing")
    if value > KEEP_MAX_SECONDS:
        raise UsageError("--keep-pruned: at most 999999 days (a snapshot's longest ttl)")
    return math.ceil(value)


def keep_pruned(text: str) -> float:
    """`--keep-pruned`: a duration keep_seconds takes (0, or at least 1s; `duration` refuses
    one too long to wait for, which is shorter than the longest ttl keep_seconds allows)."""
    seconds = duration(text)
    if 0 < seconds < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} keeps nothing (it rounds to 0s): keep a pruned cell's workspace at "
            "least 1s, or give 0 to keep nothing")
    return seconds


RESYNC_MIN_SECONDS = 1.0
"""The shortest resync period: each resync reads the whole manifests directory and observes
every cell, so a shorter one would keep the daemon doing only that."""


def resync(text: str) -> float:
    """`controller run --resync`: 0 (never), or at least RESYNC_MIN_SECONDS."""
    seconds = duration(text)
    if 0 < seconds < RESYNC_MIN_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is too short (at least {RESYNC_MIN_SECONDS:g}s, or 0: never)")
    return seconds


def ttl(text: str) -> str:
    """`snapshot create --ttl`: what a Snapshot's spec.ttl takes (30m, 12h, 7d; 1 to 999999
    of the unit), checked here so a refused value changes nothing; kept as written."""
    from devcell.manifests import quantities

    try:
        quantities.duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def duration(text: str) -> float:
    """kubectl durations: 30s, 5m, 1h30m, 250ms, or plain seconds."""
    import re
    import threading

    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r} (e.g. 30s, 5m, 1h30m)")
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        seconds = sum(float(n) * scale[u] for n, u in parts)
    # Every wait ends in a lock's timeout, which overflows beyond TIMEOUT_MAX (292 years):
    # refused here, not as a traceback in a daemon thread that then dies silently.
    if seconds > threading.TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(
            f"duration {text!r} is too long (at most {int(threading.TIMEOUT_MAX)}s)")
    return seconds


def tail_lines(text: str) -> int:
    if not re.fullmatch(r"-1|[0-9]{1,18}", text):  # ASCII only: '²'.isdigit() is True
        raise argparse.ArgumentTypeError(f"invalid line count {text!r} (a whole number, or -1: all)")
    return int(text)


def get_output(text: str) -> str:
    """`get -o`: checked by cli/printers when used; the words are for shell completion."""
    return text


get_output.words = ["table", "wide", "yaml", "json", "name", "jsonpath=",  # type: ignore[attr-defined]
                    "jsonpath-file=", "custom-columns=", "custom-columns-file="]


def explained(text: str) -> str:
    """`explain KIND.FIELD`: checked by cli/explain; the kinds are for shell completion."""
    return text


explained.words = sorted({*kinds.words(), "config"})  # type: ignore[attr-defined]


def port_mapping(text: str) -> tuple[int, int]:
    """`CONTAINER:HOST`, both ports 1-65535 (`cell fork --port 8080:18080`)."""
    inside, sep, host = text.partition(":")
    pair = (int(inside), int(host)) if sep and inside.isdigit() and host.isdigit() else None
    if pair is None or not all(1 <= n <= 65535 for n in pair):
        raise argparse.ArgumentTypeError(f"{text!r} is not CONTAINER:HOST (two ports, 1-65535)")
    return pair
