"""A real Docker swarm for tests: N private dockerd instances on one machine, one manager and
the others workers, joined over loopback addresses (127.0.<slot>.1, .2, ...), DevCell's base
image loaded into each.

Never the main engine: each dockerd has its own --data-root, --exec-root, --pidfile, unix
socket and config file, runs with --bridge=none --iptables=false (no host firewall rule, no
default bridge) and its own docker_gwbridge under a private bridge name and subnet, so
nothing is shared with the engine other tests use, nor with another session's swarm (each
session takes a free slot under a lock). Swarm traffic stays on loopback.

Teardown, however the tests ended: `swarm leave --force` on each (which removes its tasks),
its docker_gwbridge removed, the dockerds stopped (SIGTERM, then SIGKILL), every mount under
the slot (the exec-roots' network namespaces) detached, the slot's directory removed. A
session killed outright leaves its slot to the next one, which clears it first (its pidfiles
name the processes; the dockerds get SIGTERM when pytest dies, PR_SET_PDEATHSIG).

Measured on the development VM (2 cores, load 5-19): start 3.7-6.5 s for 3 nodes (engines
up in parallel ~2 s, swarm init + joins ~2.5 s, image loads overlapping the joins), teardown
4.3-5.5 s. Run `python -m tests.swarm` to time it, or `DEVCELL_SWARM_TIMINGS=1 pytest -s`.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SLOTS = 16
_ENGINES: set[int] = set()
"""The pids of the dockerds this process started: the session's, outliving every test."""


def engine_pids() -> set[int]:
    """The test swarms' dockerds (the root conftest's check that a test leaves no process
    behind spares them: a test may start a node's engine again, for the session)."""
    return set(_ENGINES)
NODE_LABEL = "dev.devcell.test-node"  # the engine label naming each private dockerd (n1, n2, ...)


def _die_with_parent_softly() -> None:
    """preexec_fn for a dockerd: its own session (a terminal's ^C is not for it), default
    SIGTERM, and SIGTERM (not SIGKILL: it then stops its containerd and tasks) when pytest dies."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


@dataclass
class Node:
    name: str          # n1, n2, ... (the engine label NODE_LABEL)
    address: str       # 127.0.<slot>.<i>: advertise, listen and data-path address
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    node_id: str = ""
    argv: list[str] = field(default_factory=list)
    """The dockerd command line, to start the engine again on the same data-root."""

    @property
    def socket(self) -> Path:
        return self.directory / "docker.sock"

    @property
    def host(self) -> str:
        """The engine's address for DOCKER_HOST, docker -H, or DevCell's cluster.engine."""
        return f"unix://{self.socket}"

    @property
    def pidfile(self) -> Path:
        return self.directory / "docker.pid"

    @property
    def log(self) -> Path:
        return self.directory / "dockerd.log"

    def docker(self, *args: str, input: bytes | None = None, check: bool = True,
               timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        """`docker -H <this engine> ARGS`; fails with the engine's words unless check=False."""
        done = subprocess.run(["docker", "-H", self.host, *args], input=input,
                              capture_output=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} on {self.name} failed: "
                                 f"{done.stderr.decode(errors='replace').strip()}")
        return done

    def client(self, timeout: int = 60) -> Any:
        import docker

        return docker.DockerClient(base_url=self.host, timeout=timeout)


@dataclass
class Swarm:
    root: Path
    slot: int
    nodes: list[Node]
    lock: Any = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def manager(self) -> Node:
        return self.nodes[0]

    @property
    def workers(self) -> list[Node]:
        return self.nodes[1:]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"the test swarm: {what} not within {timeout:.0f} s")
            time.sleep(0.05)

    def stop_engine(self, node: Node, *, kill: bool = False) -> None:
        """Stop one node's dockerd (SIGTERM, or SIGKILL: no goodbye to the swarm)."""
        assert node.process is not None
        (node.process.kill if kill else node.process.terminate)()
        node.process.wait(30)

    def start_engine(self, node: Node) -> None:
        """Start a stopped node's dockerd again on its data-root: it rejoins by itself."""
        node.socket.unlink(missing_ok=True)
        _spawn(node)
        self.wait(lambda: _engine_answers(node), f"{node.name}'s engine answering")

    def remove_services(self) -> None:
        """Every service on the swarm (a test's leftovers), and the tasks' containers with them."""
        ids = self.manager.docker("service", "ls", "-q").stdout.decode().split()
        if ids:
            self.manager.docker("service", "rm", *ids)


def _pids_of(root: Path) -> list[int]:
    """Live processes of an earlier session's slot: its dockerds (by their pidfiles) and their
    containerd (its pidfile under each exec-root)."""
    found = []
    for pidfile in [*root.glob("n*/docker.pid"), *root.glob("n*/exec/containerd/containerd.pid")]:
        with suppress(OSError, ValueError):
            found.append(int(pidfile.read_text().strip()))
    return [pid for pid in found if Path(f"/proc/{pid}").exists()]


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    found = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            where = line.split()[1].replace("\\040", " ")
            if where.startswith(prefix):
                found.append(where)
    return sorted(found, key=len, reverse=True)  # deepest first


