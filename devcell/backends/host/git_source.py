"""A workspace's git source (`spec.workspace.source.git`), cloned on the host by the host's
git into the directory a new workspace is being made in.

git itself speaks to the remote, with the host's configuration: credential helpers, ssh keys
and agents carry any credential, so none is ever in a manifest, the database, a log or an
event (a URL holding a password is refused at admission). git never prompts (no terminal,
GIT_TERMINAL_PROMPT=0, ssh in batch mode), runs under a deadline, and never hard-links a local
repository's objects into the workspace (a cell could otherwise rewrite the host's objects
through the shared inodes). Submodules are not fetched and no hook runs. A failed clone says
why in a word a user acts on (not found, access denied, unreachable, no such ref) with git's
last line, escaped; the caller removes what was being made, so no half-made workspace stays.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell import names, progress
from devcell.backends.host import children, git_progress, removal, temporaries
from devcell.errors import BackendError, BackendRefused

CLONE_SECONDS = 600.0
ALLOWED_PROTOCOLS = "file:git:ssh:http:https"
"""GIT_ALLOW_PROTOCOL: what git may speak, whatever URL reaches it (no `ext::`, `fd::` or
other remote helper)."""
_SHA = re.compile(r"[0-9a-fA-F]{7,40}")
_USERINFO = re.compile(r"^([a-z]+://)[^/@]*@")
_CAUSES = (
    (re.compile(r"host key verification failed|no .*host key is known", re.I),
     "the server's ssh host key is not known to this host (add it to the known_hosts of "
     "the user DevCell runs as, e.g. with ssh-keyscan, after checking its fingerprint)"),
    (re.compile(r"repository not exported", re.I),  # git daemon does not say which
     "the repository was not found (or the server does not export it)"),
    (re.compile(r"not found|does not appear to be a git repository|does not exist|"
                r"no such file", re.I), "the repository was not found"),
    (re.compile(r"authentication failed|permission denied|could not read username|"
                r"access denied|error: 403", re.I), "access was denied (check the host's git "
                                             "credentials or ssh key)"),
    (re.compile(r"could not resolve|connection refused|timed out|unreachable|"
                r"connection reset|network|failed to connect|couldn't connect", re.I),
     "the remote could not be reached"),
)


@dataclass(frozen=True)
class GitSource:
    url: str
    ref: str | None
    depth: int | None
    host_credentials: bool = True
    """Whether git may use the host's credentials (its configuration's credential helpers,
    ssh keys and agent, .netrc): only for a cell of the state directory's owner. A cell
    another user sent through the API is cloned as nobody in particular, so a developer
    cannot clone with the daemon's keys what only its owner may read (host_credentials)."""

    @property
    def shown(self) -> str:
        """The URL as printed: any user part left out (admission refuses credentials in a
        URL; this keeps one that reached here out of every message anyway)."""
        url = _USERINFO.sub(r"\1…@", self.url)
        return names.printable(url) + (f" at {names.printable(self.ref)}" if self.ref else "")


def of_spec(spec: dict[str, Any], *, host_credentials: bool = True) -> GitSource | None:
    """The git source a cell's spec gives its new workspace (None: none, or a fork)."""
    workspace = spec.get("workspace") or {}
    git = (workspace.get("source") or {}).get("git")
    if git is None or workspace.get("from") is not None:
        return None
    depth = git.get("depth")
    return GitSource(str(git["url"]), git.get("ref"), int(depth) if depth else None,
                     host_credentials)


def host_credentials(owner: str | None, state_dir: Path, shared_with: Any = None) -> bool:
    """Whether a cell of `owner` (shared with the users its spec.sharedWith names) clones with
    the host's git credentials: only the state directory's owner's (the daemon runs as them;
    None: a cell recorded before owners were), and only when shared with nobody else, since a
    developer a cell is shared with may change its spec's git URLs (policy developer-shared)."""
    from devcell.store import actor

    host = actor.local_user(state_dir)
    if owner is not None and owner != host:
        return False
    if shared_with is None:
        return True
    return isinstance(shared_with, list) and all(u == host for u in shared_with)


