"""Cloning a workspace's git source (backends/host/git_source.py) with the real git: from a
local bare repository and from git servers on 127.0.0.1 (git daemon, git-http-backend), at
a branch, a tag or a commit, shallow or not; a bad URL or ref refused with why and nothing
left; never a hard link into the host's repository."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.host import git_source
from devcell.backends.host.git_source import GitSource
from devcell.errors import BackendError, BackendRefused
from tests import git_servers

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                                   GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")).stdout


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare repository: main (two commits: v1 then v2), tag t1 at v1, branch other."""
    work = tmp_path_factory.mktemp("work")
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "app.py").write_text("v1\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    _git("tag", "t1", cwd=work)
    (work / "app.py").write_text("v2\n")
    (work / "dir").mkdir()
    (work / "dir" / "x").write_text("x\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "two", cwd=work)
    _git("branch", "other", "t1", cwd=work)
    bare = tmp_path_factory.mktemp("repo") / "project.git"
    _git("clone", "-q", "--bare", str(work), str(bare))
    return bare


def test_a_local_repository_is_cloned_at_its_head_and_shares_no_inode(
        bare: Path, tmp_path: Path) -> None:
    into = tmp_path / "ws"
    git_source.clone(GitSource(str(bare), None, None), into)
    assert (into / "app.py").read_text() == "v2\n" and (into / "dir" / "x").exists()
    host_inodes = {os.stat(p).st_ino for p in bare.rglob("*") if p.is_file()}
    assert not host_inodes & {os.stat(p).st_ino for p in (into / ".git").rglob("*")
                              if p.is_file()}  # a cell never writes the host's objects


@pytest.mark.parametrize(("ref", "content"), [("t1", "v1\n"), ("other", "v1\n"),
                                              ("main", "v2\n")])
def test_a_branch_or_tag_is_checked_out(bare: Path, tmp_path: Path, ref: str,
                                        content: str) -> None:
    git_source.clone(GitSource(f"file://{bare}", ref, 1), tmp_path / "ws")
    assert (tmp_path / "ws" / "app.py").read_text() == content


def test_a_commit_is_checked_out(bare: Path, tmp_path: Path) -> None:
    first = _git("rev-list", "--max-parents=0", "main", cwd=bare).strip()
    git_source.clone(GitSource(str(bare), first[:12], None), tmp_path / "ws")
    assert (tmp_path / "ws" / "app.py").read_text() == "v1\n"


def test_a_missing_repository_or_ref_is_refused_with_why(bare: Path, tmp_path: Path) -> None:
    with pytest.raises(BackendRefused, match="the repository was not found"):
        git_source.clone(GitSource(str(tmp_path / "nope.git"), None, None), tmp_path / "a")
    with pytest.raises(BackendRefused, match="the ref nosuch is not in the repository"):
        git_source.clone(GitSource(str(bare), "nosuch", None), tmp_path / "b")
    with pytest.raises(BackendRefused, match="the ref deadbeef1234 is not in the repository"):
        git_source.clone(GitSource(str(bare), "deadbeef1234", None), tmp_path / "c")
    assert list(tmp_path.iterdir()) == []  # a commit's full clone is removed too


def test_an_unreachable_remote_is_a_retryable_error(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BackendError, match="could not be reached") as raised:
        git_source.clone(GitSource(f"http://127.0.0.1:{port}/x.git", None, None), tmp_path / "a")
    assert not isinstance(raised.value, BackendRefused)


@pytest.fixture(params=["git-daemon", "git-http-backend"])
def server(request: pytest.FixtureRequest, bare: Path) -> Iterator[str]:
    """The bare repository's URL on a git server on 127.0.0.1: `git daemon` (git://) or
    git-http-backend behind an HTTP server (smart http://)."""
    serve = git_servers.git_daemon if request.param == "git-daemon" else git_servers.git_http
    with serve(bare.parent) as base:
        yield f"{base}/{bare.name}"


def test_a_git_server_on_loopback_is_cloned_with_and_without_a_ref(
        server: str, tmp_path: Path) -> None:
    git_source.clone(GitSource(server, None, None), tmp_path / "head")
    assert (tmp_path / "head" / "app.py").read_text() == "v2\n"
    assert (tmp_path / "head" / "dir" / "x").read_text() == "x\n"
    git_source.clone(GitSource(server, "t1", 1), tmp_path / "tag")
    assert (tmp_path / "tag" / "app.py").read_text() == "v1\n"
    git_source.clone(GitSource(server, "other", None), tmp_path / "branch")
    assert (tmp_path / "branch" / "app.py").read_text() == "v1\n"


def test_a_bad_ref_or_repository_on_a_server_is_refused_and_leaves_nothing(
        server: str, bare: Path, tmp_path: Path) -> None:
    with pytest.raises(BackendRefused, match="the ref nosuch is not in the repository"):
        git_source.clone(GitSource(server, "nosuch", 1), tmp_path / "ref")
    first = _git("rev-list", "--max-parents=0", "main", cwd=bare).strip()
    missing = "0" * 12 if not first.startswith("0" * 12) else "f" * 12
    with pytest.raises(BackendRefused, match=f"the ref {missing} is not in the repository"):
        git_source.clone(GitSource(server, missing, None), tmp_path / "commit")
    with pytest.raises(BackendRefused, match="the repository was not found"):
        git_source.clone(GitSource(server.rsplit("/", 1)[0] + "/nope.git", None, None),
                         tmp_path / "repo")
    assert list(tmp_path.iterdir()) == []  # nothing half-made stays behind


@pytest.mark.parametrize("scheme", ["git", "http"])
def test_an_unreachable_server_is_retryable_and_leaves_nothing(scheme: str,
                                                                tmp_path: Path) -> None:
    url = f"{scheme}://127.0.0.1:{git_servers.free_port()}/project.git"
    with pytest.raises(BackendError, match="the remote could not be reached") as raised:
        git_source.clone(GitSource(url, "main", 1), tmp_path / "ws")
    assert not isinstance(raised.value, BackendRefused)  # the next reconcile tries again
    assert list(tmp_path.iterdir()) == []


def test_a_clone_never_lands_on_what_exists(bare: Path, tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "mine").write_text("kept\n")
    with pytest.raises(BackendError, match="exists"):
        git_source.clone(GitSource(str(bare), None, None), tmp_path / "ws")
    assert (tmp_path / "ws" / "mine").read_text() == "kept\n"


def test_a_branch_that_looks_like_a_commit_is_a_branch(bare: Path, tmp_path: Path) -> None:
    _git("branch", "deadbeef", "t1", cwd=bare)
    git_source.clone(GitSource(str(bare), "deadbeef", 1), tmp_path / "ws")
    assert (tmp_path / "ws" / "app.py").read_text() == "v1\n"
    first = _git("rev-list", "--max-parents=0", "main", cwd=bare).strip()
    git_source.clone(GitSource(str(bare), first[:10].upper(), None), tmp_path / "upper")
    assert (tmp_path / "upper" / "app.py").read_text() == "v1\n"


def test_no_remote_helper_runs_and_no_setting_stays_in_the_workspace(
        bare: Path, tmp_path: Path) -> None:
    began = time.monotonic()
    with pytest.raises(BackendError):
        git_source.clone(GitSource("fd::0", None, None), tmp_path / "fd")  # blocked on a pipe
    assert time.monotonic() - began < 30
    git_source.clone(GitSource(str(bare), None, None), tmp_path / "ws")
    config = (tmp_path / "ws" / ".git" / "config").read_text()
    assert "hooksPath" not in config and "tagopt" not in config  # the developer's git, as is


def test_a_user_part_of_a_url_is_never_printed(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BackendError) as raised:
        git_source.clone(GitSource(f"http://u:s3cret@127.0.0.1:{port}/x.git", None, None),
                         tmp_path / "a")
    assert "s3cret" not in str(raised.value) and "could not be reached" in str(raised.value)


def test_a_local_repository_is_judged_again_when_it_is_cloned(bare: Path,
                                                              tmp_path: Path) -> None:
    """Allowed at admission, then the allowed directory swapped for a link elsewhere."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (state / "config.yaml").write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                       f"security:\n  allowedHostPaths: ['{allowed}']\n")
    os.chmod(state / "config.yaml", 0o600)
    shutil.copytree(bare, allowed / "p.git")
    source = git_source.checked(GitSource(str(allowed / "p.git"), None, None), state)
    assert source.url == os.path.realpath(allowed / "p.git")
    shutil.rmtree(allowed / "p.git")
    os.symlink(bare, allowed / "p.git")  # now pointing outside the allowed root
    with pytest.raises(BackendRefused, match="outside the host paths"):
        git_source.checked(GitSource(str(allowed / "p.git"), None, None), state)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A repository outside the allowed tree, which no clone may read."""
    repo = tmp_path / "secret"
    repo.mkdir()
    _git("init", "-q", "-b", "main", cwd=repo)
    (repo / "key.txt").write_text("TOPSECRET\n")
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "s", cwd=repo)
    return repo


def _planted(tmp_path: Path, secret: Path) -> dict[str, Path]:
    """Repositories under an allowed folder that a cell writing it could plant: each leads
    git to `secret`, outside it."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "linked").mkdir()
    (allowed / "linked" / ".git").symlink_to(secret / ".git")
    (allowed / "gitfile").mkdir()
    (allowed / "gitfile" / ".git").write_text(f"gitdir: {secret / '.git'}\n")
    borrowing = allowed / "borrowing.git"
    _git("init", "-q", "--bare", str(borrowing))
    (borrowing / "objects" / "info" / "alternates").write_text(f"{secret}/.git/objects\n")
    _git("update-ref", "refs/heads/main", _git("rev-parse", "HEAD", cwd=secret).strip(),
         cwd=borrowing)
    _git("symbolic-ref", "HEAD", "refs/heads/main", cwd=borrowing)
    linked_objects = allowed / "linked-objects.git"
    _git("init", "-q", "--bare", str(linked_objects))
    shutil.rmtree(linked_objects / "objects")
    (linked_objects / "objects").symlink_to(secret / ".git" / "objects")
    return {"a .git link": allowed / "linked", "a gitfile": allowed / "gitfile",
            "alternates": borrowing, "an objects link": linked_objects}


@pytest.mark.parametrize("how", ["a .git link", "a gitfile", "alternates", "an objects link"])
@pytest.mark.parametrize("scheme", ["", "file://"])
def test_a_local_repository_pointing_elsewhere_is_refused_and_nothing_of_it_read(
        secret: Path, tmp_path: Path, how: str, scheme: str) -> None:
    repo = _planted(tmp_path, secret)[how]
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BackendRefused, match=f"cloning {scheme}{repo}: "):
        git_source.clone(GitSource(f"{scheme}{repo}", None, None), out / "ws")
    assert list(out.iterdir()) == []  # no workspace, no copy left


def test_a_path_swapped_for_a_link_after_the_check_is_refused(
        bare: Path, secret: Path, tmp_path: Path) -> None:
    # What checked() resolved and judged is, by the time of the clone, a link elsewhere:
    # the repository's own directory, or a directory on its path.
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "repo").symlink_to(secret)
    (allowed / "sub").symlink_to(secret.parent)
    for checked in (allowed / "repo", allowed / "sub" / secret.name):
        with pytest.raises(BackendRefused, match="changed since it was checked"):
            git_source.clone(GitSource(str(checked), None, None), tmp_path / "ws")
        assert not (tmp_path / "ws").exists()


def test_a_local_clone_records_the_repository_not_devcells_copy(
        bare: Path, tmp_path: Path) -> None:
    git_source.clone(GitSource(str(bare), "main", None), tmp_path / "ws")
    assert _git("config", "remote.origin.url", cwd=tmp_path / "ws").strip() == str(bare)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]
    assert not (tmp_path / "ws" / ".git" / "objects" / "info" / "alternates").exists()


def _flooding_git_daemon(server: socket.socket, total: int) -> None:
    """A git daemon on 127.0.0.1 that advertises a branch, then sends `total` bytes of
    'remote:' messages (side band 2) instead of a pack: what git relays to its stderr."""
    conn, _ = server.accept()
    with conn:
        def pkt(data: bytes) -> bytes:
            return b"%04x" % (len(data) + 4) + data

        conn.recv(65536)  # git-upload-pack /x.git
        sha = b"1" * 40
        conn.sendall(pkt(sha + b" HEAD\0side-band-64k multi_ack_detailed\n")
                     + pkt(sha + b" refs/heads/main\n") + b"0000")
        asked = b""
        while b"done" not in asked:
            got = conn.recv(65536)
            if not got:
                return
            asked += got
        conn.sendall(pkt(b"NAK\n"))
        chunk = pkt(b"\x02" + b"A" * 65000 + b"\n") * 16
        with contextlib.suppress(OSError):
            for _ in range(total // len(chunk)):
                conn.sendall(chunk)


def test_a_server_flooding_gits_messages_costs_the_host_a_constant(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import tracemalloc

    monkeypatch.setattr(git_source, "CLONE_SECONDS", 20.0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        flood = threading.Thread(target=_flooding_git_daemon, args=(server, 256 * 2**20),
                                 daemon=True)
        flood.start()
        tracemalloc.start()
        try:
            with pytest.raises(BackendError) as raised:
                git_source.clone(GitSource(f"git://127.0.0.1:{port}/x.git", None, None),
                                 tmp_path / "ws")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        flood.join(timeout=30)
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB held for git's messages"
    assert len(str(raised.value)) < 1000 and not (tmp_path / "ws").exists()


def test_a_clone_stops_before_it_fills_the_disk(
        server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository bigger than the room left (or a server sending a pack with no end) is
    stopped with the disk's reserve still free, and nothing of it is left."""
    found = os.statvfs(tmp_path)
    monkeypatch.setattr(git_source, "DISK_RESERVE", found.f_bavail * found.f_frsize + 2**30)
    with pytest.raises(BackendError, match="less than .* MiB left free"):
        git_source.clone(GitSource(server, None, None), tmp_path / "ws")
    assert list(tmp_path.iterdir()) == []


def test_a_sparse_file_planted_in_a_local_repository_is_refused_not_copied(
        bare: Path, tmp_path: Path) -> None:
    """A cell writing the folder plants a file claiming more than the disk holds: copying
    it (sendfile writes the holes) would fill the state directory's disk."""
    repo = tmp_path / "repo.git"
    shutil.copytree(bare, repo)
    found = os.statvfs(tmp_path)
    with open(repo / "objects" / "huge", "wb") as planted:
        planted.truncate(found.f_blocks * found.f_frsize + 2**30)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BackendRefused, match="huge of its git directory"):
        git_source.clone(GitSource(str(repo), None, None), out / "ws")
    assert list(out.iterdir()) == []


