"""The canonical JSON form of manifest data: what every hash and every comparison reads.

A leaf (the standard library only), so `model` and `secrets` both use it without importing
each other: keys sorted, no spaces, text as written (not escaped to ASCII).
"""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
