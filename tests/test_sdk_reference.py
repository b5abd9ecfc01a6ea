"""docs/sdk.md, the Python SDK's reference, is what scripts/sdk-reference makes from
devcell/client.py's signatures and docstrings today: a method added or changed without
running it fails here, as does a public method without a docstring."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_sdk_reference_is_current_and_every_method_says_what_it_does() -> None:
    checked = subprocess.run([sys.executable, str(REPO / "scripts" / "sdk-reference"),
                              "--check"], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    text = (REPO / "docs" / "sdk.md").read_text()
    assert "(no docstring)" not in text
    for method in ("list", "apply", "exec", "watch", "fork", "create_token", "node_action"):
        assert f"### `Client.{method}`" in text