def _clear(root: Path) -> None:
    """What a killed session left in this slot: processes stopped, mounts detached, gone."""
    pids = _pids_of(root)
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _pids_of(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in _pids_of(root):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for where in _mounts_under(root):
        subprocess.run(["umount", "-l", where], capture_output=True)
    for i in range(1, 10):  # the engines remove their bridges; a killed one's stays
        if Path(f"/sys/class/net/{_bridge(root, i)}").exists() and shutil.which("ip"):
            subprocess.run(["ip", "link", "delete", _bridge(root, i)], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


def _slot_root(slot: int) -> Path:
    return Path(tempfile.gettempdir()) / f"devcell-test-swarm-{slot}"


def _bridge(root: Path, index: int) -> str:
    """The host bridge behind node `index`'s docker_gwbridge (each engine its own name)."""
    return f"dcsw{root.name.rsplit('-', 1)[1]}n{index}"


def _take_slot() -> tuple[int, Any]:
    for slot in range(SLOTS):
        lock = open(Path(tempfile.gettempdir()) / f"devcell-test-swarm-{slot}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return slot, lock
        except OSError:
            lock.close()
    raise AssertionError(f"all {SLOTS} test swarm slots are in use")


def _start_engine(node: Node, slot: int) -> None:
    node.directory.mkdir(parents=True)
    config = node.directory / "daemon.json"  # never /etc/docker/daemon.json (the main engine's)
    config.write_text("{}\n")
    node.argv = ["dockerd", "--config-file", str(config),
            "--data-root", str(node.directory / "data"), "--exec-root", str(node.directory / "exec"),
            "--pidfile", str(node.pidfile), "-H", node.host,
            "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
            "--userland-proxy=false", "--label", f"{NODE_LABEL}={node.name}"]
    _spawn(node)


def _spawn(node: Node) -> None:
    with node.log.open("ab") as out:
        node.process = subprocess.Popen(node.argv, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL,
                                        preexec_fn=_die_with_parent_softly,
                                        start_new_session=True)
    _ENGINES.add(node.process.pid)


def _engine_answers(node: Node) -> bool:
    if node.process is not None and node.process.poll() is not None:
        raise AssertionError(f"dockerd {node.name} exited: {node.log.read_text()[-2000:]}")
    if not node.socket.exists():
        return False
    try:
        return node.docker("version", check=False, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:  # up, not answering yet (a loaded machine)
        return False


def _gwbridge(node: Node, root: Path, slot: int, index: int) -> None:
    """docker_gwbridge made before the swarm would make it: a private bridge name and subnet,
    no masquerading, no traffic between containers (only swarm's own sandboxes use it)."""
    node.docker("network", "create", "--driver", "bridge",
                "--subnet", f"198.18.{slot * 8 + index}.0/24",
                "--opt", f"com.docker.network.bridge.name={_bridge(root, index)}",
                "--opt", "com.docker.network.bridge.enable_icc=false",
                "--opt", "com.docker.network.bridge.enable_ip_masquerade=false",
                "docker_gwbridge")


def _load_image(node: Node, archive: Path) -> None:
    with archive.open("rb") as data:
        node.docker("load", "-q", input=data.read())


IMAGES = ("devcell/busybox:latest", "devcell/nodetools:2")
"""What every node holds: DevCell's base image, and the node tools image its jobs run."""


def _node_tools() -> None:
    """The node tools image on the machine's engine (made by `devcell image build-base`;
    made here when an older setup lacks it)."""

    from devcell.backends.container.backend import ContainerBackend

    with tempfile.TemporaryDirectory() as state:
        backend = ContainerBackend(state_dir=Path(state))
        try:
            backend.build_node_tools_image()
        finally:
            backend.close()


def start(count: int = 3, images: tuple[str, ...] = IMAGES) -> Swarm:
    """A swarm of `count` private engines (the first the manager), `images` in each."""
    from tests.backends.engine import in_ci, require_engine

    require_engine()
    if "devcell/nodetools:2" in images:
        _node_tools()
    why = ("dockerd is not installed (docker.io; scripts/docker-setup installs it)"
           if shutil.which("dockerd") is None else
           "private dockerd instances need root" if os.geteuid() != 0 else None)
    if why is not None:
        if in_ci():
            pytest.fail(f"CI needs the test swarm: {why}", pytrace=False)
        pytest.skip(f"no test swarm here: {why}")
    began = time.monotonic()
    slot, lock = _take_slot()
    root = _slot_root(slot)
    _clear(root)  # an earlier session killed in this slot
    root.mkdir(mode=0o700)
    swarm = Swarm(root, slot, [Node(f"n{i}", f"127.0.{100 + slot}.{i}", root / f"n{i}")
                               for i in range(1, count + 1)], lock)
    saver = None
    try:
        archive = root / "images.tar"
        saver = subprocess.Popen(["docker", "save", "-o", str(archive), *images],
                                 stderr=subprocess.PIPE)
        for node in swarm.nodes:
            _start_engine(node, slot)
        swarm.wait(lambda: all(_engine_answers(n) for n in swarm.nodes), "the engines answering")
        swarm.timings["engines"] = time.monotonic() - began
        with ThreadPoolExecutor(len(swarm.nodes)) as pool:
            list(pool.map(lambda pair: _gwbridge(pair[1], root, slot, pair[0]),
                          enumerate(swarm.nodes, 1)))
        _, err = saver.communicate(timeout=120)
        assert saver.returncode == 0, f"docker save {images}: {err.decode()}"
        loads = ThreadPoolExecutor(len(swarm.nodes))
        loaded = [loads.submit(_load_image, node, archive) for node in swarm.nodes]
        manager = swarm.manager
        manager.docker("swarm", "init", "--advertise-addr", manager.address,
                       "--listen-addr", f"{manager.address}:2377",
                       "--data-path-addr", manager.address)
        token = manager.docker("swarm", "join-token", "-q", "worker").stdout.decode().strip()

        def join(node: Node) -> None:
            node.docker("swarm", "join", "--token", token, "--advertise-addr", node.address,
                        "--listen-addr", f"{node.address}:2377",
                        "--data-path-addr", node.address, f"{manager.address}:2377")

        with ThreadPoolExecutor(len(swarm.workers) or 1) as pool:
            list(pool.map(join, swarm.workers))
        for node in swarm.nodes:
            node.node_id = node.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.decode().strip()
        swarm.wait(lambda: all_ready(swarm), "every node Ready")
        swarm.timings["swarm"] = time.monotonic() - began
        for future in loaded:
            future.result()
        loads.shutdown()
        archive.unlink()
        swarm.timings["start"] = time.monotonic() - began
        return swarm
    except BaseException:
        if saver is not None and saver.poll() is None:
            saver.kill()
            saver.wait()
        stop(swarm)
        raise


def all_ready(swarm: Swarm) -> bool:
    listed = swarm.manager.docker("node", "ls", "--format", "{{json .}}").stdout.decode()
    rows = [json.loads(line) for line in listed.splitlines() if line.strip()]
    return len(rows) == len(swarm.nodes) and all(r.get("Status") == "Ready" for r in rows)


def stop(swarm: Swarm) -> None:
    """Leave the swarm, stop the engines, detach their mounts, remove the slot (idempotent)."""
    began = time.monotonic()
    alive = [n for n in swarm.nodes if n.process is not None and n.process.poll() is None]

    def leave(node: Node) -> None:
        with suppress(Exception):
            node.docker("swarm", "leave", "--force", check=False, timeout=60)
            node.docker("network", "rm", "docker_gwbridge", check=False, timeout=30)

    if alive:
        # Workers first: a manager leaving first leaves them trying to reach it.
        with ThreadPoolExecutor(len(alive)) as pool:
            list(pool.map(leave, [n for n in alive if n is not swarm.manager]))
        if swarm.manager in alive:
            leave(swarm.manager)
    swarm.timings["left"] = time.monotonic() - began
    for node in alive:
        assert node.process is not None
        node.process.terminate()
    for node in alive:
        assert node.process is not None
        try:
            node.process.wait(30)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(10)
    swarm.timings["stopped"] = time.monotonic() - began
    _clear(swarm.root)
    swarm.timings["stop"] = time.monotonic() - began
    if swarm.lock is not None:
        swarm.lock.close()
        swarm.lock = None


@pytest.fixture(scope="session")
def swarm() -> Iterator[Swarm]:
    """One 3-node test swarm for the whole session (start ~7 s, stop ~4 s); a test leaves no
    service behind (`swarm_clean`)."""
    running = start(3)
    try:
        yield running
    finally:
        stop(running)
        if os.environ.get("DEVCELL_SWARM_TIMINGS"):
            print(f"\ntest swarm: {json.dumps({k: round(v, 2) for k, v in running.timings.items()})}")


@pytest.fixture
def clean_swarm(swarm: Swarm) -> Iterator[Swarm]:
    """The session's swarm with every node Ready (a test before may have restarted one's
    engine), active and unlabelled; after the test its services are removed and the nodes
    reset again."""
    swarm.wait(lambda: all_ready(swarm), "every node Ready", timeout=90)
    reset_nodes(swarm)
    yield swarm
    swarm.remove_services()
    reset_nodes(swarm)


def reset_nodes(swarm: Swarm) -> None:
    """Each node active with no node labels (only the labels it has: `--label-rm` of one it
    lacks fails the whole update, availability included)."""
    for node in swarm.nodes:
        labels = json.loads(swarm.manager.docker(
            "node", "inspect", "--format", "{{json .Spec.Labels}}", node.node_id).stdout) or {}
        removals = [arg for key in labels for arg in ("--label-rm", key)]
        swarm.manager.docker("node", "update", "--availability", "active", *removals,
                             node.node_id)


if __name__ == "__main__":  # pragma: no cover - by hand: time a start and a stop
    made = start(3)
    try:
        print(made.manager.docker("node", "ls").stdout.decode())
    finally:
        stop(made)
    print({k: round(v, 2) for k, v in made.timings.items()})
