"""The Python client (`from devcell import Client`, devcell/client.py; here beside the
server's tests to share their daemon) against the real server (the session's `api`
fixture): list, get, apply, delete, watch, and each problem raised as DevCell's own error;
over the unix socket and over TLS with a token.

Cost: ~1-2 s once the shared daemon runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from typing import Any

import pytest

from devcell import errors
from tests.conftest import REPO
from tests.server.conftest import Api
from tests.server.test_app import cell, wait_for


def test_importing_devcell_does_not_import_the_client() -> None:
    code = ("import sys, devcell; assert 'devcell.client' not in sys.modules; "
            "from devcell import Client; assert 'devcell.client' in sys.modules; "
            "assert 'httpx' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_verbs_over_the_unix_socket(api: Api) -> None:
    from devcell import Client

    name = f"sdk-{uuid.uuid4().hex[:6]}"
    with Client(f"unix:{api.socket}") as dc:
        assert dc.get("cells", "seed")["metadata"]["name"] == "seed"
        version = api.client.get("/api/v1/cells").json()["metadata"]["resourceVersion"]
        seen: list[dict[str, Any]] = []

        def follow() -> None:
            for change in dc.watch("cells", resource_version=version, timeout=20):
                seen.append(change)
                if change["object"].get("metadata", {}).get("name") == name:
                    return

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        done = dc.apply(cell(name))
        assert done["changes"][0]["outcome"] == "created"
        reader.join(20)
        assert seen and seen[-1]["object"]["metadata"]["name"] == name
        assert name in [c["metadata"]["name"] for c in dc.list("cells")]
        wait_for(api, f"/api/v1/cells/{name}",
                 lambda r: r.json()["status"]["phase"] == "Running")
        assert dc.delete("cells", name)["changes"][0]["outcome"] == "deleted"
        with pytest.raises(errors.NotFound, match="not found"):
            dc.get("cells", "no-such-cell")
        with pytest.raises(errors.ManifestError) as bad:
            dc.apply(cell("bad") + "  imag: x\n")
        assert bad.value.problems[0].field == "spec.imag" and bad.value.problems[0].line == 7
        with pytest.raises(errors.UsageError):
            dc.list("cells", selector="team in (")


def test_tokens_and_refusals_over_tls(api: Api) -> None:
    from devcell import Client

    viewer = api.token("sdk-viewer", "viewer")
    with Client(api.url, token=viewer, ca=str(api.certificate)) as dc:
        assert dc.get("cells", "seed")["metadata"]["name"] == "seed"
        with pytest.raises(errors.Forbidden) as refused:
            dc.delete("cells", "seed")
        assert refused.value.rule == "viewer-read-only"
    with Client(api.url, token="dct_wrong", ca=str(api.certificate)) as dc:
        with pytest.raises(errors.Unauthenticated):
            dc.list("cells")


def test_actions_and_wait_over_the_unix_socket(api: Api) -> None:
    from devcell import Client

    name, snap, fork = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("sdka", "snap", "fork"))
    with Client(f"unix:{api.socket}") as dc:
        dc.apply(cell(name))
        assert dc.wait(name, "Running", timeout=30)["metadata"]["name"] == name
        slept = dc.sleep(name)
        assert slept["ok"] and slept["operations"]
        assert dc.get("cells", name)["status"]["phase"] == "Sleeping"
        assert dc.start(name, timeout=60)["ok"]
        assert dc.snapshot(name, snap, ttl="2h")["ok"]
        assert dc.wait(snap, "Ready", resource="snapshots", timeout=5)["spec"]["cell"] == name
        with pytest.raises(errors.Conflict, match="already exists"):
            dc.snapshot(name, snap)
        recorded = dc.fork(name, snap, fork, wait=False)
        assert recorded["changes"][0]["name"] == fork and recorded["results"] == []
        assert dc.wait(fork, timeout=30)["spec"]["workspace"]["from"] == {"snapshot": snap}
        assert [s["metadata"]["name"] for s in dc.snapshots_of(name)] == [snap]
        assert dc.snapshots_of(fork) == []
        with pytest.raises(errors.NotFound, match="not found"):
            dc.snapshots_of(f"nope-{name}")
        assert dc.restart(name)["changes"][0]["outcome"] == "restart requested"
        assert dc.rerun_hooks(name)["ok"]
        assert dc.restore(snap, dry_run=True)["cell"] == name
        restored = dc.restore(snap, approve=True, timeout=60)
        assert restored["done"] and restored["operation"]
        with pytest.raises(errors.NotFound):
            dc.restore(f"nope-{snap}")
        with pytest.raises(errors.ManifestError, match="has no service 'web'"):
            dc.restart(name, "web")
        with pytest.raises(TimeoutError, match="not Stopped"):
            dc.wait(fork, "Stopped", timeout=1)
        with pytest.raises(errors.NotFound):
            dc.sleep("no-such-cell")
        with pytest.raises(errors.NotFound):
            dc.wait("no-such-cell", timeout=1)


def test_actions_over_tls_are_the_callers(api: Api) -> None:
    from devcell import Client

    token = api.token("sdk-dev", "developer")
    name = f"sdkt-{uuid.uuid4().hex[:6]}"
    with Client(api.url, token=token, ca=str(api.certificate)) as dc:
        dc.apply(cell(name))
        dc.wait(name, timeout=30)
        assert dc.sleep(name)["ok"]
        with pytest.raises(errors.Forbidden) as refused:
            dc.sleep("seed")
        assert refused.value.rule == "developer-not-own"
    events = api.client.get("/api/v1/events", params={"for": f"cell/{name}"}).json()["items"]
    assert {e["actor"] for e in events if e["reason"] == "StateChanged"} == {"sdk-dev"}


_IMPOSTOR = """
import socket, sys
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
server.listen(8)
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    conn.settimeout(2)
    try:
        got = conn.recv(65536)
    except OSError:
        got = b""
    print("received" if got else "nothing", flush=True)
    conn.close()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to run the impostor server as another user")
def test_a_socket_another_user_serves_is_sent_nothing() -> None:
    """Another user binds the daemon's socket path while the daemon is down (in /tmp, a
    directory both can write): the client sent them its requests, a manifest's secrets or an
    exec's argv and input, and believed their answers."""
    from devcell import Client

    shared = tempfile.mkdtemp(prefix="devcell-impostor-")
    os.chmod(shared, 0o1777)
    path = f"{shared}/api.sock"
    impostor = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 sys.executable, "-c", _IMPOSTOR, path],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "ready\n"
        said = (f"DevCell API at unix:{path}: the process serving that socket runs as uid "
                f"65534, not as this user \\(uid 0\\); nothing is sent to it")
        with Client(f"unix:{path}", timeout=5) as dc:
            with pytest.raises(errors.TemporaryError, match=said):
                dc.list("cells")
            with pytest.raises(errors.TemporaryError, match=said):
                dc.exec("seed", ["cat"], stdin=b"a secret")
        for _ in range(2):
            assert impostor.stdout.readline() == "nothing\n"
    finally:
        impostor.kill()
        impostor.wait()
        shutil.rmtree(shared)
