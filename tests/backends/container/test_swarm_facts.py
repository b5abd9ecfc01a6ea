"""What Docker's swarm mode does on this kind of machine (docs/cluster.md, "Facts"): each test
is the command a fact in that document names, run on the session's test swarm of private
engines (tests/swarm.py). If one fails, the design built on it must change, and the document
with it.

Services are created detached all at once and then awaited together: a task starts in ~1 s,
so the facts cost about as much as the slowest of them: ~5 s for the services on a worker,
~8 s for the overlay network (its refused task takes that long to be reported).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from devcell.backends.container.swarm_cells import FREEZERS
from tests.swarm import Node, Swarm

IMAGE = "devcell/busybox:latest"


def create(manager: Node, name: str, *args: str) -> None:
    manager.docker("service", "create", "--detach", "--quiet", "--name", name,
                   "--restart-condition", "none", "--stop-grace-period", "0s", *args)


def tasks(manager: Node, service: str) -> list[dict[str, object]]:
    out = manager.docker("service", "ps", service, "--no-trunc", "--format", "{{json .}}",
                         check=False).stdout.decode()
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def settled(cluster: Swarm, services: list[str], timeout: float = 60,
            jobs: tuple[str, ...] = ()) -> dict[str, dict]:
    """Each service's first task once it is running (a job's: complete), rejected or failed."""
    found: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    while len(found) < len(services):
        for name in services:
            if name not in found:
                final = ("Complete", "Rejected", "Failed") + (() if name in jobs else ("Running",))
                for task in tasks(cluster.manager, name):
                    if str(task["CurrentState"]).startswith(final):
                        found[name] = task
        if time.monotonic() > deadline:
            waiting = {name: [(t.get("Node"), t.get("CurrentState"), t.get("Error"))
                              for t in tasks(cluster.manager, name)]
                       for name in sorted(set(services) - set(found))}
            nodes = cluster.manager.docker("node", "ls", check=False)
            raise AssertionError(f"tasks not settled: {waiting}\nnodes:\n"
                                 f"{nodes.stdout.decode()}{nodes.stderr.decode()}")
        time.sleep(0.1)
    return found


def container_on(node: Node, service: str) -> dict:
    ids = node.docker("ps", "-aq", "--filter",
                      f"label=com.docker.swarm.service.name={service}").stdout.decode().split()
    assert ids, f"no container of {service} on {node.name}"
    return json.loads(node.docker("inspect", ids[0]).stdout)[0]


def test_services_on_a_worker(clean_swarm: Swarm, tmp_path: Path) -> None:
    """One task constrained to a worker's node id runs there and nowhere else; a job runs to
    completion; --cap-add and --cap-drop reach the container; the host network is allowed,
    `none` is not a network a service can name; a bind mount of the worker's directory and a
    local volume of type overlay (a fork's workspace) are mounted on the worker, and a bind
    source missing there rejects the task with the reason."""
    cluster, worker = clean_swarm, clean_swarm.workers[-1]
    on_worker = f"node.id=={worker.node_id}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "f").write_text("from the host\n")
    lower, upper, work = (tmp_path / "lower", tmp_path / "upper", tmp_path / "work")
    for d in (lower, upper, work):
        d.mkdir()
    (lower / "base").write_text("from the snapshot\n")
    m = cluster.manager
    create(m, "fact-one", "--constraint", on_worker, IMAGE, "sleep", "300")
    create(m, "fact-job", "--mode", "replicated-job", "--constraint", on_worker, IMAGE,
           "sh", "-c", "echo done-by-a-job")
    create(m, "fact-caps", "--constraint", on_worker, "--cap-drop", "ALL", "--cap-add",
           "SYS_PTRACE", IMAGE, "sleep", "300")
    create(m, "fact-host", "--network", "host", "--constraint", on_worker, IMAGE, "sleep", "300")
    create(m, "fact-bind", "--constraint", on_worker, "--mount",
           f"type=bind,src={workspace},dst=/workspace", IMAGE,
           "sh", "-c", "cat /workspace/f > /workspace/g; sleep 300")
    create(m, "fact-nobind", "--constraint", on_worker, "--mount",
           f"type=bind,src={tmp_path / 'absent'},dst=/workspace", IMAGE, "sleep", "300")
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    create(m, "fact-overlay", "--constraint", on_worker, "--mount",
           "type=volume,src=fact-fork,dst=/workspace,volume-driver=local,volume-opt=type=overlay,"
           f'volume-opt=device=overlay,"volume-opt=o={options}"', IMAGE,
           "sh", "-c", "cat /workspace/base > /workspace/copied; sleep 300")
    refused = m.docker("service", "create", "--detach", "--name", "fact-none", "--network", "none",
                       IMAGE, "sleep", "1", check=False)
    assert refused.returncode != 0 and b"network none not found" in refused.stderr

    found = settled(cluster, ["fact-one", "fact-job", "fact-caps", "fact-host", "fact-bind",
                            "fact-nobind", "fact-overlay"], jobs=("fact-job",))
    for name in ("fact-one", "fact-caps", "fact-host", "fact-bind", "fact-overlay"):
        assert str(found[name]["CurrentState"]).startswith("Running"), (name, found[name])
    assert str(found["fact-job"]["CurrentState"]).startswith("Complete"), found["fact-job"]
    assert "done-by-a-job" in m.docker("service", "logs", "fact-job").stdout.decode()
    for other in cluster.nodes[:-1]:  # the constraint: nothing of it elsewhere
        assert not other.docker("ps", "-aq", "--filter",
                                "label=com.docker.swarm.service.name=fact-one").stdout.strip()
    container_on(worker, "fact-one")
    caps = container_on(worker, "fact-caps")["HostConfig"]
    assert caps["CapDrop"] == ["ALL"] and caps["CapAdd"] == ["CAP_SYS_PTRACE"]
    assert container_on(worker, "fact-host")["HostConfig"]["NetworkMode"] == "host"
    nobind = found["fact-nobind"]
    assert str(nobind["CurrentState"]).startswith("Rejected")
    assert "bind source path does not exist" in str(nobind["Error"])
    deadline = time.monotonic() + 10
    while not ((workspace / "g").exists() and (upper / "copied").exists()):
        assert time.monotonic() < deadline, "the bind mount or the overlay volume was not written"
        time.sleep(0.05)
    assert (workspace / "g").read_text() == "from the host\n"
    assert (upper / "copied").read_text() == "from the snapshot\n"  # written to the fork's upper
    volume = json.loads(worker.docker("volume", "inspect", "fact-fork").stdout)[0]
    assert volume["Options"]["type"] == "overlay"  # made on the worker, by its engine


def test_overlay_network_across_engines_of_one_host_fails(clean_swarm: Swarm) -> None:
    """Two engines sharing one host's network namespace cannot both join an overlay network:
    each makes the network's VXLAN device in the host's namespace, and the second is refused
    (`error creating vxlan interface: file exists`). No DevCell cell needs an overlay network
    (cells run with no network, the host's, or a local bridge), so the test swarm is not built
    around one; a real cluster has one network namespace per host."""
    cluster = clean_swarm
    m = cluster.manager
    m.docker("network", "create", "--driver", "overlay", "--subnet", f"198.19.{cluster.slot}.0/24",
             "fact-overlay-net")
    try:
        for node in cluster.workers:
            create(m, f"fact-net-{node.name}", "--network", "fact-overlay-net",
                   "--constraint", f"node.id=={node.node_id}", IMAGE, "sleep", "300")
        found = settled(cluster, [f"fact-net-{n.name}" for n in cluster.workers])
        states = sorted(str(t["CurrentState"]).split()[0] for t in found.values())
        assert states == ["Rejected", "Running"], found
        errors = " ".join(str(t["Error"]) for t in found.values())
        assert "error creating vxlan interface: file exists" in errors
    finally:
        cluster.remove_services()
        # The network goes once its tasks' containers are gone (the engine's own pace).
        deadline = time.monotonic() + 20
        while m.docker("network", "rm", "fact-overlay-net", check=False).returncode != 0:
            if time.monotonic() > deadline:
                pytest.fail("the overlay network could not be removed")
            time.sleep(0.2)


def test_a_task_is_frozen_only_by_a_job_on_its_node(clean_swarm: Swarm) -> None:
    """The swarm API has no call that pauses, signals or execs into a task, and the manager's
    engine lists its own volumes only (`docker -H MANAGER volume ls`): what touches a task's
    processes or a node's volumes runs on that node. A job with only the task's freezer
    cgroup directory bind-mounted (every capability dropped) freezes it: runc on the node
    then refuses an exec into the container as paused (the engine's own state still says
    running); a second job thaws it. Cost ~3 s."""
    cluster, worker = clean_swarm, clean_swarm.workers[-1]
    m = cluster.manager
    on_worker = f"node.id=={worker.node_id}"
    create(m, "fact-frozen", "--constraint", on_worker, "--mount",
           "type=volume,src=fact-node-volume,dst=/w", IMAGE, "sleep", "300")
    found = settled(cluster, ["fact-frozen"])
    assert str(found["fact-frozen"]["CurrentState"]).startswith("Running")
    container = container_on(worker, "fact-frozen")["Id"]
    assert b"fact-node-volume" in worker.docker("volume", "ls", "-q").stdout
    assert b"fact-node-volume" not in m.docker("volume", "ls", "-q").stdout
    for verb in ("service", "pause"), ("service", "exec"), ("service", "kill"):
        said = m.docker(*verb, "fact-frozen", check=False)
        assert said.returncode != 0, verb  # not a docker service command
    # The test may look at the host (the swarm's engines share it); DevCell's jobs try each.
    freezer = next(c.format(id=container) for c in FREEZERS
                   if Path(c.format(id=container)).is_dir())
    v1 = Path(freezer, "freezer.state").exists()
    for name, state in (("fact-freeze", "FROZEN"), ("fact-thaw", "THAWED")):
        write = (f"echo {state} > /f/freezer.state; sleep 0.2; cat /f/freezer.state" if v1 else
                 f"echo {int(state == 'FROZEN')} > /f/cgroup.freeze; sleep 0.2; "
                 "grep -q 'frozen 1' /f/cgroup.events && echo FROZEN || echo THAWED")
        create(m, name, "--mode", "replicated-job", "--constraint", on_worker,
               "--cap-drop", "ALL", "--mount", f"type=bind,src={freezer},dst=/f", IMAGE,
               "sh", "-c", write)
        done = settled(cluster, [name], jobs=(name,))
        assert str(done[name]["CurrentState"]).startswith("Complete"), done[name]
        assert state in m.docker("service", "logs", "--raw", name).stdout.decode()
        ran = worker.docker("exec", container, "true", check=False)  # runc reads the freezer
        if state == "FROZEN":
            assert ran.returncode != 0 and b"paused" in ran.stdout + ran.stderr
        else:
            assert ran.returncode == 0, ran.stderr
