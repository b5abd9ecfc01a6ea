"""A container cell whose workspace is the developer's own folder, bound live
(`spec.workspace.source.hostPath`), on the real engine: an edit on either side shows on the
other at once, sleep and start keep the binding, a snapshot copies the folder and a fork of
it gets a workspace of its own, a restore into the folder is refused, and delete, prune and
gc leave the folder and every file in it exactly as they were."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tests.backends.container.support import IMAGE
from tests.conftest import Cli, allow_host_paths


def _manifest(directory: Path, name: str, folder: Path, *, user: str = "") -> Path:
    manifest = directory / f"{name}.yaml"
    manifest.write_text(
        f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}}}\nspec:\n"
        f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
        f"  workspace: {{source: {{hostPath: {{path: '{folder}'}}}}}}\n{user}"
        "  services:\n    - name: idle\n      command: [sleep, '600']\n")
    return manifest




def _project(root: Path, owner: int) -> Path:
    project = root / "app"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('hi')\n")
    (project / "passwd-link").symlink_to("/etc/passwd")
    for path in (project, project / "src", project / "src" / "main.py"):
        os.chown(path, owner, owner, follow_symlinks=False)
    return project


def _tree(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry of the folder: (mode, owner, content digest or link target)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        what = (os.readlink(path) if path.is_symlink() else
                hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir")
        found[str(path.relative_to(folder))] = (st.st_mode, st.st_uid, what)
    return found


def _sh(cli: Cli, cell: str, script: str) -> str:
    done = cli("exec", cell, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_live_folder_is_the_workspace_both_ways_and_is_never_deleted(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    root = tmp_path / "projects"
    project = _project(root, owner=1000)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    manifest = _manifest(manifests, "live", project)
    refused = cli("apply", "-f", str(manifest))
    assert refused.returncode != 0 and "live.yaml:8" in refused.stderr, refused.stderr
    assert "workspace.source.hostPath.path" in refused.stderr
    assert cli("get", "cells", "-o", "name").stdout == ""  # nothing recorded

    allow_host_paths(state, root)
    done = cli("apply", "-f", str(manifests), "--prune")
    assert done.returncode == 0, done.stderr
    assert _sh(cli, "live", "cat /workspace/src/main.py; id -u") == "print('hi')\n1000\n"
    (project / "src" / "main.py").write_text("print('edited on the host')\n")
    assert _sh(cli, "live", "cat /workspace/src/main.py") == "print('edited on the host')\n"
    _sh(cli, "live", "echo from-the-cell > /workspace/out.txt")
    assert (project / "out.txt").read_text() == "from-the-cell\n"
    assert (project / "out.txt").stat().st_uid == 1000  # the developer's, not root's
    as_root = cli("exec", "-u", "0", "live", "--", "touch", "/workspace/rooted")
    assert as_root.returncode != 0 and "other than root" in as_root.stderr, as_root.stderr
    assert not (project / "rooted").exists()
    shown = cli("describe", "cell", "live").stdout
    assert f"{project} (your folder, bound live" in shown, shown

    assert cli("cell", "sleep", "live").returncode == 0
    (project / "while-asleep").write_text("zz\n")
    assert cli("cell", "start", "live").returncode == 0
    assert _sh(cli, "live", "cat /workspace/while-asleep") == "zz\n"

    assert cli("snapshot", "create", "live", "--name", "s1").returncode == 0
    (project / "src" / "main.py").write_text("print('after the snapshot')\n")
    forked = cli("cell", "fork", "live", "--snapshot", "s1", "--name", "forked")
    assert forked.returncode == 0, forked.stderr
    assert _sh(cli, "forked", "cat /workspace/src/main.py; readlink /workspace/passwd-link; "
                              "echo fork > /workspace/out.txt") == \
        "print('edited on the host')\n/etc/passwd\n"
    assert (project / "out.txt").read_text() == "from-the-cell\n"  # the fork's own workspace
    fork_path = cli("describe", "cell", "forked").stdout
    assert str(project) not in fork_path

    before = _tree(project)
    restore = cli("snapshot", "restore", "s1", "--approve")
    assert restore.returncode != 0 and "never overwrites" in restore.stderr, restore.stderr
    assert "Traceback" not in restore.stderr and _tree(project) == before

    deleted = cli("delete", "cell", "live")
    assert deleted.returncode == 0, deleted.stderr + deleted.stdout  # no approval: nothing lost
    assert _tree(project) == before
    assert cli("gc", "--approve").returncode == 0
    assert _tree(project) == before

    again = _manifest(manifests, "again", project)  # live.yaml brings "live" back too
    shared = cli("apply", "-f", str(manifests), "--prune")
    assert shared.returncode != 0 and "only if every one of them" in shared.stderr
    assert "workspace.source.hostPath.path" in shared.stderr
    assert cli("get", "cells", "-o", "name").stdout.split() == ["cell/forked"]
    (manifests / "live.yaml").unlink()
    assert cli("apply", "-f", str(manifests), "--prune").returncode == 0
    assert _sh(cli, "again", "cat /workspace/out.txt") == "from-the-cell\n"
    again.unlink()
    (manifests / "keep.yaml").write_text(  # prune acts only while the directory holds some
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: keep}\n"
        "spec: {backend: fake, image: devcell/busybox:latest}\n")
    pruned = cli("apply", "-f", str(manifests), "--prune")
    assert pruned.returncode == 0, pruned.stderr
    assert "again" not in cli("get", "cells", "-o", "name").stdout
    assert cli("gc", "--approve").returncode == 0
    assert _tree(project) == before


def test_a_live_folder_of_root_is_only_bound_for_a_cell_that_is_not_root(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    """A writable host folder never gets a root cell (it could leave setuid-root programs
    there): spec.user 0 is refused before the container is made, and the path is immutable."""
    root = tmp_path / "projects"
    project = _project(root, owner=0)
    allow_host_paths(state, root)
    manifest = _manifest(tmp_path, "rooted", project, user="  user: '0'\n")
    done = cli("apply", "-f", str(manifest))
    assert done.returncode != 0 and "must not run as root" in done.stdout + done.stderr
    other = root / "other"
    other.mkdir()
    moved = _manifest(tmp_path, "rooted", other, user="  user: '0'\n")
    changed = cli("apply", "-f", str(moved))
    assert changed.returncode != 0 and "immutable" in changed.stderr, changed.stderr
    assert "rooted.yaml:8" in changed.stderr


def test_a_uid_alone_never_runs_in_roots_group_so_no_setgid_root_file_is_left(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    """Given a uid alone (`exec -u 1000`, `spec.user: '1000'`) the engine runs it with gid 0
    when the image has no such user (and with every group /etc/group gives the name when it
    has): a `chmod 2755` then left a setgid-root program in the developer's folder. The gid
    is the uid's own, written out."""
    root = tmp_path / "projects"
    project = _project(root, owner=1000)
    allow_host_paths(state, root)
    for user, name in (("", "live"), ("  user: '1001'\n", "given")):
        done = cli("apply", "-f", str(_manifest(tmp_path, name, project if not user else
                                                 _project(root / "g", owner=1001), user=user)))
        assert done.returncode == 0, done.stderr
    assert _sh(cli, "given", "id -g; id -G") == "1001\n1001\n"
    shown = cli("exec", "-u", "1000", "live", "--", "sh", "-c",
                "id -g; id -G; cp /bin/sh /workspace/sg && chmod 2755 /workspace/sg")
    assert shown.returncode == 0 and shown.stdout == "1000\n1000\n", shown
    st = os.lstat(project / "sg")
    assert st.st_gid == 1000 and st.st_uid == 1000