_NO_CREDENTIALS = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
    # no Negotiate (Kerberos) answer to a server's 401 without a user and password
    "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.emptyAuth",
    "GIT_CONFIG_VALUE_0": "false", "KRB5_CONFIG": "/dev/null",
    # no configuration file (the user's or the system's), no agent, no key of the user's:
    # ssh finds keys in the account's home, whatever HOME says
    "GIT_SSH_COMMAND": "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes "
                       "-o IdentityAgent=none -o IdentityFile=/dev/null "
                       "-o GSSAPIAuthentication=no -o HostbasedAuthentication=no",
}
"""What git runs with for a cell whose owner is not the host's user (HOME and XDG_CONFIG_HOME
an empty directory too, for .netrc and the user's configuration; the Kerberos ticket cache
and client keytab files in it that do not exist), beside the _KEPT part of the daemon's
environment and nothing else of it (a client certificate's GIT_SSL_CERT, a trace printing
the headers sent, an agent under another name are never passed on)."""
_KEPT = frozenset({
    "PATH", "LANG", "TZ", "TMPDIR", "GIT_EXEC_PATH",
    # where the daemon's network goes out, and whom it trusts: no credential of a user's
    "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "GIT_SSL_NO_VERIFY",
})
"""The daemon's environment variables git runs with for another user's cell (an allowlist:
whatever else the daemon's environment holds may be a credential); a proxy's user and
password are left out of its URL (_PROXY_USER): the daemon's network, not its identity."""
_PROXY_USER = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*://)?)[^/]*@")


