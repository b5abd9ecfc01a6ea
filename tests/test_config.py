"""DevCell's configuration: the only way to widen the security defaults, and hard to misuse."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devcell import admission, config
from devcell.errors import ConfigError
from tests.conftest import Cli, db_fingerprint

GOOD = """\
apiVersion: devcell.dev/v1alpha1
kind: Config
security:
  allowedHostPaths: [/srv/src, /opt/data]
  allowHostNetwork: true
  allowedPublishAddresses: ["0.0.0.0"]
"""


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_no_file_means_the_secure_defaults(tmp_path: Path) -> None:
    loaded = config.load(tmp_path)
    assert not loaded.exists and loaded.path == tmp_path / "config.yaml"
    policy = loaded.security
    assert policy.allowed_host_paths == () and not policy.allow_host_network
    assert policy.allowed_publish_addresses == ()


def test_a_valid_file_widens_exactly_what_it_says(tmp_path: Path) -> None:
    write(tmp_path / "config.yaml", GOOD)
    policy = config.load(tmp_path).security
    assert policy.allowed_host_paths == ("/srv/src", "/opt/data")
    assert policy.allow_host_network is True
    assert policy.allowed_publish_addresses == ("0.0.0.0",)
    assert policy.source == str(tmp_path / "config.yaml")


def test_devcell_config_names_another_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    other = write(tmp_path / "elsewhere.yaml", GOOD)
    monkeypatch.setenv("DEVCELL_CONFIG", str(other))
    assert config.load(tmp_path / "state").security.allow_host_network
    monkeypatch.setenv("DEVCELL_CONFIG", str(tmp_path / "typo.yaml"))
    with pytest.raises(ConfigError, match=r"typo.yaml: no such file \(named by \$DEVCELL_CONFIG\)"):
        config.load(tmp_path / "state")


def test_idle_gives_the_default_sleep_after(tmp_path: Path) -> None:
    assert config.load(tmp_path).idle.sleep_after is None  # no file: cells never idle-sleep
    write(tmp_path / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                    "idle: {sleepAfter: 30m}\n")
    assert config.load(tmp_path).idle.sleep_after == "30m"
    write(tmp_path / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                    "idle:\n  sleepAfter: 30 minutes\n")
    with pytest.raises(ConfigError) as caught:
        config.load(tmp_path)
    assert str(caught.value).startswith(
        f'{tmp_path}/config.yaml:4:15: idle.sleepAfter: "30 minutes" is neither a duration '
        "nor never")


def test_unknown_and_mistyped_fields_are_located(tmp_path: Path) -> None:
    write(tmp_path / "config.yaml", """\
apiVersion: devcell.dev/v1alpha1
kind: Config
security:
  allowHostNetwrk: true
  allowedHostPaths: /srv
