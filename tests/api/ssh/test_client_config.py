"""What `ssh-config` writes and `devcell ssh` runs: the ProxyCommand quoted for the shell and
for ssh_config's % tokens, the state directory's key pinned, each argument of CMD kept."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from devcell.api.ssh import client_config, keys, sessions, tunnels
from devcell.errors import StateError, UsageError


def test_the_block_names_the_proxy_and_pins_the_key(tmp_path: Path) -> None:
    state = tmp_path / "my state %d"
    block = client_config.config_block(["/opt/dc/bin/devcell"], state, "web")
    lines = dict(line.strip().split(" ", 1) for line in block.splitlines()[1:])
    assert block.startswith("Host web.devcell\n")
    proxy = lines["ProxyCommand"]
    assert "%%d" in proxy  # ssh_config would expand a bare %d
    assert shlex.split(proxy.replace("%%", "%")) == [
        "/opt/dc/bin/devcell", "--state-dir", str(state), "ssh-proxy", "web"]
    assert lines["StrictHostKeyChecking"] == "yes"
    assert lines["UserKnownHostsFile"] == f'"{state}/ssh/known_hosts"'
    with pytest.raises(UsageError):
        client_config.config_block(["/bin/devcell"], tmp_path / "a\nProxyCommand x", "web")


def test_ssh_argv_keeps_words_or_takes_one_command_line(tmp_path: Path) -> None:
    many = client_config.ssh_argv(["dc"], tmp_path, "web", tty=False,
                                  command=["printf", "%s", "two words"])
    assert many[:3] == ["ssh", "-F", "/dev/null"]
    assert many[-3:] == ["web.devcell", "--", "printf %s 'two words'"]
    one = client_config.ssh_argv(["dc"], tmp_path, "web", tty=True, command=["ls | wc -l"])
    assert one[-4:] == ["-t", "web.devcell", "--", "ls | wc -l"]


def test_the_host_key_is_made_once_private_and_refused_when_tampered(tmp_path: Path) -> None:
    first = keys.host_key(tmp_path)
    path = tmp_path / "ssh" / keys.KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "ssh").stat().st_mode) == 0o700
    assert keys.host_key(tmp_path).export_public_key() == first.export_public_key()
    known = keys.known_hosts_path(tmp_path).read_text()
    assert known.startswith("*.devcell ssh-ed25519 ")
    os.chmod(path, 0o644)
    with pytest.raises(StateError, match="0600"):
        keys.host_key(tmp_path)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StateError, match="symbolic link"):
        keys.host_key(tmp_path)


def test_sessions_run_the_shell_as_sshd_does_and_filter_the_environment() -> None:
    assert sessions.argv_for("ls -la")[-1] == "ls -la"
    assert sessions.argv_for(None)[:2] == ["/bin/sh", "-c"]
    env = dict(sessions.environment({"LANG": "C.UTF-8", "bad name": "x", "NUL": "a\0b"},
                                    "xterm-256color"))
    assert env == {"LANG": "C.UTF-8", "TERM": "xterm-256color"}


def test_forwards_go_to_the_cells_loopback_only() -> None:
    assert tunnels.loopback("localhost") == "127.0.0.1"
    assert tunnels.loopback("127.0.0.5") == "127.0.0.5"
    assert tunnels.loopback("::1") == "::1"
    for other in ("example.com", "10.0.0.1", "192.168.1.1", "0.0.0.0", "169.254.1.1"):
        assert tunnels.loopback(other) is None


@pytest.mark.parametrize("public", [
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ", "ssh-ed25519 " + "A" * 67,
    "ssh-ed25519 " + "A" * 68 + "\nevil.devcell ssh-ed25519 " + "B" * 68,
    "ssh-ed25519 " + "A" * 68 + " comment", "", "*.devcell ssh-ed25519 " + "A" * 68])
def test_a_servers_host_key_that_is_not_one_ed25519_key_writes_nothing(
        tmp_path: Path, public: str) -> None:
    """`ssh-config` through a server pins the key the server answers with: anything but one
    ed25519 public key (another algorithm, a second line, a comment to smuggle text into
    known_hosts) is refused and nothing is written."""

    path = tmp_path / "known_hosts-x"
    with pytest.raises(StateError, match="not an ed25519 public key"):
        keys.write_known_hosts(path, public)
    assert not path.exists()
    good = "ssh-ed25519 " + "A" * 68
    keys.write_known_hosts(path, good)
    assert path.read_text() == f"*.devcell {good}\n"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("name", ['a\nMatch exec "touch /tmp/x"', "a github.com", "A", ""])
def test_a_cell_name_that_could_add_ssh_config_lines_is_refused(tmp_path: Path,
                                                                name: str) -> None:
    """Through a server the cells' names are the server's: one holding a newline wrote a
    `Match exec` line into ~/.ssh/config that OpenSSH runs for every host (attack43)."""
    with pytest.raises(UsageError, match="cannot write an ssh configuration for cell"):
        client_config.reach_options(["devcell"], ["--server", "unix:/s"],
                                    tmp_path / "known", name)


def test_known_hosts_is_written_past_a_fifo_or_a_link_planted_at_its_names(
        tmp_path: Path) -> None:
    """A FIFO at the file held `ssh-config` for ever; a hard link at the temporary name had
    its target overwritten (attack43): neither is opened now."""
    good = "ssh-ed25519 " + "A" * 68
    path = tmp_path / "known_hosts-x"
    os.mkfifo(path)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.link(victim, path.with_name(f".{path.name}.{os.getpid()}"))
    keys.write_known_hosts(path, good)
    assert path.read_text() == f"*.devcell {good}\n" and stat.S_ISREG(path.lstat().st_mode)
    assert victim.read_text() == "keep me\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_directory_at_known_hosts_is_named_and_leaves_no_temporary_file(
        tmp_path: Path) -> None:
    """A directory at the known_hosts path: the error named the temporary file (which was
    fine) and left it behind, one more each run (attack43, E)."""
    path = tmp_path / "known_hosts-x"
    path.mkdir()
    with pytest.raises(StateError, match=f"^{path} is a directory.*move it away"):
        keys.write_known_hosts(path, "ssh-ed25519 " + "A" * 68)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["known_hosts-x"]


def test_the_ssh_directory_of_a_state_directory_is_never_followed(tmp_path: Path) -> None:
    """A link at `<state>/ssh` was followed: the host key and its pin were written, and the
    target chmodded, wherever it pointed (attack43, D)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / "ssh").symlink_to(elsewhere)
    with pytest.raises(StateError, match="is a symbolic link"):
        keys.host_key(state)
    assert list(elsewhere.iterdir()) == []
