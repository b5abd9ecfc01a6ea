"""The CLI through the API (`devcell --server URL`, cli/remote.py) against the real server
(the session's `api` daemon, fake backend): a chosen set of `get`, `apply`, `diff`, `delete` and
`wait` command lines, their error cases included, run on the daemon's state directory and
again through its unix socket and its TLS listener on 127.0.0.1 (an admin's token, DevCell's
own certificate); each gives the same standard output, standard error and exit code. The
verbs that change a cell (`cell sleep|start|fork|restart|rerun-hooks`, `snapshot create`) are
compared step by step: each change made directly (and undone), then through the server; a
viewer's refused.
Then what only a client meets: an unreachable server, a certificate not trusted, a revoked
token.

In-process (main() with captured streams), sharing the session's daemon: ~3-5 s in all.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from devcell.cli.main import main
from tests.server.conftest import Api
from tests.server.test_app import cell, wait_for

Run = Callable[[list[str]], tuple[int, str, str]]

# The command lines, after the words that choose where they run. {name} is a cell of this
# module's own (applied first), {file} its manifest, {bad} a manifest with a misspelt field.
SAME = [
    # tables of this module's cells alone (-l): the session's other cells change meanwhile
    ["get", "cells", "-l", "team=remote"], ["get", "cells", "{name}"],
    ["get", "cells", "-l", "team=remote", "-o", "wide"],
    ["get", "cells", "{name}", "-o", "yaml"], ["get", "cells", "{name}", "-o", "json"],
    ["get", "cells", "-o", "name"], ["get", "cells", "-l", "team=remote", "--show-labels"],
    ["get", "cells", "{name}", "-L", "team", "--no-headers"],
    ["get", "cells", "-o", "jsonpath={.items[*].metadata.name}"],
    ["get", "cells", "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase"],
    ["get", "cells", "--sort-by", ".metadata.name", "-o", "name"],
    ["get", "cells", "--field-selector", "status.phase=Running", "-o", "name"],
    ["get", "cells", "{name}", "seed", "-o", "name"],
    # snapshots: this module's (the session's many others' AGEs tick at their own moments)
    ["get", "snapshots", "-l", "team=remote"], ["get", "snapshots", "-l", "team=remote", "-o",
                                                "wide"],
    ["get", "operations", "-o", "name"],
    ["get", "events", "--for", "cell/{name}", "-o", "name"],
    ["snapshot", "list", "{name}"], ["snapshot", "list", "{name}", "-o", "wide"],
    ["snapshot", "list", "{name}", "-o", "json"], ["snapshot", "list", "{name}", "-o", "yaml"],
    ["snapshot", "list", "{name}", "-o", "name"], ["snapshot", "list", "nope-{name}"],
    ["snapshot", "list", "Bad_Name"],
    # error cases
    ["get", "cells", "nope-{name}"], ["get", "cells", "{name}", "nope"],
    ["get", "cells", "-l", "team in ("], ["get", "operations", "-l", "a=b"],
    ["get", "cells", "-o", "jsonpath={.items[}"], ["get", "events", "--for", "x"],
    ["get", "cells", "x", "-l", "a=b"],
    ["diff", "-f", "{file}"], ["diff", "-f", "{changed}"], ["diff", "-f", "{bad}"],
    ["diff", "-f", "{file}", "-f", "{changed}", "-f", "{missing}"],
    ["diff", "-f", "{snap}", "-f", "{changed}"], ["diff", "-f", "{changed}", "-f", "{bad}"],
    ["apply", "-f", "{file}", "--dry-run"], ["apply", "-f", "{bad}"],
    ["apply", "-f", "{file}", "-f", "{bad}"], ["apply", "-f", "{missing}"],
    # files the server's one stream would read otherwise (cli/remote_sources.py): not UTF-8,
    # JSON (alone: sent as JSON; not JSON: said here), an object defined twice
    ["apply", "-f", "{latin1}", "-f", "{bad}"], ["apply", "-f", "{bad}", "-f", "{latin1}"],
    ["apply", "-f", "{latin1}"], ["diff", "-f", "{changed}", "-f", "{latin1}"],
    ["apply", "-f", "{json}", "--dry-run"], ["diff", "-f", "{json}"],
    ["apply", "-f", "{file}", "-f", "{json}", "--dry-run"],
    ["apply", "-f", "{comma}", "-f", "{bad}"], ["apply", "-f", "{twice}"],
    ["delete", "cell", "nope"], ["delete", "cell", "-l", "team=nobody"], ["delete", "cell"],
    ["wait", "cell", "{name}"], ["wait", "cell", "{name}", "--for", "create"],
    ["wait", "cell", "-l", "team=remote"], ["wait", "cell", "-l", "team=nobody"],
    ["wait", "cell", "nope", "--timeout", "0"], ["wait", "cell", "Bad_Name"],
    ["describe", "cell", "{name}"], ["describe", "cells", "-l", "team=remote"],
    ["describe", "cell", "{name}", "nope", "seed"], ["describe", "snapshot", "nope"],
    ["describe", "operation", "{op}"], ["describe", "op", "{op}", "op_nope"],
    ["describe", "cell"], ["describe", "op", "-l", "a=b"], ["describe", "cell", "-l", "a in ("],
    ["describe", "snapshot", "-l", "team=nobody"],
    # nodes: the engine's (a single host here: this machine), read by each request
    ["get", "nodes"], ["get", "nodes", "-o", "wide"], ["get", "nodes", "-o", "json"],
    ["get", "nodes", "-o", "name"], ["get", "nodes", "local", "nope"],
    ["get", "nodes", "-l", "zone=a"], ["get", "nodes", "-w"],
    # (node cordon, uncordon and drain on this single host:
    # test_a_node_change_names_no_server_path)
    # what the backends and the daemon record: rows alone
    ["get", "volumes", "-o", "name"], ["get", "volumes", "nope"], ["get", "controllers"],
    ["get", "controllers", "-o", "json"], ["get", "controllers", "nope"],
    # df: measured by the server, printed here (the session's cells are the fake backend's:
    # no files, no figures that tick between the two runs; -v: tests/cli/test_remote_df.py)
    ["df"], ["df", "-o", "json"],
    # lineage: the tree holding this module's snapshot (the session's others change meanwhile)
    ["get", "snapshots", "{name}-snap", "--tree"], ["get", "snapshots", "nope", "--tree"],
    ["get", "snapshots", "--tree", "-o", "wide"], ["get", "cells", "--tree"],
    # tokens (an admin's): the list, and what is refused before a token is made
    ["token", "list"], ["token", "list", "-o", "json"], ["token", "revoke", "nope"],
    ["token", "revoke", "000000000000"], ["token", "revoke", "dct_" + "0" * 12],
    ["token", "create", "--user", "bad user", "--role", "viewer"],
    ["token", "create", "--user", "x", "--role", "viewer", "--expires", "soon"],
    ["token", "create", "--user", "x", "--role", "viewer", "--expires", "0s"],
    # the whole machine's: gc's dry run (the fake backend's, measured: no figure ticks) and
    # the images (none pulled for the session's state directory)
    ["gc", "--dry-run"], ["image", "ls"], ["image", "ls", "-o", "json"],
    ["image", "prune", "--dry-run"],
    ["apply", "-f", "{file}", "-l", "team=remote"], ["apply", "-f", "{file}", "--prune", "-l",
                                                     "team in ("],
]


@pytest.fixture(scope="module")
def files(api: Api, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("cli-remote")
    name = f"rc-{uuid.uuid4().hex[:6]}"
    (work / "cell.yaml").write_text(cell(name, team="remote"))
    (work / "bad.yaml").write_text(cell(f"{name}-bad") + "  imag: x\n")
    (work / "changed.yaml").write_text(  # two documents: a change and a cell not recorded
        cell(name, team="remote", tier="web") + "  env: [{name: TOKEN, value: hidden, "
        "secret: true}]\n---\n" + cell(f"{name}-new", team="remote"))
    done = api.cli("apply", "-f", str(work / "cell.yaml"))
    assert done.returncode == 0, done.stderr
    wait_for(api, f"/api/v1/cells/{name}", lambda r: r.json()["status"]["phase"] == "Running")
    (work / "snap.yaml").write_text(
        f"apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {{name: {name}-snap, "
        f"labels: {{team: remote}}}}\nspec: {{cell: {name}}}\n")
    done = api.cli("apply", "-f", str(work / "snap.yaml"))
    assert done.returncode == 0, done.stderr
    wait_for(api, f"/api/v1/snapshots/{name}-snap",
             lambda r: r.json()["status"]["phase"] == "Ready")
    ops = api.client.get("/api/v1/operations").json()["items"]
    op = next(o["id"] for o in ops if o["object_name"] == name)
    (work / "latin1.yaml").write_bytes(cell(f"{name}-l1").encode() + b"  # caf\xe9\n")
    doc = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {
        "name": f"{name}-json", "labels": {"team": "remote"}}, "spec": {
        "backend": "fake", "image": "devcell/busybox:latest", "resources": {"cpus": 1.5}}}
    (work / "cell.json").write_text(json.dumps(doc, indent=2) + "\n")
    (work / "comma.json").write_text(json.dumps(doc, indent=2)[:-2] + ",\n}\n")
    (work / "twice.yaml").write_text(cell(f"{name}-2") + "---\n" + cell(f"{name}-2"))
    return {"name": name, "op": op, "file": str(work / "cell.yaml"), "bad": str(work / "bad.yaml"),
            "latin1": str(work / "latin1.yaml"), "json": str(work / "cell.json"),
            "comma": str(work / "comma.json"), "twice": str(work / "twice.yaml"),
            "changed": str(work / "changed.yaml"), "snap": str(work / "snap.yaml"),
            "missing": str(work / "missing.yaml"), "work": str(work)}


@pytest.fixture(scope="module")
def admin_token(api: Api, files: dict[str, str]) -> Path:
    token = Path(files["work"]) / "admin.token"
    token.write_text(api.token("cli-remote-admin", "admin") + "\n")
    token.chmod(0o600)
    return token


def _filled(word: str, files: dict[str, str]) -> str:
    for key, value in files.items():
        word = word.replace("{" + key + "}", value)
    return word


def _runner(capsys: pytest.CaptureFixture[str], before: list[str]) -> Run:
    def run(argv: list[str]) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*before, *argv])
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture(params=["unix", "tls"])
def remote(request: pytest.FixtureRequest, api: Api, admin_token: Path,
           capsys: pytest.CaptureFixture[str]) -> Run:
    if request.param == "unix":
        return _runner(capsys, ["--server", f"unix:{api.socket}"])
    return _runner(capsys, ["--server", api.url, "--token-file", str(admin_token),
                            "--certificate-authority", str(api.certificate)])


def test_the_same_output_as_on_the_state_directory(
        api: Api, files: dict[str, str], remote: Run,
        capsys: pytest.CaptureFixture[str]) -> None:
    direct = _runner(capsys, ["--state-dir", str(api.state)])
    differ = []
    for words in SAME:
        argv = [_filled(w, files) for w in words]
        for _ in range(5):  # an AGE or OBSERVED column may tick between the two runs
            here, there = direct(argv), remote(argv)
            if here == there:
                break
            time.sleep(0.3)
        else:
            differ.append((argv, here, there))
    assert not differ, "\n".join(f"{a}:\n  direct {h}\n  remote {t}" for a, h, t in differ)


def test_a_node_change_names_no_server_path(api: Api, remote: Run,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Cordon, uncordon and drain on a single host are refused naming cluster.engine's file;
    through the API that file is the server's, its path of no use to a remote admin nor for
    them to learn (final43, F8): the server's configuration is named instead, the CLI's
    words here kept."""
    direct = _runner(capsys, ["--state-dir", str(api.state)])
    scheduler = "no scheduler to keep cells off it"
    other = "no other node to move its cells to"
    for argv, why in ((["node", "cordon", "local"], scheduler),
                      (["node", "uncordon", "nope"], scheduler),
                      (["node", "drain", "local"], other),
                      (["node", "drain", "nope", "--from-last-snapshot"], other)):
        code, out, err = direct(argv)
        assert code != 0 and out == "" and f"{api.state}/config.yaml" in err, err
        assert remote(argv) == (code, "", "error: no cluster is configured (cluster.engine in "
                                f"the server's configuration): a single host has {why}; see "
                                "docs/cluster.md\n")