def local_path(url: str) -> str | None:
    """The path of a repository on this host (a path or a file:// URL); None for a remote."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    return rest if scheme == "file" else None


def checked(source: GitSource, state_dir: Path) -> GitSource:
    """`source` as it may be cloned now: a repository on this host is judged again by the
    host-path rules (a directory swapped for a link since admission is refused) and cloned
    from the path it resolves to, so no link can move between the check and the clone."""
    path = local_path(source.url)
    if path is None:
        return source
    from devcell import config, security

    problem = security.host_path_problem(path.rstrip("/") or "/",
                                         config.load(state_dir).security, state_dir)
    if problem:
        raise BackendRefused(f"cloning {source.shown}: {problem}")
    return dataclasses.replace(source, url=os.path.realpath(path))


def clone(source: GitSource, into: Path) -> None:
    """Clone `source` into `into` (which must not exist), checked out at its ref: a branch
    or tag of that name first; a ref that looks like a commit and is none, as a commit (a
    full clone, then that commit checked out detached). A failed clone leaves no `into`."""
    if os.path.lexists(into):
        raise BackendError(f"cloning {source.shown}: {names.printable(str(into))} exists")
    local = local_path(source.url)
    copy = None if local is None else into.parent / temporaries.temp_name("git-source")
    try:
        if copy is None:
            _clone(source, into)
        else:
            # A repository on this host is cloned from a host-only copy of its git directory
            # (see _copy_repository), never from the path a cell may be rewriting.
            _copy_repository(Path(str(local)), copy, source)
            _clone(source, into, url=str(copy))
            _git(["git", "-C", str(into), "config", "remote.origin.url", source.url], source)
    except BaseException:
        removal.remove_quietly(into)
        raise
    finally:
        if copy is not None:
            removal.remove_quietly(copy)


def _clone(source: GitSource, into: Path, *, url: str | None = None) -> None:
    # -c before the verb: for this run only, never written into the workspace's config.
    # On a terminal (a progress reporter installed) git's progress is shown as it clones.
    # From DevCell's own copy (`url`) hard links are fine: the copy is removed afterwards.
    shown = f"cloning {source.shown}" if progress.active() else None
    argv = ["git", "-c", "core.hooksPath=/dev/null", "clone",
            "--progress" if shown else "--quiet", *([] if url else ["--no-hardlinks"])]
    named = [*(["--branch", source.ref, "--single-branch"] if source.ref else []),
             *(["--depth", str(source.depth)] if source.depth else [])]
    try:
        _git([*argv, *named, "--", url or source.url, str(into)], source, shown=shown,
             room=into.parent)
        return
    except NoSuchRef:
        if source.ref is None or _SHA.fullmatch(source.ref) is None:
            raise
    _git([*argv, "--", url or source.url, str(into)], source, shown=shown, room=into.parent)
    found = _git(["git", "-C", str(into), "rev-parse", "--verify", "--quiet",
                  f"{source.ref}^{{commit}}"], source, capture=True).strip()
    _git(["git", "-C", str(into), "-c", "advice.detachedHead=false", "checkout", "--quiet",
          "--detach", found, "--"], source, room=into)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAX_REPOSITORY_DEPTH = 64
_SWAPPED = "it changed since it was checked (a part of its path is now a link); nothing cloned"
_ELSEWHERE = ("objects/info/alternates", "objects/info/http-alternates", "commondir")
"""Files by which a git directory borrows objects or refs from another path (git would read
that path, whatever the host-path rules say)."""


def _copy_repository(path: Path, dest: Path, source: GitSource) -> None:
    """The git directory of the repository at `path` (its `.git`, or itself when bare)
    copied into `dest` (host-only) through descriptors: no link followed (links, FIFOs and
    devices are left out), the directory opened being the one at the path checked against
    the host-path rules (a component swapped for a link since is refused), and a git
    directory that names another path (`.git` a link or a gitfile, alternates, a common
    directory) refused. git then reads only DevCell's copy, so a cell writing the repository
    (its live folder, a writable mount) cannot point the clone at a host file it may not
    read, at check time or while git runs."""
    def refused(why: str) -> BackendRefused:
        return BackendRefused(f"cloning {source.shown}: {why}")

    try:
        top = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        raise refused("the repository was not found") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):  # O_DIRECTORY: ENOTDIR
            raise refused(_SWAPPED) from None
        raise refused(f"the repository cannot be opened ({exc.strerror})") from None
    try:
        if os.readlink(f"/proc/self/fd/{top}") != os.path.normpath(os.path.abspath(path)):
            raise refused(_SWAPPED)
        try:
            dotgit = os.stat(".git", dir_fd=top, follow_symlinks=False).st_mode
        except FileNotFoundError:
            dotgit = None
        if dotgit is not None and not stat.S_ISDIR(dotgit):
            raise refused("its .git is a link or a file naming a repository elsewhere (a "
                          "worktree or a submodule); clone the repository itself")
        gitdir = os.open(".git", _DIR_FLAGS, dir_fd=top) if dotgit else os.dup(top)
    finally:
        os.close(top)
    try:
        for name, kind in (("HEAD", stat.S_ISREG), ("objects", stat.S_ISDIR)):
            try:
                mode = os.stat(name, dir_fd=gitdir, follow_symlinks=False).st_mode
            except FileNotFoundError:
                raise refused("the repository was not found (no .git here, and no HEAD "
                              "and objects of a bare repository)") from None
            if not kind(mode):
                raise refused(f"its git directory's {name} is a link or not what git "
                              "makes; clone a repository whose git directory is its own")
        os.mkdir(dest, 0o700)
        _copy_dir(gitdir, dest, 0, refused)
    finally:
        os.close(gitdir)
    for borrowed in _ELSEWHERE:
        if os.path.lexists(dest / borrowed):
            raise refused(f"its git directory has {borrowed}, which makes git read another "
                          "path; clone a repository that holds its own objects (git repack "
                          "-a -d, then remove the file)")


def _copy_dir(src: int, dest: Path, depth: int,
              refused: Callable[[str], BackendRefused]) -> None:
    if depth > MAX_REPOSITORY_DEPTH:
        raise refused(f"its git directory is over {MAX_REPOSITORY_DEPTH} levels deep")
    with os.scandir(src) as listing:
        entries = [(e.name, e.stat(follow_symlinks=False)) for e in listing]
    for name, seen in entries:
        if depth == 0 and name == "hooks":
            continue  # never run, never needed by a clone
        if stat.S_ISDIR(seen.st_mode):
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=src)
            except OSError:
                raise refused(f"{names.printable(name)} changed while it was copied") from None
            try:
                os.mkdir(dest / name, 0o700)
                _copy_dir(child, dest / name, depth + 1, refused)
            finally:
                os.close(child)
        elif stat.S_ISREG(seen.st_mode):
            _copy_file(src, name, dest / name, refused)


def _copy_file(src: int, name: str, dest: Path,
               refused: Callable[[str], BackendRefused]) -> None:
    try:
        fd_in = os.open(name, _FILE_FLAGS, dir_fd=src)
    except OSError:
        raise refused(f"{names.printable(name)} changed while it was copied") from None
    try:
        st = os.fstat(fd_in)
        size = st.st_size
        if not stat.S_ISREG(st.st_mode):
            raise refused(f"{names.printable(name)} changed while it was copied")
        room = os.statvfs(dest.parent)
        if size > room.f_bavail * room.f_frsize - DISK_RESERVE:  # a sparse file's claim too
            raise refused(f"{names.printable(name)} of its git directory ({size} bytes) "
                          f"would leave less than {DISK_RESERVE // 2**20} MiB free on the "
                          "state directory's disk")
        fd_out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        try:
            offset = 0
            while offset < size:
                sent = os.sendfile(fd_out, fd_in, offset, min(size - offset, 2**30))
                if sent == 0:
                    break  # shrank meanwhile: git finds what is missing
                offset += sent
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def head(into: Path, source: GitSource) -> str:
    """The commit a clone made by `clone` has checked out."""
    return _git(["git", "-C", str(into), "rev-parse", "--verify", "HEAD^{commit}"], source,
                capture=True).strip()


class NoSuchRef(BackendRefused):
    """The ref names no branch, tag or commit of the repository."""


DISK_RESERVE = 256 * 2**20
"""Free bytes a clone leaves on the file system it writes (as an import does): a server
sending an endless pack stops there, not at a full disk."""


def _disk_watch(where: Path) -> Callable[[], str | None]:
    """Why git writing on `where`'s file system must stop (None: it may go on)."""

    def watch() -> str | None:
        try:
            found = os.statvfs(where)
        except OSError:
            return None
        if found.f_bavail * found.f_frsize >= DISK_RESERVE:
            return None
        return (f"it was stopped with less than {DISK_RESERVE // 2**20} MiB left free on the "
                "state directory's disk (the repository is bigger than the room left, or the "
                "server sends no end)")
    return watch