def test_a_cell_of_another_user_is_cloned_without_the_hosts_credentials(
        bare: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's user keeps a private repository's password in a credential helper, and the
    daemon runs as them: a cell the host's user makes clones it; one another user sent through
    the API (host_credentials False) is refused access, as it would be anywhere else, and
    says why (found reviewing issue 27: a developer cloned with the daemon's credentials)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    with git_servers.git_http(bare.parent, basic="owner:s3cret") as base:
        url = f"{base}/{bare.name}"
        (home / ".git-credentials").write_text(f"http://owner:s3cret@{base[len('http://'):]}\n")
        (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")
        git_source.clone(GitSource(url, None, None), tmp_path / "owners")
        assert (tmp_path / "owners" / "app.py").read_text() == "v2\n"
        with pytest.raises(BackendRefused, match="cloned without the host's git credentials"):
            git_source.clone(GitSource(url, None, None, host_credentials=False),
                             tmp_path / "others")
        assert not (tmp_path / "others").exists()
        # .netrc (which git's curl reads from HOME) is not the other user's either
        (home / ".gitconfig").unlink()
        (home / ".netrc").write_text("machine 127.0.0.1 login owner password s3cret\n")
        os.chmod(home / ".netrc", 0o600)
        git_source.clone(GitSource(url, None, None), tmp_path / "netrc")
        with pytest.raises(BackendRefused, match="access was denied"):
            git_source.clone(GitSource(url, None, None, host_credentials=False),
                             tmp_path / "others")


def test_only_the_state_directorys_owner_clones_with_the_hosts_credentials(
        tmp_path: Path) -> None:
    from devcell.store import actor

    assert git_source.host_credentials(None, tmp_path)
    assert git_source.host_credentials(actor.local_user(tmp_path), tmp_path)
    assert not git_source.host_credentials("ana", tmp_path)
    # a developer an owner's cell is shared with may change its git URLs (developer-shared)
    host = actor.local_user(tmp_path)
    assert not git_source.host_credentials(host, tmp_path, ["ana"])
    assert not git_source.host_credentials(None, tmp_path, [host, "ana"])
    assert not git_source.host_credentials(host, tmp_path, "ana")  # malformed: not trusted
    assert git_source.host_credentials(host, tmp_path, [host])
    assert git_source.host_credentials(host, tmp_path, [])


def test_a_cell_of_another_user_runs_git_with_nothing_of_the_daemons_environment_but_the_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's environment may carry credentials git or its libraries read from there:
    a TLS client certificate (GIT_SSL_CERT, GIT_SSL_KEY), a Kerberos ticket cache (KRB5CCNAME;
    the default one at /tmp/krb5cc_UID is kept away too), a proxy command, a trace that would
    print the headers sent. Another user's cell runs git with only what a clone needs of it
    (found by attack-git: the blocklist let these through)."""
    for name, value in {"GIT_SSL_CERT": "/h/cert.pem", "GIT_SSL_KEY": "/h/key.pem",
                        "GIT_SSL_CERT_PASSWORD_PROTECTED": "1", "KRB5CCNAME": "FILE:/h/cc",
                        "GIT_PROXY_COMMAND": "/h/proxy", "GIT_CURL_VERBOSE": "1",
                        "GIT_TRACE_CURL": "1", "GIT_SSH": "/h/ssh", "GIT_SSH_VARIANT": "ssh",
                        "SOME_TOKEN": "s3cret", "LC_TIME": "C", "https_proxy": "http://u:p@ss@p:3128",
                        "HTTP_PROXY": "http://owner:pw@p:3128", "all_proxy": "u:pw@p:1080"
                        }.items():
        monkeypatch.setenv(name, value)
    source = GitSource("https://example.invalid/r.git", None, None, host_credentials=False)
    seen = dict(line.split("=", 1) for line in git_source._git(
        ["env"], source, capture=True).splitlines() if "=" in line)
    for name in ("GIT_SSL_CERT", "GIT_SSL_KEY", "GIT_SSL_CERT_PASSWORD_PROTECTED",
                 "GIT_PROXY_COMMAND", "GIT_CURL_VERBOSE", "GIT_TRACE_CURL", "GIT_SSH",
                 "GIT_SSH_VARIANT", "SOME_TOKEN"):
        assert name not in seen, name
    assert "/h/" not in seen.get("KRB5CCNAME", "") and seen["KRB5_CONFIG"] == "/dev/null"
    assert seen["PATH"] == os.environ["PATH"] and seen["LC_ALL"] == "C"
    # the network the daemon reaches is kept, not its user and password at the proxy
    assert seen["https_proxy"] == "http://p:3128"
    assert seen["HTTP_PROXY"] == "http://p:3128" and seen["all_proxy"] == "p:1080"
    assert seen["GIT_CONFIG_KEY_0"] == "http.emptyAuth" and seen["GIT_CONFIG_VALUE_0"] == "false"
    # the same on a terminal, where git's progress is shown (git_progress)
    out = tmp_path / "env"
    git_source._git(["sh", "-c", f"env > {out}"], source, shown="cloning")
    assert "GIT_SSL_CERT" not in out.read_text() and "s3cret" not in out.read_text()
    # the owner's cell keeps the daemon's environment, as the host's own git would
    owners = dict(line.split("=", 1) for line in git_source._git(
        ["env"], dataclasses.replace(source, host_credentials=True), capture=True
    ).splitlines() if "=" in line)
    assert owners["GIT_SSL_CERT"] == "/h/cert.pem"


def _said(source: GitSource, script: str) -> str:
    """What a clone whose git printed (and ended) as `script` does is reported as."""
    with pytest.raises((BackendError, BackendRefused)) as caught:
        git_source._git(["sh", "-c", script], source)
    return str(caught.value)


def test_gits_words_are_read_for_the_cause_a_user_acts_on() -> None:
    """ssh's host key refusal comes before git's fatal: line and is the cause shown; a
    repository not found while cloning without the host's credentials says it may be
    private; a git killed by a signal says which (found by attack-final)."""
    owners = GitSource("ssh://git@example.invalid/r.git", None, None)
    others = dataclasses.replace(owners, host_credentials=False)
    said = _said(owners, "echo 'Host key verification failed.' >&2; "
                         "echo 'fatal: Could not read from remote repository.' >&2; exit 128")
    assert "ssh host key is not known to this host" in said
    assert "(git: Host key verification failed.)" in said
    not_found = "echo 'remote: Repository not found.' >&2; " \
                "echo 'fatal: repository not found' >&2; exit 128"
    assert "without the host's git credentials" in _said(others, not_found)
    assert "credentials" not in _said(owners, not_found)
    assert "the repository was not found (git: remote: Repository not found.)" \
        in _said(owners, not_found)  # the first line the cause was read from
    assert "git was killed by signal 9 (SIGKILL)" in _said(owners, "kill -9 $$")
    assert "failed (git: git exited 3)" in _said(owners, "exit 3")
