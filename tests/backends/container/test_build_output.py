"""A failed build's message is bounded and escaped, its step line included (no engine)."""

from __future__ import annotations

from devcell.backends.container import build as container_build


def test_the_failing_steps_line_is_bounded_and_escaped() -> None:
    out = container_build._Output()
    out.add("Step 2/7 : RUN echo '\x1b]0;PWNED\x07' " + "y" * 60_000 + "\n")
    out.add("boom\n")
    message = container_build._failure("built", out)
    assert len(message) < container_build.OUTPUT_TAIL + 2 * container_build.STEP_LIMIT
    assert "\x1b" not in message and "\x07" not in message
    assert "at Step 2/7 : RUN echo '\\x1b]0;PWNED\\x07' yyy" in message