def _git(argv: list[str], source: GitSource, *, capture: bool = False,
         shown: str | None = None, room: Path | None = None) -> str:
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false",
           "SSH_ASKPASS": "/bin/false", "LC_ALL": "C", "GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS,
           "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")}
    if source.host_credentials:
        return _git_run(argv, source, env, capture=capture, shown=shown, room=room)
    import tempfile

    kept = {k: _PROXY_USER.sub(r"\1", v) if k.lower().endswith("_proxy") else v
            for k, v in os.environ.items() if k in _KEPT}
    with tempfile.TemporaryDirectory(prefix="devcell-git-home-") as home:
        return _git_run(argv, source, {
            **kept, **env, **_NO_CREDENTIALS, "HOME": home, "XDG_CONFIG_HOME": home,
            "KRB5CCNAME": f"FILE:{home}/krb5cc", "KRB5_CLIENT_KTNAME": f"FILE:{home}/keytab"},
            capture=capture, shown=shown, room=room, inherit=False)


def _git_run(argv: list[str], source: GitSource, env: dict[str, str], *, capture: bool,
             shown: str | None, room: Path | None, inherit: bool = True) -> str:
    try:
        watch = _disk_watch(room) if room is not None else None
        if shown is None:
            done = children.run_bounded(argv, env=env, timeout=CLONE_SECONDS, watch=watch,
                                        inherit=inherit)
        else:
            done = git_progress.run(argv, env=env, timeout=CLONE_SECONDS, description=shown,
                                    watch=watch, inherit=inherit)
    except FileNotFoundError:
        raise BackendError("git is not installed on this host; install it "
                           "(apt-get install -y git)") from None
    except children.Stopped as exc:
        raise BackendError(f"cloning {source.shown}: {exc}") from None
    except children.TimeoutExpired:
        raise BackendError(f"cloning {source.shown} took over {CLONE_SECONDS:.0f} s; it was "
                           "stopped") from None
    if done.returncode == 0:
        return done.stdout.decode("utf-8", "replace") if capture else ""
    stderr = done.stderr.decode("utf-8", "replace")
    said = [line for line in stderr.strip().splitlines() if line.strip()]
    if capture and not said and done.returncode > 0:  # rev-parse --quiet: no such commit
        raise NoSuchRef(f"cloning {source.shown}: the ref {names.printable(str(source.ref))} "
                        "is not in the repository")
    if source.ref and re.search(r"remote branch .* not found|did not match any|"
                                r"reference is not a tree|not our ref|unknown revision|"
                                r"invalid reference",
                                stderr, re.I | re.S):
        raise NoSuchRef(f"cloning {source.shown}: the ref {names.printable(source.ref)} "
                        f"is not in the repository (git: {_shown_line(said, done.returncode)})")
    for pattern, why in _CAUSES:
        if pattern.search(stderr):
            cause = BackendRefused if "reached" not in why else BackendError
            if not source.host_credentials and ("denied" in why or "not found" in why):
                why = (f"{why}; the cell is another user's, or shared with one, so it is "
                       "cloned without the host's git credentials (a private repository "
                       "answers as not found or denied): use a repository anyone may read, "
                       "or have the state directory's owner make the cell and share it "
                       "with nobody")
            shown = _shown_line(said, done.returncode, pattern)
            raise cause(f"cloning {source.shown}: {why} (git: {shown})")
    raise BackendError(f"cloning {source.shown} failed (git: "
                       f"{_shown_line(said, done.returncode)})")


