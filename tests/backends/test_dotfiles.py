"""What backends/dotfiles.py keeps of an install's output: a bounded tail, with the cell's
secret values redacted, even when the tail's cut falls inside one."""

from __future__ import annotations

import pytest

from devcell.backends import dotfiles

SECRET = "TOKENAAAA-BBBBCCCCDDDD-LEAKTAIL1234"
SPEC = {"env": [{"name": "API_TOKEN", "value": SECRET, "secret": True},
                {"name": "PLAIN", "value": "visible-value"}]}


def _kept(output: bytes) -> str:
    tail = dotfiles._Tail(dotfiles.TAIL_BYTES)
    for i in range(0, len(output), 1000):  # as the cell's stream comes, in pieces
        tail.write(output[i:i + 1000])
    return dotfiles._redacted(tail.text(), SPEC)


@pytest.mark.parametrize("inside", [3, 10, len(SECRET) - 1])
def test_a_secret_the_tail_cuts_in_two_is_not_kept_in_part(inside: int) -> None:
    after = b"visible-value " + b"x" * (dotfiles.TAIL_BYTES - inside - 14)
    kept = _kept(b"env: API_TOKEN=" + SECRET.encode() + after)
    assert kept.startswith("<redacted>visible-value xxx"), kept[:40]
    assert SECRET[-inside:] not in kept


def test_a_whole_secret_is_redacted_and_plain_values_are_kept() -> None:
    kept = _kept(f"token {SECRET} and {SECRET}\nplain visible-value\n".encode())
    assert kept == "token <redacted> and <redacted>\nplain visible-value"


def test_a_tail_cut_elsewhere_is_kept_as_it_is() -> None:
    kept = _kept(b"y" * dotfiles.TAIL_BYTES * 2)
    assert kept == "y" * dotfiles.TAIL_BYTES
