"""host/passwd.py: `spec.user` names resolved the way the image's own files say."""

from __future__ import annotations

from devcell.backends.host import passwd

PASSWD = "root:x:0:0:root:/root:/bin/sh\nvscode:x:1000:1001::/home/vscode:/bin/bash\nbad:x:y:z\n"
GROUP = "root:x:0:\nstaff:x:50:\n"


def test_names_numbers_and_groups() -> None:
    assert passwd.ids("vscode", PASSWD, GROUP) == (1000, 1001)
    assert passwd.ids("vscode:staff", PASSWD, GROUP) == (1000, 50)
    assert passwd.ids("1000", PASSWD, GROUP) == (1000, 1001)
    assert passwd.ids("4242", PASSWD, GROUP) == (4242, 4242)  # unknown number: docker's way
    assert passwd.ids("4242:7", None, None) == (4242, 7)
    for unknown in ("ghost", "vscode:ghosts", "bad"):
        assert passwd.ids(unknown, PASSWD, GROUP) is None