def _shown_line(said: list[str], returncode: int, cause: re.Pattern[str] | None = None) -> str:
    """git's line that says why, printable and without a URL's user and password: the one
    the cause was read from (ssh's "Host key verification failed." comes before git's
    fatal: line), else the first fatal: or error: line, else the last; with no words, how
    git ended (a signal by name)."""
    line = next((ln for ln in said if cause is not None and cause.search(ln)), None) \
        or next((ln for ln in said if ln.startswith(("fatal:", "error:"))), None) \
        or (said[-1] if said else None)
    if line is None:
        if returncode < 0:
            import signal

            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = "an unknown signal"
            return f"git was killed by signal {-returncode} ({name})"
        return f"git exited {returncode}"
    return names.printable(_USERINFO.sub(r"\1…@", line)[-300:])


_SCP_LIKE = re.compile(r"^(?:([A-Za-z0-9._-]{1,64})@)?([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(.*)$")


def as_clone_url(remote: str) -> tuple[str, bool]:
    """A remote as a git source's url may name it, and whether credentials were taken out:
    scp-like `git@host:org/repo.git` becomes `ssh://git@host/org/repo.git` (the form the
    forges document; a server whose path is relative to a home needs `/~/` written in);
    any user part of an http(s) URL,
    and a password (or token) of any URL, is removed, since git's credential helpers and ssh
    keys carry credentials and a manifest never does (security.py refuses them)."""
    scheme, sep, rest = remote.partition("://")
    if not sep:
        scp = _SCP_LIKE.fullmatch(remote) if not remote.startswith(("/", ".")) else None
        if scp is None or "/" in scp.group(2):
            return remote, False  # a path on this host
        user, host, path = scp.groups()
        path = path if path.startswith("/") else "/" + path
        return f"ssh://{user + '@' if user else ''}{host}{path}", False
    authority, slash, tail = rest.partition("/")
    userinfo, at, hostport = authority.rpartition("@")
    if not at:
        return remote, False
    keep = scheme.lower() in ("ssh", "git") and _PLAIN_USER.fullmatch(userinfo) is not None
    if keep:
        return remote, False
    return f"{scheme}://{hostport}{slash}{tail}", True


_PLAIN_USER = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""The user of an ssh URL (`ssh://git@host/...`): a name, never a secret's shape (as
security.py judges a git source's URL)."""