""")
    with pytest.raises(ConfigError) as caught:
        config.load(tmp_path)
    lines = str(caught.value).splitlines()
    assert lines[0].startswith(f"{tmp_path}/config.yaml:4:3: security.allowHostNetwrk: "
                               'unknown field (did you mean "allowHostNetwork"?)')
    assert lines[1] == (f"{tmp_path}/config.yaml:5:21: security.allowedHostPaths: expected an "
                        "array of strings, got a string")


@pytest.mark.parametrize("text,message", [
    ("kind: Config\n", 'missing required field "apiVersion"'),
    ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\n", 'must be "Config"'),
    ("[1, 2\n", "YAML syntax error"),
    ("a: &x 1\nb: *x\n", "anchors are not allowed"),
    ("- 1\n", "expected a mapping"),
])
def test_malformed_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path / "config.yaml", text)
    with pytest.raises(ConfigError, match=message):
        config.load(tmp_path)


def test_a_file_others_can_write_is_not_trusted(tmp_path: Path) -> None:
    write(tmp_path / "config.yaml", GOOD, mode=0o620)
    with pytest.raises(ConfigError, match="writable by group or others .*chmod go-w"):
        config.load(tmp_path)
    os.chmod(tmp_path / "config.yaml", 0o644)  # readable by others is fine: it holds no secret
    assert config.load(tmp_path).security.allow_host_network


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    write(tmp_path / "config.yaml", "# nothing allowed yet\n")
    assert config.load(tmp_path).security.allowed_host_paths == ()


def test_apply_refuses_while_the_configuration_is_broken_and_changes_nothing(
        cli: Cli, state_dir: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "cell.yaml"
    manifest.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: api}\n"
                        "spec: {backend: fake}\n")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    before = db_fingerprint(state_dir)
    write(state_dir / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurty: {}\n")
    manifest.write_text(manifest.read_text().replace("name: api", "name: web"))
    result = cli("apply", "-f", str(manifest))
    assert result.returncode == 1
    assert f"{state_dir}/config.yaml:3:1: securty: unknown field" in result.stderr
    assert "Traceback" not in result.stderr
    assert db_fingerprint(state_dir) == before


def test_apply_accepts_a_host_mount_the_configuration_allows(
        cli: Cli, state_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "app").mkdir(parents=True)
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: api}\n"
        f"spec:\n  backend: fake\n  mounts:\n    - {{hostPath: {src}/app, mountPath: /src}}\n")
    refused = cli("apply", "-f", str(manifest))
    assert refused.returncode == 1 and "host bind mounts are off by default" in refused.stderr
    write(state_dir / "config.yaml",
          f"apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
          f"  allowedHostPaths: [{src}]\n")
    accepted = cli("apply", "-f", str(manifest))
    assert accepted.returncode == 0, accepted.stderr
    shown = cli("get", "cell", "api", "-o", "json")
    assert f'"hostPath": "{src}/app"' in shown.stdout and '"readOnly": false' in shown.stdout


def test_schema_command_prints_the_configuration_schema(cli: Cli) -> None:
    result = cli("schema", "config")
    assert result.returncode == 0 and '"allowedHostPaths"' in result.stdout


def test_a_fork_is_checked_against_the_configuration_as_it_is_now(
        cli: Cli, state_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: api}\n"
        f"spec:\n  backend: fake\n  mounts:\n    - {{hostPath: {src}, mountPath: /src}}\n")
    config = write(state_dir / "config.yaml",
                   f"apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
                   f"  allowedHostPaths: [{src}]\n")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    assert cli("snapshot", "create", "api", "--name", "s1").returncode == 0
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n")  # tightened
    before = db_fingerprint(state_dir)
    forked = cli("cell", "fork", "api", "--snapshot", "s1", "--name", "copy")
    assert forked.returncode == 1 and "Traceback" not in forked.stderr
    assert 'Cell "copy": spec.mounts[0].hostPath: host bind mounts are off by default' in forked.stderr
    assert db_fingerprint(state_dir) == before


def test_a_directory_others_can_write_makes_the_file_untrusted(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    write(shared / "config.yaml", GOOD)
    shared.chmod(0o777)  # anyone could replace the file
    try:
        with pytest.raises(ConfigError, match=f"{shared} is writable by group or others"):
            config.load(shared)
        shared.chmod(0o1777)  # sticky, like /tmp: others cannot replace our file
        assert config.load(shared).security.allow_host_network
    finally:
        shared.chmod(0o700)


def test_the_configuration_may_not_lie_under_a_path_it_allows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "src"
    path = write(shared / "devcell.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                          f"security:\n  allowedHostPaths: [{shared}]\n")
    monkeypatch.setenv("DEVCELL_CONFIG", str(path))  # outside the state directory
    with pytest.raises(ConfigError, match="lies under allowedHostPaths entry"):
        config.load(tmp_path / "state")


def test_the_state_directorys_own_file_may_lie_under_an_allowed_ancestor(tmp_path: Path) -> None:
    """Allowing $HOME with the state in ~/.local/share/devcell: no cell can mount the state."""
    state = tmp_path / "home" / "state"
    write(state / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                 f"security:\n  allowedHostPaths: [{tmp_path / 'home'}]\n")
    assert config.load(state).security.allowed_host_paths == (str(tmp_path / "home"),)


def test_a_link_in_a_directory_others_can_write_is_untrusted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = write(tmp_path / "safe" / "config.yaml", GOOD)
    public = tmp_path / "public"
    public.mkdir()
    (public / "link.yaml").symlink_to(target)
    public.chmod(0o777)
    monkeypatch.setenv("DEVCELL_CONFIG", str(public / "link.yaml"))
    try:
        with pytest.raises(ConfigError, match=f"{public} is writable by group or others"):
            config.load(tmp_path / "state")
    finally:
        public.chmod(0o700)


def test_apply_refuses_a_host_directory_another_cell_mounts_writable(
        cli: Cli, state_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    write(state_dir / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                     f"security:\n  allowedHostPaths: [{src}]\n")

    def cell_file(name: str, host: Path, read_only: bool) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
                        f"metadata: {{name: {name}}}\nspec:\n  backend: fake\n  mounts:\n"
                        f"    - {{hostPath: {host}, mountPath: /m, readOnly: "
                        f"{'true' if read_only else 'false'}}}\n")
        return path

    assert cli("apply", "-f", str(cell_file("writer", src, False))).returncode == 0
    refused = cli("apply", "-f", str(cell_file("reader", src / "sub", True)))
    assert refused.returncode == 1
    assert ('Cell "reader": spec.mounts[0].hostPath: ' in refused.stderr
            and "which cell writer mounts read-write" in refused.stderr)
    assert cli("apply", "-f", str(cell_file("writer", src, True))).returncode == 0
    assert cli("apply", "-f", str(cell_file("reader", src / "sub", True))).returncode == 0


def test_the_shared_path_check_runs_under_the_write_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A concurrent apply may record a sharing cell between the check and the write."""
    from devcell.errors import ManifestError
    from devcell.manifests import loader
    from devcell.store import objects
    from devcell.store.db import open_database

    src = tmp_path / "src"
    src.mkdir()
    db = open_database(tmp_path / "state")
    write(db.state_dir / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                         f"security:\n  allowedHostPaths: [{src}]\n")

    def manifest(name: str, read_only: bool) -> list[object]:
        path = tmp_path / f"{name}.yaml"
        path.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
                        f"metadata: {{name: {name}}}\nspec:\n  backend: fake\n  mounts:\n"
                        f"    - {{hostPath: {src}, mountPath: /m, readOnly: "
                        f"{str(read_only).lower()}}}\n")
        return list(loader.read_sources([str(path)]))

    admission.apply(db, manifest("writer", False))  # type: ignore[arg-type]
    real = objects.cells_with_host_mounts
    locked: list[bool] = []

    def watched(conn: object) -> dict[str, dict[str, object]]:
        locked.append(bool(conn.in_transaction))  # type: ignore[attr-defined]
        return real(conn)  # type: ignore[arg-type]

    monkeypatch.setattr(objects, "cells_with_host_mounts", watched)
    with pytest.raises(ManifestError, match="which cell writer mounts read-write"):
        admission.apply(db, manifest("reader", True))  # type: ignore[arg-type]
    assert locked == [True]  # checked inside the write transaction, so nothing can slip in
    assert [r[0] for r in db.conn.execute("SELECT name FROM cells")] == ["writer"]
    db.close()