def test_apply_delete_and_wait_through_the_server(files: dict[str, str], remote: Run,
                                                 tmp_path: Path) -> None:
    name = f"rw-{uuid.uuid4().hex[:6]}"
    manifest = tmp_path / "new.yaml"
    manifest.write_text(cell(name, team="remote-new"))
    assert remote(["apply", "-f", str(manifest)]) == (0, f"cell/{name} created\n", "")
    assert remote(["get", "cells", name, "-o", "jsonpath={.status.phase}"]) == (
        0, "Running", "")
    assert remote(["apply", "-f", str(manifest)]) == (0, f"cell/{name} unchanged\n", "")
    assert remote(["delete", "cell", "-l", "team=remote-new"]) == (
        0, f"cell/{name} deleted\n", "")
    assert remote(["wait", "cell", name, "--for", "delete"]) == (
        0, f"cell/{name} deleted\n", "")


def test_apply_prune_the_same_as_on_the_state_directory(
        api: Api, remote: Run, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`apply -f DIR --prune` (-l, a file given alone, --dry-run) directly and through the
    server, each on cells of its own: the same words and exit codes (store/client_sets.py:
    the server prunes what this user applied from the paths the client names)."""
    direct = _runner(capsys, ["--state-dir", str(api.state)])
    tag = uuid.uuid4().hex[:6]

    def steps(run: Run, who: str) -> list[tuple[int, str, str]]:
        folder = tmp_path / who
        folder.mkdir()
        for n, tier in (("a", "x"), ("b", "x"), ("c", "y"), ("d", "x")):
            (folder / f"{n}.yaml").write_text(cell(f"p{who}-{tag}-{n}", tier=tier,
                                                   run=f"{tag}{who}"))
        said = [run(["apply", "-f", str(folder)])]
        (folder / "b.yaml").unlink()
        (folder / "c.yaml").unlink()
        def gone(n: str) -> list[str]:
            return ["wait", "cell", f"p{who}-{tag}-{n}", "--for", "delete"]

        # (a direct apply with a daemon may end before a pruned cell is gone: the next prune
        # would name it again, as a deletion not finished; waited for here, both ways)
        said += [run(["apply", "-f", str(folder), "--prune", "--dry-run"]),
                 run(["apply", "-f", str(folder), "--prune", "-l", "tier=y"]), run(gone("c")),
                 run(["apply", "-f", str(folder), "--prune"]), run(gone("b")),
                 run(["apply", "-f", str(folder), "--prune"])]
        (folder / "d.yaml").unlink()
        said += [run(["apply", "-f", str(folder / "a.yaml"), "--prune", "--keep-pruned",
                      "0"]),
                 run(["get", "cells", "-l", f"run={tag}{who}", "-o", "name"])]
        return [(code, out.replace(f"p{who}-", "pX-"), err.replace(f"p{who}-", "pX-"))
                for code, out, err in said]

    here, there = steps(direct, "d"), steps(remote, "r")
    assert here == there
    assert here[2][1].endswith(f"cell/pX-{tag}-c pruned\n")  # -l tier=y: c alone
    assert here[4][1].endswith(f"cell/pX-{tag}-b pruned\n")
    assert f"cell/pX-{tag}-d" in here[8][1]  # a.yaml alone: d.yaml was applied from the folder


def test_a_developers_prune_never_deletes_anothers_cell(
        api: Api, files: dict[str, str], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """A cell the developer applied from a folder, given to another user since: their prune
    of that folder is refused whole, naming the rule, and records nothing."""
    token = tmp_path / "dev.token"
    token.write_text(api.token("cli-remote-dev", "developer"))
    token.chmod(0o600)
    dev = _runner(capsys, ["--server", api.url, "--token-file", str(token),
                           "--certificate-authority", str(api.certificate)])
    name = f"pd-{uuid.uuid4().hex[:6]}"
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "mine.yaml").write_text(cell(name))
    assert dev(["apply", "-f", str(folder), "--no-wait"])[0] == 0
    given_away(api, name)
    (folder / "mine.yaml").unlink()
    (folder / "new.yaml").write_text(cell(f"{name}-new"))
    code, out, err = dev(["apply", "-f", str(folder), "--prune"])
    assert (code, out) == (1, "")
    assert "refused by rule developer-not-own" in err and f'Cell "{name}"' in err, err
    assert "nothing was recorded" in err and err.count("\n") == 1, err
    assert dev(["get", "cells", f"{name}-new"])[0] == 1  # not created
    assert dev(["get", "cells", name])[0] == 0  # not deleted


def given_away(api: Api, name: str) -> None:
    """Cell `name` given to another user by the server's owner on its machine, from standard
    input (not through the API, so what the API recorded of who applied it stays)."""
    import subprocess
    import sys

    from tests.conftest import REPO

    given = cell(name).replace("metadata: {name:", "metadata: {owner: someone, name:")
    done = subprocess.run([sys.executable, "-m", "devcell", "--state-dir", str(api.state),
                           "apply", "-f", "-", "--no-wait"], input=given, capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_json_file_yaml_reads_otherwise(files: dict[str, str], remote: Run,
                                          tmp_path: Path) -> None:
    """`1e0` is a number to JSON and a string to YAML: a .json file given alone is sent as
    JSON, read as on the state directory; among other files (one YAML stream) it is refused,
    naming it, never recorded as something else."""
    from devcell.cli.remote_sources import MISREAD

    name = f"rj-{uuid.uuid4().hex[:6]}"
    manifest = tmp_path / "exp.json"
    manifest.write_text(json.dumps({
        "apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": name},
        "spec": {"backend": "fake", "resources": {"cpus": 1.5}}}).replace("1.5", "1e0"))
    assert remote(["apply", "-f", str(manifest), "--dry-run"]) == (
        0, f"cell/{name} created (dry run)\n", "")
    code, out, err = remote(["apply", "-f", files["file"], "-f", str(manifest), "--dry-run"])
    assert (code, out) == (1, "") and err == (f"error: {manifest}: {MISREAD}\n"
                                              "1 problem found; nothing was changed\n"), err


def test_what_only_a_client_meets(api: Api, files: dict[str, str], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    gone = _runner(capsys, ["--server", f"unix:{tmp_path}/none.sock"])
    code, out, err = gone(["get", "cells"])
    assert (code, out) == (1, "") and "cannot reach the DevCell API" in err
    token = tmp_path / "token"
    made = api.token("cli-remote-viewer", "viewer")
    token.write_text(made)
    token.chmod(0o600)
    untrusted = _runner(capsys, ["--server", api.url, "--token-file", str(token)])
    code, out, err = untrusted(["get", "cells"])
    assert (code, out) == (1, "") and "TLS certificate is not trusted" in err
    assert "--certificate-authority" in err
    viewer = _runner(capsys, ["--server", api.url, "--token-file", str(token),
                              "--certificate-authority", str(api.certificate)])
    code, out, err = viewer(["delete", "cell", files["name"]])
    assert code == 1 and "refused by rule viewer-read-only" in err
    for verb in (["cell", "sleep", files["name"]], ["cell", "start", files["name"]],
                 ["snapshot", "create", files["name"], "--name", "v"],
                 ["cell", "fork", files["name"], "--snapshot", "v", "--name", "w"],
                 ["cell", "restart", files["name"]], ["cell", "rerun-hooks", files["name"]]):
        code, out, err = viewer(verb)
        assert (code, out) == (1, ""), verb
        assert err.startswith("error: ") and "refused by rule viewer-read-only" in err, err
    assert made not in out + err
    token_id = made.split("_")[1]
    assert api.cli("token", "revoke", token_id).returncode == 0
    code, out, err = viewer(["get", "cells"])
    assert (code, out) == (1, "") and "the token is not valid" in err
    assert "devcell token create" in err and made not in err


@pytest.mark.parametrize("how", ["unix-closed-pipe", "tls-full"])
def test_a_token_made_whose_secret_was_not_written_is_revoked(
        api: Api, admin_token: Path, how: str) -> None:
    """`token create` through the server into a pipe its reader closed (exit 0, silent) or
    /dev/full (the output's error alone) left an active token nobody held (final43, F2): it
    is revoked through the server, and said with its id. Run as the program is (its own
    standard output); ~1 s each."""
    import os
    import re
    import subprocess
    import sys

    from tests.conftest import REPO

    user = f"lost-{uuid.uuid4().hex[:6]}"
    reach = (["--server", f"unix:{api.socket}"] if how.startswith("unix") else
             ["--server", api.url, "--token-file", str(admin_token),
              "--certificate-authority", str(api.certificate)])
    argv = [sys.executable, "-m", "devcell", *reach, "token", "create", "--user", user,
            "--role", "admin"]
    if how.endswith("full"):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                                  cwd=REPO, timeout=120)
    else:
        read, write = os.pipe()
        os.close(read)
        try:
            proc = subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True,
                                  cwd=REPO, timeout=120)
        finally:
            os.close(write)
    said = re.fullmatch(r"error: token/([0-9a-f]{12}) was made for (\S+) \(admin\), but the "
                        r"standard output did not take it \((.*)\): it was revoked \(nobody "
                        r"holds its secret\); make another with an output that takes it\n",
                        proc.stderr)
    assert proc.returncode == 1 and said and said.group(2) == user, proc.stderr
    assert said.group(3) == ("No space left on device" if how.endswith("full") else "Broken pipe")
    listed = json.loads(api.cli("token", "list", "-o", "json").stdout)["items"]
    assert [(t["id"], t["state"]) for t in listed if t["user"] == user] == [
        (said.group(1), "revoked")]


# -- the verbs on one cell: sleep, start, restart, rerun-hooks, snapshot create, fork ----------


def _same_verbs(direct: Run, remote: Run, steps: list[tuple[list[str], list[str]]]) -> None:
    """Each step's direct command line, then its remote one: the same bytes and exit code
    (each pair's words differ only where a new object's name does: the remote's output is
    compared with that name put back)."""
    differ = []
    for here_argv, there_argv in steps:
        here = direct(here_argv)
        there = remote(there_argv)
        for mine, theirs in zip(here_argv, there_argv, strict=True):
            if mine != theirs:
                there = (there[0], there[1].replace(theirs, mine), there[2].replace(theirs, mine))
        if here != there:
            differ.append((here_argv, here, there))
    assert not differ, "\n".join(f"{a}:\n  direct {h}\n  remote {t}" for a, h, t in differ)


def test_cell_verbs_the_same_as_on_the_state_directory(
        api: Api, files: dict[str, str], remote: Run, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    name = f"ra-{uuid.uuid4().hex[:6]}"
    (tmp_path / "cell.yaml").write_text(cell(name, team="remote-actions") + (
        "  services:\n    - {name: web, command: [sleep, '1000']}\n"))
    assert api.cli("apply", "-f", str(tmp_path / "cell.yaml")).returncode == 0
    wait_for(api, f"/api/v1/cells/{name}", lambda r: r.json()["status"]["phase"] == "Running")
    direct = _runner(capsys, ["--state-dir", str(api.state)])
    snap, fork = f"{name}-s", f"{name}-f"
    for verb, undo in (("sleep", "start"), ("start", "sleep")):
        # done directly and undone, then done through the server: the same words
        here = direct(["cell", verb, name])
        assert direct(["cell", undo, name])[0] == 0
        there = remote(["cell", verb, name])
        assert here == there, (verb, here, there)
        assert here[1].startswith(f"cell/{name} configured\n")
        # and again: unchanged (sleep: with what it kept)
        _same_verbs(direct, remote, [(["cell", verb, name, "--timeout", "60s"],) * 2])
    listed = [(["snapshot", "list", name, *o],) * 2 for o in ([], ["-o", "json"], ["-o", "name"])]
    _same_verbs(direct, remote, [*listed,  # none yet: said on stderr, an empty List, nothing
        (["cell", "restart", name],) * 2, (["cell", "restart", name, "web"],) * 2,
        (["cell", "rerun-hooks", name, "--timeout", "60s"],) * 2,
        (["cell", "restart", name, "nope"],) * 2, (["cell", "restart", f"nope-{name}"],) * 2,
        (["cell", "rerun-hooks", "Bad_Name"],) * 2,
        (["snapshot", "create", name, "--name", f"{snap}d"],
         ["snapshot", "create", name, "--name", f"{snap}r"]),
        (["snapshot", "create", name, "--name", f"{snap}d"],
         ["snapshot", "create", name, "--name", f"{snap}r"]),
        (["snapshot", "create", name, "--name", f"{snap}t", "--ttl", "7d"],
         ["snapshot", "create", name, "--name", f"{snap}u", "--ttl", "7d"]),
        (["cell", "fork", name, "--snapshot", f"{snap}d", "--name", f"{fork}d", "--no-ports"],
         ["cell", "fork", name, "--snapshot", f"{snap}r", "--name", f"{fork}r", "--no-ports"]),
        (["cell", "fork", name, "--snapshot", f"{snap}d", "--name", f"{fork}d", "--no-ports"],
         ["cell", "fork", name, "--snapshot", f"{snap}r", "--name", f"{fork}r", "--no-ports"]),
        # refusals and errors
        (["cell", "sleep", f"nope-{name}"],) * 2, (["cell", "start", "Bad_Name"],) * 2,
        (["snapshot", "create", name, "--name", "Bad_"],) * 2,
        (["snapshot", "create", f"nope-{name}", "--name", "x"],) * 2,
        (["cell", "fork", name, "--snapshot", "nope", "--name", "x"],) * 2,
        (["cell", "fork", name, "--snapshot", f"{snap}d", "--name", name],) * 2,
        (["cell", "fork", f"{fork}d", "--snapshot", f"{snap}d", "--name", "y"],) * 2,
    ])
    code, out, _ = direct(["snapshot", "list", name, "-o", "json"])  # documents, not pairs
    kinds = [s["kind"] for s in json.loads(out)["items"]]
    assert code == 0 and kinds and set(kinds) == {"Snapshot"}, out
    _same_verbs(direct, remote, [(["snapshot", "list", name, "-o", "name"],) * 2,
                                 (["snapshot", "list", name, "-o", "json"],) * 2])
    assert remote(["cell", "restart", name, "web"]) == (
        0, f"cell/{name} restart of service web requested\n", "")
    counted = (["cell", "fork", name, "--snapshot", f"{snap}d", "--name", f"{fork}c",
                "--count", "2", "--no-ports"],
               ["cell", "fork", name, "--snapshot", f"{snap}r", "--name", f"{fork}q",
                "--count", "2", "--no-ports"])
    _same_verbs(direct, remote, [counted, counted])  # created, then each name taken


def test_snapshot_restore_the_same_as_on_the_state_directory(
        api: Api, files: dict[str, str], remote: Run, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """Each restore done directly, then through the server: the same words, but for the
    operation's id and the safety snapshot's number (each run takes its own); a restore
    stopped at its approval gate is cancelled before the next."""
    import re

    name = f"rr-{uuid.uuid4().hex[:6]}"
    (tmp_path / "cell.yaml").write_text(cell(name, team="remote-restore"))
    assert api.cli("apply", "-f", str(tmp_path / "cell.yaml")).returncode == 0
    wait_for(api, f"/api/v1/cells/{name}", lambda r: r.json()["status"]["phase"] == "Running")
    snap = f"{name}-s"
    assert api.cli("snapshot", "create", name, "--name", snap).returncode == 0
    direct = _runner(capsys, ["--state-dir", str(api.state)])

    def run(how: Run, argv: list[str]) -> tuple[int, str, str]:
        code, out, err = how(argv)
        waiting = re.search(r"devcell op resume (op_\w+)", err)
        if waiting:
            assert api.cli("op", "cancel", waiting.group(1)).returncode == 0
        ids = (r"op_[0-9a-z]+", "OP"), (r"-pre-restore-\d+", "-pre-restore-N")
        for pattern, put in ids:
            out, err = re.sub(pattern, put, out), re.sub(pattern, put, err)
        return code, out, err

    differ = []
    for argv in (["snapshot", "restore", snap, "--dry-run"],
                 ["snapshot", "restore", snap, "--approve"],
                 ["snapshot", "restore", snap, "--no-safety-snapshot", "--approve"],
                 ["snapshot", "restore", snap, "--dry-run", "--no-safety-snapshot"],
                 ["snapshot", "restore", snap],
                 ["snapshot", "restore", snap, "--cell", name, "--timeout", "60s"],
                 ["snapshot", "restore", f"nope-{name}"],
                 ["snapshot", "restore", snap, "--cell", "seed"],
                 ["snapshot", "restore", snap, "--cell", f"nope-{name}"]):
        here, there = run(direct, argv), run(remote, argv)
        if here != there:
            differ.append((argv, here, there))
    assert not differ, "\n".join(f"{a}:\n  direct {h}\n  remote {t}" for a, h, t in differ)
    done = run(remote, ["snapshot", "restore", snap, "--approve"])
    assert done == (0, f"cell/{name} restored from snapshot/{snap}; safety snapshot/"
                       f"{name}-pre-restore-N holds what was there (operation OP)\n", ""), done


@pytest.mark.parametrize("words", [["gc", "--dry-run"], ["image", "ls", "-o", "json"],
                                   ["image", "prune", "--dry-run"],
                                   ["apply", "-f", "{file}", "--prune", "--dry-run"]],
                         ids=["gc", "image-ls", "image-prune", "apply-prune"])
def test_output_full_or_closed_as_on_the_state_directory(
        api: Api, files: dict[str, str], tmp_path: Path, words: list[str]) -> None:
    """gc, image and apply --prune into /dev/full and with stdout closed: the same exit code
    and words directly and through the server, one line, never a traceback."""
    import os
    import shlex
    import subprocess
    import sys

    from tests.conftest import REPO

    env = dict(os.environ, DEVCELL_CONTEXTS=str(tmp_path / "none.json"))
    seen = []
    for how in (["--state-dir", str(api.state)], ["--server", f"unix:{api.socket}"]):
        argv = [sys.executable, "-m", "devcell", *how, *[_filled(w, files) for w in words]]
        with open("/dev/full", "w") as full:
            filled = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                                    env=env, cwd=REPO, timeout=60)
        closed = subprocess.run(["sh", "-c", shlex.join(argv) + " >&-"], capture_output=True,
                                text=True, env=env, cwd=REPO, timeout=60)
        seen.append((filled.returncode, filled.stderr, closed.returncode, closed.stderr))
    assert seen[0] == seen[1], seen
    code, err, _, closed_err = seen[0]
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err + closed_err, seen
