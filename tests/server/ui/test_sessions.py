"""ui.sessions: sessions found by their id only, bounded in time; failed sign-ins throttled."""

from __future__ import annotations

from devcell.server.ui import sessions


def test_a_session_is_found_by_its_id_and_closed() -> None:
    kept = sessions.Sessions()
    sid, found = kept.open("dct_x")
    assert kept.find(sid) is found and found.token == "dct_x"
    assert kept.find(sid + "x") is None and kept.find(None) is None and kept.find("") is None
    assert found.csrf != kept.anonymous_csrf and sessions.same(found.csrf, found.csrf)
    assert not sessions.same(None, found.csrf) and not sessions.same("forged", found.csrf)
    kept.close(sid)
    assert kept.find(sid) is None


def test_an_idle_session_ends() -> None:
    kept = sessions.Sessions()
    sid, found = kept.open("dct_x")
    found.used -= sessions.IDLE_SECONDS + 1
    assert kept.find(sid) is None


def test_failed_sign_ins_are_throttled_for_a_window() -> None:
    throttle = sessions.Throttle(limit=3, window=60)
    for t in (0.0, 1.0, 2.0):
        assert throttle.allowed(t)
        throttle.failed(t)
    assert not throttle.allowed(30.0)
    assert throttle.allowed(60.5)  # the first failure left the window