def test_image_timeouts_default_and_can_be_set(tmp_path: Path) -> None:
    assert config.load(tmp_path).images == config.ImageSettings(120.0, 600.0)
    write(tmp_path / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                    "images:\n  pullIdleTimeoutSeconds: 5\n"
                                    "  buildIdleTimeoutSeconds: 7\n")
    assert config.load(tmp_path).images == config.ImageSettings(5.0, 7.0)
    write(tmp_path / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                    "images:\n  pullIdleTimeoutSeconds: 0\n")
    with pytest.raises(ConfigError) as caught:
        config.load(tmp_path)
    assert "line 4" in str(caught.value) or ":4" in str(caught.value)


def test_a_cluster_is_a_unix_socket_and_absent_by_default(tmp_path: Path) -> None:
    assert config.load(tmp_path).cluster is None  # single-host: the default
    write(tmp_path / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                    "cluster:\n  engine: unix:///run/manager.sock\n")
    settings = config.load(tmp_path).cluster
    assert settings is not None and settings.socket == "/run/manager.sock"
    for engine, words in [("tcp://10.0.0.1:2375", "is not a unix socket address"),
                          ("unix://relative.sock", "is not a unix socket address"),
                          ("", "is not a unix socket address")]:
        write(tmp_path / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                        f"cluster:\n  engine: '{engine}'\n")
        with pytest.raises(ConfigError) as caught:
            config.load(tmp_path)
        assert str(caught.value).startswith(f"{tmp_path}/config.yaml:4:11: cluster.engine: ")
        assert words in str(caught.value)
    write(tmp_path / "config.yaml", "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                    "cluster: {}\n")
    with pytest.raises(ConfigError, match='missing required field "engine"'):
        config.load(tmp_path)
