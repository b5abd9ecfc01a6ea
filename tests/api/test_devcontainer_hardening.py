"""devcontainer.json import, the hostile review's cases: errors name the real line (never one
in a comment or a string), problems in what was converted name devcontainer.json, credential-
like variables become secrets, every valued `docker run` option keeps its value, and mounts
that hand over the host are never given."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest

from devcell.api import devcontainer
from devcell.errors import ManifestError
from devcell.manifests import jsonc_positions
from tests.api.test_devcontainer import _convert, _sample


def _refused(tmp_path: Path, text: str) -> list[str]:
    path = _sample(tmp_path, textwrap.dedent(text))
    with pytest.raises(ManifestError) as refused:
        _convert(path, tmp_path, tmp_path / "state")
    return [str(p).removeprefix(str(path)) for p in refused.value.problems]


def test_a_field_is_located_by_its_token_never_by_a_comment_or_string_mentioning_it(
        tmp_path: Path) -> None:
    shown = _refused(tmp_path, """\
        {
          // "privileged": true was here once
          /* "capAdd": ["ALL"],
             "runArgs": ["--privileged"] */
          "name": "say \\"privileged\\": true",
          "image": "devcell/busybox:latest",
          "remoteEnv": {"NOTE": "\\"capAdd\\": no"},
          "runArgs": ["--init",
                      "--privileged"],
          "privileged": true,
          "capAdd": ["SYS_ADMIN"],
        }
        """)
    assert ":9: runArgs: --privileged is refused" in shown[-1] or any(
        s.startswith(":9: runArgs: --privileged is refused") for s in shown), shown
    assert any(s.startswith(":10: privileged: ") for s in shown), shown
    assert any(s.startswith(":11: capAdd[0]: ") for s in shown), shown


def test_positions_follow_jsonc_tokens() -> None:
    text = '{\n // "a": 1\n "a": [1,\n  {"b": \'x\'}],\n c: 2, "a": 3}\n'
    table = jsonc_positions.positions(text)
    assert table[("a",)] == [3, 5] and table[("a", 1, "b")] == [4] and table[("c",)] == [5]
    assert jsonc_positions.line_of(table, ("a", 1, "zz")) == 4


def test_a_nul_in_image_is_blamed_on_devcontainer_json_with_line_and_field(
        tmp_path: Path) -> None:
    shown = _refused(tmp_path, """\
        {
          "name": "nul",

          "image": "devcell/busybox\\u0000:latest",
        }
        """)
    assert len(shown) == 1 and shown[0].startswith(":4: image: "), shown
    assert "NUL" in shown[0] and "cell.yaml" not in shown[0]


def test_a_nul_in_an_env_value_names_its_variable(tmp_path: Path) -> None:
    shown = _refused(tmp_path, """\
        {
          "image": "devcell/busybox:latest",
          "containerEnv": {
            "OK": "1",
            "BAD": "a\\u0000b",
          },
        }
        """)
    assert len(shown) == 1 and shown[0].startswith(":5: containerEnv.BAD: "), shown


@pytest.mark.parametrize(("name", "secret"), [
    ("GITHUB_TOKEN", True), ("NPM_TOKEN", True), ("DB_PASSWORD", True), ("API_KEY", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("MYSQL_ROOT_PASSWD", True), ("SESSION_SECRET", True),
    ("PATH", False), ("SSH_KEY_PATH", False), ("TOKEN_FILE", False), ("KEYBOARD", False),
    ("AWS_ACCESS_KEY_ID", False), ("PWD", False), ("EDITOR", False), ("GPG_KEY_DIR", False),
])
def test_credential_like_names(name: str, secret: bool) -> None:
    assert devcontainer.looks_secret(name) is secret


def test_token_like_env_values_are_imported_as_secrets_and_said_so(tmp_path: Path) -> None:
    path = _sample(tmp_path, """{
      "image": "devcell/busybox:latest",
      "containerEnv": {"GITHUB_TOKEN": "ghp_x", "EDITOR": "vi"},
      "remoteEnv": {"DB_PASSWORD": "hunter2"},
      "runArgs": ["-e", "API_KEY=k1"],
    }""")
    conversion = _convert(path, tmp_path, tmp_path / "state")
    env = {e["name"]: e for e in conversion.manifest["spec"]["env"]}
    assert env["GITHUB_TOKEN"].get("secret") is True and env["DB_PASSWORD"]["secret"] is True
    assert env["API_KEY"]["secret"] is True and "secret" not in env["EDITOR"]
    said = [n for n in conversion.notes if "imported as a secret" in n]
    assert [n.split(":")[0] for n in said] == ["containerEnv.GITHUB_TOKEN",
                                               "remoteEnv.DB_PASSWORD", "runArgs[0]"]
    assert all("ghp_x" not in n and "hunter2" not in n for n in conversion.notes)


def test_every_valued_docker_run_option_keeps_its_value(tmp_path: Path) -> None:
    path = _sample(tmp_path, """{
      "image": "devcell/busybox:latest",
      "runArgs": ["--group-add", "audio", "--sysctl", "net.core.somaxconn=1024",
                  "--tmpfs", "/run:rw", "--dns", "127.0.0.1", "--restart", "no",
                  "--stop-signal", "SIGINT", "-eFOO=1", "--log-opt", "max-size=1m"],
    }""")
    conversion = _convert(path, tmp_path, tmp_path / "state")
    notes = [n for n in conversion.notes if n.startswith("runArgs")]
    for shown in ("--group-add audio", "--sysctl net.core.somaxconn=1024", "--tmpfs /run:rw",
                  "--dns 127.0.0.1", "--restart no", "--stop-signal SIGINT",
                  "--log-opt max-size=1m"):
        assert any(n.startswith(f"runArgs {shown}:") for n in notes), (shown, notes)
    assert len(notes) == 7, notes
    assert {"name": "FOO", "value": "1"} in conversion.manifest["spec"]["env"]


def test_a_value_that_looks_like_a_denied_flag_is_a_value(tmp_path: Path) -> None:
    path = _sample(tmp_path, """{
      "image": "devcell/busybox:latest",
      "runArgs": ["--label", "--privileged", "--group-add", "-v"],
    }""")
    conversion = _convert(path, tmp_path, tmp_path / "state")
    assert sum(n.startswith("runArgs --label --privileged:") for n in conversion.notes) == 1


def test_device_access_run_args_are_refused(tmp_path: Path) -> None:
    shown = _refused(tmp_path, """\
        {
          "image": "devcell/busybox:latest",
          "runArgs": ["--gpus", "all",
                      "--device-cgroup-rule", "c 1:3 mr"],
        }
        """)
    assert any(s.startswith(":3: runArgs: --gpus all is refused") for s in shown), shown
    assert any(s.startswith(":4: runArgs: '--device-cgroup-rule' 'c 1:3 mr' is refused")
               or s.startswith(":4: runArgs: --device-cgroup-rule 'c 1:3 mr' is refused")
               for s in shown), shown


@pytest.mark.parametrize("source", ["/", "/var/run/docker.sock", "/run/docker.sock",
                                    "/var/run", "/run/containerd/containerd.sock",
                                    "/var/lib/docker"])
def test_mounts_that_hand_over_the_host_are_never_given_and_said_so(
        tmp_path: Path, source: str) -> None:
    """Whatever the configuration allows: left out of the cell (the rest converts, as a host
    path the rules refuse is left out), with a note naming the mount and why."""
    path = _sample(tmp_path, f"""{{
      "image": "devcell/busybox:latest",
      "mounts": [
        "source=/tmp,target=/scratch,type=bind",
        "source={source},target=/host,type=bind",
      ],
    }}""")
    conversion = _convert(path, tmp_path, tmp_path / "state")
    mounts = conversion.manifest["spec"].get("mounts") or []
    assert all(m["mountPath"] != "/host" for m in mounts)
    [said] = [n for n in conversion.notes if n.startswith("mounts[1]: ")]
    assert "left out, never given to a cell" in said and source in said


def test_a_mount_of_any_unix_socket_is_never_given(tmp_path: Path) -> None:
    sock_path = tmp_path / "agent"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    try:
        path = _sample(tmp_path, f"""{{
          "image": "devcell/busybox:latest",
          "mounts": [{{"source": "{sock_path}", "target": "/agent", "type": "bind"}}],
        }}""")
        conversion = _convert(path, tmp_path, tmp_path / "state")
    finally:
        server.close()
    assert "mounts" not in conversion.manifest["spec"]
    [said] = [n for n in conversion.notes if n.startswith("mounts[0]: ")]
    assert "is a socket" in said
