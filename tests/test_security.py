"""DevCell's security rules for a Cell spec (the same rules validation and the backend apply)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell import security
from devcell.config import SecurityPolicy
from devcell.security import cell_problems


def problems(spec: dict[str, Any], state: Path, policy: SecurityPolicy | None = None
             ) -> dict[str, str]:
    found = cell_problems(spec, policy or SecurityPolicy(source="cfg"), state)
    return {".".join(str(p) for p in path): message for path, message in found}


def test_the_defaults_pass_a_plain_cell(tmp_path: Path) -> None:
    assert problems({"workspace": {"mountPath": "/workspace"},
                     "network": {"mode": "none"}}, tmp_path) == {}


@pytest.mark.parametrize("path,message", [
    ("/", "would hide or overwrite /,"),
    ("/usr/src", "would hide or overwrite /usr"),
    ("/devcell", "would hide or overwrite /devcell"),
    ("/var/log/devcell/x", "would hide or overwrite /var/log/devcell"),
    ("/work/../etc", "normalised absolute path"),
    ("/work/", "normalised absolute path"),
    ("/a:b", "normalised absolute path"),
])
def test_mount_paths_that_hide_the_system_are_refused(tmp_path: Path, path: str,
                                                      message: str) -> None:
    found = problems({"workspace": {"mountPath": path}}, tmp_path)
    assert message in found["workspace.mountPath"]


def test_host_paths_must_lie_under_an_allowed_root_after_resolving_links(tmp_path: Path) -> None:
    allowed = tmp_path / "src"
    (allowed / "app").mkdir(parents=True)
    (allowed / "sneaky").symlink_to("/etc")
    state = tmp_path / "state"
    policy = SecurityPolicy(allowed_host_paths=(str(allowed),), source="cfg")

    def host(path: str) -> str | None:
        spec = {"mounts": [{"hostPath": path, "mountPath": "/src"}]}
        return problems(spec, state, policy).get("mounts.0.hostPath")

    assert host(str(allowed / "app")) is None
    assert host(str(allowed)) is None
    assert "resolves to /etc" in (host(str(allowed / "sneaky")) or "")
    assert "outside the host paths" in (host("/etc") or "")
    assert "outside the host paths" in (host(str(tmp_path / "srcfoo")) or "")  # not a prefix match
    assert "does not exist" in (host(str(allowed / "missing")) or "")
    assert "normalised" in (host(str(allowed / "app" / ".." / "..")) or "")


def test_a_mount_may_not_expose_the_state_directory(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    policy = SecurityPolicy(allowed_host_paths=("/",), source="cfg")
    for path in (str(tmp_path), str(state), str(state / "volumes")):
        found = problems({"mounts": [{"hostPath": path, "mountPath": "/x"}]}, state, policy)
        assert "would expose DevCell's state directory" in found["mounts.0.hostPath"]


def test_mounts_may_not_nest_or_repeat(tmp_path: Path) -> None:
    spec = {"workspace": {"mountPath": "/workspace"}, "mounts": [
        {"hostPath": "/srv", "mountPath": "/workspace/src"},
        {"hostPath": "/srv", "mountPath": "/data"},
        {"hostPath": "/srv", "mountPath": "/data"}]}
    found = problems(spec, tmp_path, SecurityPolicy(allowed_host_paths=("/srv",)))
    assert "overlaps /workspace (spec.workspace.mountPath)" in found["mounts.0.mountPath"]
    assert "overlaps /data (spec.mounts[1].mountPath)" in found["mounts.2.mountPath"]
    assert "mounts.1.mountPath" not in found


def test_host_network_needs_the_configuration(tmp_path: Path) -> None:
    spec = {"network": {"mode": "host"}}
    assert "off by default" in problems(spec, tmp_path)["network.mode"]
    assert problems(spec, tmp_path, SecurityPolicy(allow_host_network=True)) == {}


@pytest.mark.parametrize("address,allowed,refused", [
    ("127.0.0.1", (), False),
    ("127.0.0.2", (), False),
    ("::1", (), False),
    ("0.0.0.0", (), True),
    ("0.0.0.0", ("0.0.0.0",), False),
    ("192.168.1.5", ("0.0.0.0",), True),
    ("localhost", (), True),
])
def test_published_addresses(tmp_path: Path, address: str, allowed: tuple[str, ...],
                             refused: bool) -> None:
    spec = {"network": {"mode": "bridge", "ports": [{"containerPort": 80, "hostIP": address}]}}
    found = problems(spec, tmp_path, SecurityPolicy(allowed_publish_addresses=allowed))
    assert ("network.ports.0.hostIP" in found) is refused


def test_a_mount_above_a_reserved_path_is_refused(tmp_path: Path) -> None:
    found = problems({"workspace": {"mountPath": "/var"}}, tmp_path)
    assert "would hide or overwrite /var/log/devcell" in found["workspace.mountPath"]
    assert problems({"workspace": {"mountPath": "/var/lib/app"}}, tmp_path) == {}


def test_host_paths_of_one_cell_may_not_nest(tmp_path: Path) -> None:
    (tmp_path / "src" / "a" / "b").mkdir(parents=True)
    spec = {"mounts": [{"hostPath": str(tmp_path / "src" / "a"), "mountPath": "/m1"},
                       {"hostPath": str(tmp_path / "src" / "a" / "b"), "mountPath": "/m2"},
                       {"hostPath": str(tmp_path / "src"), "mountPath": "/m3"}]}
    found = problems(spec, tmp_path / "state",
                     SecurityPolicy(allowed_host_paths=(str(tmp_path / "src"),)))
    assert "overlaps spec.mounts[0].hostPath" in found["mounts.1.hostPath"]
    assert "overlaps spec.mounts[0].hostPath" in found["mounts.2.hostPath"]
    assert "mounts.0.hostPath" not in found


def test_shared_host_directories_must_be_read_only_on_every_side() -> None:
    from devcell.security import shared_mount_problem

    assert shared_mount_problem(("/src/a", True), ("/src", True), "other") is None
    assert "which cell other mounts read-write" in (
        shared_mount_problem(("/src/a", True), ("/src", False), "other") or "")
    assert shared_mount_problem(("/src", False), ("/src/a", True), "other")
    assert shared_mount_problem(("/srv", False), ("/src", False), "other") is None


def _git(url: str, **more: Any) -> dict[str, Any]:
    return {"workspace": {"source": {"git": {"url": url}}, **more}}


@pytest.mark.parametrize("url", ["https://example.com/a.git", "ssh://git@example.com/a.git",
                                 "git://127.0.0.1/a.git", "ssh://deploy.bot@example.com/a"])
def test_a_remote_git_source_needs_no_allowance(tmp_path: Path, url: str) -> None:
    assert problems(_git(url), tmp_path) == {}


@pytest.mark.parametrize("url", ["https://me:secret@example.com/a.git",
                                 "ssh://git:secret@example.com/a.git",
                                 "https://ghp_secret@github.com/o/r",  # a token as the user
                                 "https://u%3Asecret@h/x", "https://u:se/cret@h/x",
                                 "ssh://u%3Asecret@h/x"])
def test_credentials_in_a_git_url_are_refused(tmp_path: Path, url: str) -> None:
    found = problems(_git(url), tmp_path)
    assert "the URL holds credentials" in found["workspace.source.git.url"]
    assert "secret" not in found["workspace.source.git.url"]


@pytest.mark.parametrize("url", ["oauth2:secret@gitlab.example:org/r.git", "me:secret@host",
                                 "secret@host:org/r.git", "file://me:secret@host/r",
                                 "//me:secret@host/r", "/srv/me:secret@host/r"])
def test_a_credential_in_a_url_of_no_transport_is_never_echoed(tmp_path: Path, url: str) -> None:
    found = problems(_git(url), tmp_path)["workspace.source.git.url"]
    assert "secret" not in found and "ssh://host/path" in found


def test_a_repository_on_this_host_follows_the_host_path_rules(tmp_path: Path) -> None:
    repo = tmp_path / "repos" / "p.git"
    repo.mkdir(parents=True)
    for url in (str(repo), f"file://{repo}"):
        assert "off by default" in problems(_git(url), tmp_path / "s")[
            "workspace.source.git.url"]
        allowed = SecurityPolicy(source="cfg", allowed_host_paths=(str(tmp_path / "repos"),))
        assert problems(_git(url), tmp_path / "s", allowed) == {}
    assert "not a git transport" in problems(_git("ftp://x/a.git"), tmp_path)[
        "workspace.source.git.url"]


def test_a_fork_cannot_have_a_source_too(tmp_path: Path) -> None:
    found = problems(_git("https://example.com/a.git", **{"from": {"snapshot": "s"}}), tmp_path)
    assert "not both" in found["workspace.source"]


@pytest.mark.parametrize("url", ["ext::sh -c touch% /tmp/pwned", "host:repo.git",
                                 "-uhelp", "relative/repo", "fd::0", "file:////tmp/x"])
def test_a_git_url_that_is_not_a_transport_or_an_absolute_path_is_refused(
        tmp_path: Path, url: str) -> None:
    """`ext::` runs a command; `-u...` would be an option; neither reaches git."""
    assert problems(_git(url), tmp_path)["workspace.source.git.url"]


def test_a_ref_starting_with_a_dash_is_refused_by_the_schema() -> None:
    import jsonschema

    from devcell.schemas import schema as load_schema

    schema = load_schema("cell")
    ref = schema["properties"]["spec"]["properties"]["workspace"]["properties"]["source"][
        "properties"]["git"]["properties"]["ref"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate("--upload-pack=x", ref)
    jsonschema.validate("release/1.2", ref)


def _directory(path: str, **more: Any) -> dict[str, Any]:
    return {"workspace": {"source": {"directory": {"path": path}}, **more}}


def test_a_directory_source_follows_the_host_path_rules(tmp_path: Path) -> None:
    project = tmp_path / "projects" / "app"
    project.mkdir(parents=True)
    where = "workspace.source.directory.path"
    assert "off by default" in problems(_directory(str(project)), tmp_path / "s")[where]
    allowed = SecurityPolicy(source="cfg", allowed_host_paths=(str(tmp_path / "projects"),))
    assert problems(_directory(str(project)), tmp_path / "s", allowed) == {}
    assert "does not exist" in problems(_directory(str(project / "missing")), tmp_path / "s",
                                         allowed)[where]
    for odd in (f"{project}/../app", f"{tmp_path}//projects/app"):
        assert "normalised" in problems(_directory(odd), tmp_path / "s", allowed)[where]
    (tmp_path / "projects" / "link").symlink_to("/etc")
    assert problems(_directory(str(tmp_path / "projects" / "link")), tmp_path / "s",
                    allowed)[where]  # a link out of the allowed tree is judged where it leads
    fork = _directory(str(project), **{"from": {"snapshot": "s"}})
    assert "not both" in problems(fork, tmp_path / "s", allowed)["workspace.source"]


def _source(key: str, path: str, **more: Any) -> dict[str, Any]:
    return {"workspace": {"source": {key: {"path": path}}, **more}}


@pytest.mark.parametrize("key", ["hostPath", "archive"])
def test_a_live_folder_and_an_archive_follow_the_host_path_rules(tmp_path: Path,
                                                                 key: str) -> None:
    root = tmp_path / "projects"
    (root / "app").mkdir(parents=True)
    (root / "app.tar").write_bytes(b"x")
    target = str(root / ("app" if key == "hostPath" else "app.tar"))
    wrong = str(root / ("app.tar" if key == "hostPath" else "app"))
    where = f"workspace.source.{key}.path"
    assert "off by default" in problems(_source(key, target), tmp_path / "s")[where]
    allowed = SecurityPolicy(source="cfg", allowed_host_paths=(str(root),))
    assert problems(_source(key, target), tmp_path / "s", allowed) == {}
    kind = "a directory" if key == "hostPath" else "a file"
    assert f"is not {kind}" in problems(_source(key, wrong), tmp_path / "s", allowed)[where]
    assert "normalised" in problems(_source(key, f"{root}/../projects/app"), tmp_path / "s",
                                    allowed)[where]
    (root / "out").symlink_to("/etc")
    assert "outside" in problems(_source(key, str(root / "out")), tmp_path / "s",
                                 allowed)[where]  # judged where the link leads
    inside_state = SecurityPolicy(source="cfg", allowed_host_paths=(str(tmp_path),))
    assert "state directory" in problems(_source(key, str(tmp_path / "s")), tmp_path / "s",
                                         inside_state)[where]


def test_a_live_folder_may_not_nest_with_a_host_mount_of_the_same_cell(tmp_path: Path) -> None:
    root = tmp_path / "projects"
    (root / "app" / "data").mkdir(parents=True)
    allowed = SecurityPolicy(source="cfg", allowed_host_paths=(str(root),))
    spec = {**_source("hostPath", str(root / "app")),
            "mounts": [{"hostPath": str(root / "app" / "data"), "mountPath": "/data"}]}
    assert "the workspace folder" in problems(spec, tmp_path / "s", allowed)["mounts.0.hostPath"]


def test_the_host_mounts_of_a_cell_include_its_live_folder_as_writable(tmp_path: Path) -> None:
    from devcell import security

    spec = {**_source("hostPath", str(tmp_path)),
            "mounts": [{"hostPath": "/srv", "mountPath": "/srv", "readOnly": True}]}
    assert security.host_mounts(spec) == [("/srv", True), (str(tmp_path), False)]
    assert security.host_mount_field(spec, 1) == ("workspace", "source", "hostPath", "path")
    fork = _source("hostPath", str(tmp_path), **{"from": {"snapshot": "s"}})
    assert security.host_mounts(fork) == []  # a fork binds no folder (and is refused anyway)


def test_a_vm_cell_refuses_a_live_folder_with_the_fix() -> None:
    from devcell.backends import limits

    spec = _source("hostPath", "/home/dev/app")
    found = dict(limits.cell_problems(spec, "vm"))
    message = found[("spec", "workspace", "source", "hostPath")]
    assert "needs the container backend; use directory: to copy it" in message
    assert dict(limits.cell_problems(spec, "container")) == {}


def test_a_dotfiles_target_in_a_host_folder_the_cell_writes_is_refused(tmp_path: Path) -> None:
    (tmp_path / "src" / "app").mkdir(parents=True)
    policy = SecurityPolicy(allowed_host_paths=(str(tmp_path / "src"),))
    live = {"workspace": {"mountPath": "/code",
                          "source": {"hostPath": {"path": str(tmp_path / "src" / "app")}}},
            "mounts": [{"hostPath": str(tmp_path / "src"), "mountPath": "/ro", "readOnly": True}]}
    for target, refused in (("/code/dots", True), ("/code", True), ("/ro/dots", False),
                            ("/codex", False), ("~/dotfiles", False), ("/x/../code/d", True),
                            ("~/../code", True)):
        found = problems({**live, "dotfiles": {"git": {"url": "https://h/d.git"},
                                               "targetPath": target}}, tmp_path / "s", policy)
        assert ("dotfiles.targetPath" in found) is refused, (target, found)
    mounted = {"mounts": [{"hostPath": str(tmp_path / "src"), "mountPath": "/m"}],
               "dotfiles": {"git": {"url": "https://h/d.git"}, "targetPath": "/m/d"}}
    assert "a host folder the cell writes" in problems(mounted, tmp_path / "s", SecurityPolicy(
        allowed_host_paths=(str(tmp_path / "src"),)))["dotfiles.targetPath"]


def test_volumes_follow_the_mount_rules_and_a_sidecars_data_path_the_system_ones(
        tmp_path: Path) -> None:
    spec = {"workspace": {"mountPath": "/workspace"},
            "mounts": [{"hostPath": "/srv", "mountPath": "/data"}],
            "volumes": [{"name": "a", "mountPath": "/data/cache"},
                        {"name": "b", "mountPath": "/root/.cache"},
                        {"name": "c", "mountPath": "/root/.cache"},
                        {"name": "d", "mountPath": "/usr/cache"}],
            "sidecars": [{"name": "db", "volume": {"mountPath": "/var/lib/db"}},
                         {"name": "x", "volume": {"mountPath": "/proc/x"}}]}
    found = problems(spec, tmp_path, SecurityPolicy(allowed_host_paths=("/srv",)))
    assert "overlaps /data (spec.mounts[0].mountPath)" in found["volumes.0.mountPath"]
    assert "overlaps /root/.cache (spec.volumes[1].mountPath)" in found["volumes.2.mountPath"]
    assert "would hide or overwrite /usr" in found["volumes.3.mountPath"]
    assert "would hide or overwrite /proc" in found["sidecars.1.volume.mountPath"]
    assert set(found) == {"volumes.0.mountPath", "volumes.2.mountPath", "volumes.3.mountPath",
                          "sidecars.1.volume.mountPath"}


def test_a_sidecars_ports_are_the_cells_own_and_need_a_bridge(tmp_path: Path) -> None:
    from devcell import security

    spec: dict[str, Any] = {
        "network": {"mode": "bridge", "ports": [{"containerPort": 80, "hostPort": 8080}]},
        "sidecars": [{"name": "db", "ports": [{"containerPort": 5432, "hostPort": 8080},
                                              {"containerPort": 5433}]}]}
    found = problems(spec, tmp_path)
    assert found == {"sidecars.0.ports.0.hostPort":
                     "127.0.0.1:8080 is already published by spec.network.ports[0]"}
    assert security.published(spec) == [("127.0.0.1", 8080), ("127.0.0.1", 8080),
                                         ("127.0.0.1", 5433)]
    other = {"other": {"network": {"ports": [{"containerPort": 1, "hostPort": 5433}]}}}
    assert [path for path, _ in security.port_clashes(spec, other)] == [
        ("sidecars", 0, "ports", 1, "hostPort")]
    spec["network"]["mode"] = "none"
    assert problems(spec, tmp_path)["sidecars.0.ports"] == (
        "ports are published only with network.mode bridge (mode is none)")


@pytest.mark.parametrize(("path", "allowed"), [
    ("/usr/local/share/kube-localhost", True), ("/usr/local/lib/tool", True),
    ("/usr/local", False), ("/usr", False), ("/usr/bin/tool", False),
    ("/usr/localx/y", False), ("/usr/share/x", False)])
def test_a_mount_may_go_into_usr_local_never_at_it_or_elsewhere_in_usr(
        path: str, allowed: bool) -> None:
    assert (security.mount_path_problem(path) is None) is allowed
