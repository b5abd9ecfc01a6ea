"""The Python client (`from devcell import Client`, devcell/client.py; here beside the
server's tests to share their daemon) against the real server (the session's `api`
fixture): list, get, apply, delete, watch, and each problem raised as DevCell's own error;
over the unix socket and over TLS with a token.

Cost: ~1-2 s once the shared daemon runs.
"""

from __future__ import annotations

import subprocess
import sys
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
