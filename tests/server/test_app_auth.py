"""Who may do what through the API's TLS listener (127.0.0.1, DevCell's own certificate,
bearer tokens), for every route and every role, from one table; the unix socket is the
admin's. A refused request changes nothing and names the rule; a revoked token fails at once;
no token is ever written to the daemon's log or to an event.

Cost: ~0.1 s a case once the shared daemon runs; making the tokens, ~1 s each (the CLI).
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

import httpx
import pytest

from devcell.store import actor
from tests.server.conftest import Api
from tests.server.test_app import YAML, assert_problem, cell, wait_for

ROLES = ("viewer", "developer", "admin")


@functools.cache
def _tokens(api: Api) -> dict[str, str]:
    return {role: api.token(f"u-{role}", role) for role in ROLES}


@pytest.fixture
def tokens(api: Api) -> dict[str, str]:
    return _tokens(api)


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _admin_cell(api: Api, *, shared_with: str | None = None) -> str:
    """A cell the admin (the unix socket's caller) owns, shared with `shared_with`."""
    name = _unique("adm")
    text = cell(name) + (f"  sharedWith: [{shared_with}]\n" if shared_with else "")
    assert api.client.post("/api/v1/apply", content=text, headers=YAML).status_code == 200
    return name


def _own_cell(api: Api, tokens: dict[str, str]) -> str:
    """A cell the developer made over TLS: theirs."""
    name = _unique("dev")
    with api.tls_client(tokens["developer"]) as c:
        done = c.post("/api/v1/apply", content=cell(name), headers=YAML)
    assert done.status_code == 200, done.text
    return name


def _up(api: Api, cell_name: str) -> str:
    """`cell_name` once it runs."""
    wait_for(api, f"/api/v1/cells/{cell_name}",
             lambda r: r.json()["status"].get("phase") == "Running")
    return cell_name


def _action(verb: str, cell_name: str, body: dict[str, str] | None = None
            ) -> tuple[str, str, dict[str, str] | None]:
    return "POST", f"/api/v1/cells/{cell_name}/{verb}", body


def _snapshotted(api: Api, cell_name: str) -> str:
    """A snapshot of `cell_name`, recorded by the admin (the unix socket)."""
    name = _unique("snap")
    made = api.client.post(f"/api/v1/cells/{cell_name}/snapshot", json={"name": name})
    assert made.status_code == 202, made.text
    return name


def _ready(api: Api, cell_name: str) -> str:
    """A snapshot of `cell_name`, once it is Ready (a restore needs its checkpoint)."""
    name = _snapshotted(api, cell_name)
    wait_for(api, f"/api/v1/snapshots/{name}",
             lambda r: r.json()["status"].get("phase") == "Ready")
    return name


def _fork(api: Api, cell_name: str) -> tuple[str, str, dict[str, str]]:
    return _action("fork", cell_name, {"name": _unique("fork"),
                                        "snapshot": _snapshotted(api, cell_name)})


def _snapshot(cell_name: str) -> str:
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {{name: "
            f"{_unique('snap')}}}\nspec: {{cell: {cell_name}}}\n")


# (case, what to do: (method, path, body) from a target made for it, {role: (status, rule)})
READ = {role: (200, None) for role in ROLES}
CASES: dict[str, tuple[Any, dict[str, tuple[int, str | None]]]] = {
    "list cells": (lambda api, t: ("GET", "/api/v1/cells", None), READ),
    "list snapshots": (lambda api, t: ("GET", "/api/v1/snapshots", None), READ),
    "list operations": (lambda api, t: ("GET", "/api/v1/operations", None), READ),
    "list events": (lambda api, t: ("GET", "/api/v1/events", None), READ),
    "get a cell": (lambda api, t: ("GET", "/api/v1/cells/seed", None), READ),
    "list a cell's snapshots": (lambda api, t: (
        "GET", f"/api/v1/rows/snapshots?cell={_admin_cell(api)}", None), READ),
    "get an operation": (lambda api, t: (
        "GET", f"/api/v1/operations/{api.client.get('/api/v1/operations').json()['items'][0]['id']}",
        None), READ),
    "openapi": (lambda api, t: ("GET", "/api/v1/openapi.json", None), READ),
    # tokens are an admin's alone (token-admin), through the API as on the server's machine
    "list tokens": (lambda api, t: ("GET", "/api/v1/tokens", None), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "token-admin"),
        "admin": (200, None)}),
    "make a token": (lambda api, t: ("POST", "/api/v1/tokens", {
        "user": _unique("made"), "role": "viewer"}), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "token-admin"),
        "admin": (201, None)}),
    "revoke a token": (lambda api, t: (
        "DELETE", f"/api/v1/tokens/{api.token(_unique('gone'), 'viewer').split('_')[1]}", None),
        {"viewer": (403, "viewer-read-only"), "developer": (403, "token-admin"),
         "admin": (200, None)}),
    "list nodes": (lambda api, t: ("GET", "/api/v1/nodes", None), READ),
    "the lineage": (lambda api, t: ("GET", "/api/v1/lineage", None), READ),
    "df": (lambda api, t: ("GET", "/api/v1/df?verbose=true", None), READ),
    "volumes' rows": (lambda api, t: ("GET", "/api/v1/rows/volumes", None), READ),
    "controllers' rows": (lambda api, t: ("GET", "/api/v1/rows/controllers", None), READ),
    "get a node": (lambda api, t: ("GET", "/api/v1/nodes/local", None), READ),
    # a node is the whole team's: only an admin cordons one (the session's single host then
    # refuses, naming its configuration: there is no scheduler to keep cells off it)
    "cordon a node": (lambda api, t: ("POST", "/api/v1/nodes/local/cordon", {}), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "node-admin"),
        "admin": (400, None)}),
    "uncordon a node": (lambda api, t: ("POST", "/api/v1/nodes/local/uncordon", {}), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "node-admin"),
        "admin": (400, None)}),
    # ... or drains one (the single host refuses it before the stream: no other node)
    "drain a node": (lambda api, t: ("POST", "/api/v1/nodes/local/drain", {}), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "node-admin"),
        "admin": (400, None)}),
    "the ssh host key": (lambda api, t: ("GET", "/api/v1/ssh/host-key", None), READ),
    "describe a cell": (lambda api, t: ("GET", "/api/v1/cells/seed/describe", None), READ),
    "describe another's snapshot": (lambda api, t: (
        "GET", f"/api/v1/snapshots/{_snapshotted(api, _admin_cell(api))}/describe", None),
        READ),
    "describe an operation": (lambda api, t: (
        "GET", f"/api/v1/operations/{api.client.get('/api/v1/operations').json()['items'][0]['id']}"
        "/describe", None), READ),
    "diff a new cell": (lambda api, t: ("POST", "/api/v1/diff", cell(_unique("new"))), READ),
    "diff another's cell": (lambda api, t: (
        "POST", "/api/v1/diff", cell(_admin_cell(api)).replace("busybox", "busybox2")), READ),
    "create a cell": (lambda api, t: ("POST", "/api/v1/apply", cell(_unique("new"))), {
        "viewer": (403, "viewer-read-only"), "developer": (200, None), "admin": (200, None)}),
    "create a cell owned by another": (lambda api, t: (
        "POST", "/api/v1/apply", cell(_unique("new")).replace(
            "metadata: {name:", "metadata: {owner: someone-else, name:")), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "developer-creates-own"),
        "admin": (200, None)}),
    "change another's cell": (lambda api, t: (
        "POST", "/api/v1/apply", cell(_admin_cell(api)).replace("busybox", "busybox2")), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "developer-not-own"),
        "admin": (200, None)}),
    "change a cell shared with them": (lambda api, t: (
        "POST", "/api/v1/apply", (lambda n: cell(n).replace("busybox", "busybox2")
                                  + "  sharedWith: [u-developer]\n")(
            _admin_cell(api, shared_with="u-developer"))), {
        "viewer": (403, "viewer-read-only"), "developer": (200, "developer-shared"),
        "admin": (200, None)}),
    "take over a cell shared with them": (lambda api, t: (
        "POST", "/api/v1/apply", (lambda n: cell(n).replace(
            "metadata: {name:", "metadata: {owner: u-developer, name:")
            + "  sharedWith: [u-developer]\n")(_admin_cell(api, shared_with="u-developer"))), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "owner-grants"),
        "admin": (200, None)}),
    # the state directory's owner's cells clone with the server's git credentials: a
    # developer may not hand that owner a cell whose spec (a dotfiles URL) they wrote
    "give their cell to the server's owner": (lambda api, t: (
        "POST", "/api/v1/apply", (lambda n: cell(n).replace(
            "metadata: {name:", f"metadata: {{owner: {actor.local_user()}, name:")
            + "  sharedWith: [u-developer]\n")(_own_cell(api, t))), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "host-owner"),
        "admin": (200, None)}),
    "share on a cell shared with them": (lambda api, t: (
        "POST", "/api/v1/apply", (lambda n: cell(n) + "  sharedWith: [u-developer, eve]\n")(
            _admin_cell(api, shared_with="u-developer"))), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "owner-grants"),
        "admin": (200, None)}),
    "snapshot another's cell": (lambda api, t: (
        "POST", "/api/v1/apply", _snapshot(_admin_cell(api))), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "developer-not-own"),
        "admin": (200, None)}),
    "snapshot their own cell": (lambda api, t: (
        "POST", "/api/v1/apply", _snapshot(_own_cell(api, t))), {
        "viewer": (403, "viewer-read-only"), "developer": (200, None), "admin": (200, None)}),
    "delete another's cell": (lambda api, t: (
        "DELETE", f"/api/v1/cells/{_admin_cell(api)}", None), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "developer-not-own"),
        "admin": (200, None)}),
    "delete their own cell": (lambda api, t: (
        "DELETE", f"/api/v1/cells/{_own_cell(api, t)}", None), {
        "viewer": (403, "viewer-read-only"), "developer": (200, None), "admin": (200, None)}),
}
# The whole machine's (server/machine_routes.py): gc and changing images an admin's alone;
# the images listed, and a prune's dry run, every role's. A build's admin case asks with a
# `force` that is not a boolean: judged after the policy (400), before minutes of building.
MACHINE = {"viewer": (403, "viewer-read-only"), "admin": (200, None)}
CASES.update({
    "a gc's dry run": (lambda api, t: ("POST", "/api/v1/gc?dryRun=true", None), {
        **MACHINE, "developer": (403, "gc-admin")}),
    "gc": (lambda api, t: ("POST", "/api/v1/gc", None), {
        **MACHINE, "developer": (403, "gc-admin")}),
    "list the images": (lambda api, t: ("GET", "/api/v1/images", None), READ),
    "an image prune's dry run": (lambda api, t: (
        "POST", "/api/v1/images/prune?dryRun=true", None), READ),
    "prune the images": (lambda api, t: ("POST", "/api/v1/images/prune", None), {
        **MACHINE, "developer": (403, "image-admin")}),
    "build the base image": (lambda api, t: (
        "POST", "/api/v1/images/build-base?force=maybe", None), {
        **MACHINE, "developer": (403, "image-admin"), "admin": (400, None)}),
})


def _applied_from(api: Api, tokens: dict[str, str], *, theirs: bool) -> tuple[str, str, str]:
    """A prune through apply (store/client_sets.py): the developer applied a cell from a
    path, then its manifest is gone; when not `theirs`, the server's owner gave the cell to
    another user meanwhile (on its machine: an apply through the API would take it out of
    what the developer applied from the path, as a file's apply takes an object's source).
    The request applies another cell from the same path with prune=true."""
    path = f"/prune/{_unique('m')}"
    name = _unique("dev")
    with api.tls_client(tokens["developer"]) as c:
        done = c.post(f"/api/v1/apply?from=1:{path}", content=cell(name), headers=YAML)
    assert done.status_code == 200, done.text
    if not theirs:
        from tests.server.test_cli_remote import given_away

        given_away(api, name)
    return "POST", f"/api/v1/apply?prune=true&from=1:{path}", cell(_unique("new"))


CASES.update({
    "prune their own cell": (lambda api, t: _applied_from(api, t, theirs=True), {
        "viewer": (403, "viewer-read-only"), "developer": (200, None), "admin": (200, None)}),
    "prune a cell that is another's now": (lambda api, t: _applied_from(api, t, theirs=False), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "developer-not-own"),
        "admin": (200, None)}),
})
# The actions on a cell (server/actions.py): the policy's verb of the same name on the cell.
ACTED = {"viewer": (403, "viewer-read-only"), "developer": (202, None), "admin": (202, None)}
NOT_THEIRS = {**ACTED, "developer": (403, "developer-not-own")}
for _verb in ("sleep", "start"):
    CASES.update({
        f"{_verb} another's cell": (
            lambda api, t, v=_verb: _action(v, _admin_cell(api)), NOT_THEIRS),
        f"{_verb} their own cell": (lambda api, t, v=_verb: _action(v, _own_cell(api, t)), ACTED),
        f"{_verb} a cell shared with them": (lambda api, t, v=_verb: _action(
            v, _admin_cell(api, shared_with="u-developer")), ACTED),
    })
# restart and rerun-hooks ask a running cell (else a 422 before the policy matters)
for _verb in ("restart", "rerun-hooks"):
    CASES.update({
        f"{_verb} another's cell": (
            lambda api, t, v=_verb: _action(v, _up(api, _admin_cell(api))), NOT_THEIRS),
        f"{_verb} their own cell": (
            lambda api, t, v=_verb: _action(v, _up(api, _own_cell(api, t))), ACTED),
        f"{_verb} a cell shared with them": (lambda api, t, v=_verb: _action(
            v, _up(api, _admin_cell(api, shared_with="u-developer"))), ACTED),
    })
# a restore (POST /snapshots/NAME/restore) is the restore verb on the cell it restores into
for _whose, _made, _expected in (
        ("another's cell", lambda api, t: _admin_cell(api), NOT_THEIRS),
        ("their own cell", _own_cell, ACTED),
        ("a cell shared with them",
         lambda api, t: _admin_cell(api, shared_with="u-developer"), ACTED)):
    CASES[f"restore {_whose}"] = (lambda api, t, made=_made: (
        "POST", f"/api/v1/snapshots/{_ready(api, _up(api, made(api, t)))}/restore", {}),
        _expected)
CASES.update({
    "take a snapshot of another's cell": (lambda api, t: _action(
        "snapshot", _admin_cell(api), {"name": _unique("s")}), NOT_THEIRS),
    "take a snapshot of their own cell": (lambda api, t: _action(
        "snapshot", _own_cell(api, t), {"name": _unique("s")}), ACTED),
    "fork another's cell": (lambda api, t: _fork(api, _admin_cell(api)), NOT_THEIRS),
    "fork their own cell": (lambda api, t: _fork(api, _own_cell(api, t)), ACTED),
    "fork a cell shared with them": (lambda api, t: _fork(
        api, _admin_cell(api, shared_with="u-developer")), ACTED),
    # exclusive: false (the CLI's): a fork over a recorded cell needs leave to change it
    "fork over another's cell": (lambda api, t: (lambda own: _action("fork", own, {
        "name": _admin_cell(api), "snapshot": _snapshotted(api, own), "exclusive": False}))(
            _own_cell(api, t)), {"viewer": (403, "viewer-read-only"),
                                 "developer": (403, "developer-not-own"),
                                 "admin": (422, None)}),
    "take a snapshot again of their own cell": (lambda api, t: (lambda own: _action(
        "snapshot", own, {"name": _snapshotted(api, own), "exclusive": False}))(
            _own_cell(api, t)), ACTED),
    # ... and over a cell shared with them whose sharedWith differs from the source's: the
    # fork would record the source's, which only the target's owner may (found by attack27c)
    "fork over a cell shared with them, changing who it is shared with": (
        lambda api, t: _fork_over_shared(api), {
            "viewer": (403, "viewer-read-only"), "developer": (403, "owner-grants"),
            "admin": (202, None)}),
})
def _gated_op(api: Api) -> str:
    """A suspended operation (an admin's cell's delete at its approval gate)."""
    import tempfile
    from pathlib import Path

    from tests.server.test_op_actions import gated

    return gated(api, Path(tempfile.mkdtemp(prefix="gated-")))[1]


# A suspended operation is answered as what it does to its object (server/op_actions.py).
CASES.update({
    "cancel the gated delete of another's cell": (lambda api, t: (
        "POST", f"/api/v1/operations/{_gated_op(api)}/cancel", None),
        {"viewer": (403, "viewer-read-only"), "developer": (403, "developer-not-own"),
         "admin": (200, None)}),
    "resume the gated delete of another's cell without its answer": (lambda api, t: (
        "POST", f"/api/v1/operations/{_gated_op(api)}/resume", None),
        {"viewer": (403, "viewer-read-only"), "developer": (403, "developer-not-own"),
         "admin": (422, None)}),  # allowed, and told what the gate asks
})


# A new cell restored from a snapshot (spec.workspace.from) is a fork of the snapshot's cell:
# through apply as through the fork action (found by attack27c: a developer took another's
# workspace by applying a cell from their snapshot).
CASES.update({
    "apply a fork of another's snapshot": (lambda api, t: (
        "POST", "/api/v1/apply", _forked(_unique("new"), _snapshotted(api, _admin_cell(api)))),
        {"viewer": (403, "viewer-read-only"), "developer": (403, "developer-not-own"),
         "admin": (200, None)}),
    "apply a fork of a snapshot shared with them": (lambda api, t: (
        "POST", "/api/v1/apply", _forked(_unique("new"), _snapshotted(
            api, _admin_cell(api, shared_with="u-developer")))),
        {"viewer": (403, "viewer-read-only"), "developer": (200, None), "admin": (200, None)}),
    "apply a fork of their own snapshot": (lambda api, t: (
        "POST", "/api/v1/apply", _forked(_unique("new"), _snapshotted(api, _own_cell(api, t)))),
        {"viewer": (403, "viewer-read-only"), "developer": (200, None), "admin": (200, None)}),
})


# A cell naming the server's own files, devices or network, sent through the API: only an
# admin's (found by attack27c: with the daemon started in /, a developer built an image from
# another user's 0700 home folder and read it in their cell; with allowedHostPaths, one bound
# another user's folder as a workspace and wrote it as them). The admin's is then judged by
# admission as any manifest is (here refused: the test configuration allows none of them).
HOST_ONLY = {"viewer": (403, "viewer-read-only"), "developer": (403, "host-admin"),
             "admin": (422, None)}
for _case, _spec in {
        "a build on the server": "  build: {context: .}\n",
        "a sidecar's build on the server": "  sidecars: [{name: db, build: {context: /tmp}}]\n",
        "a local feature": "  features: [{ref: ./feature}]\n",
        "a host mount": "  mounts: [{hostPath: /tmp, mountPath: /mnt}]\n",
        "a host-path workspace": "  workspace: {source: {hostPath: {path: /tmp}}}\n",
        "a directory workspace": "  workspace: {source: {directory: {path: /tmp}}}\n",
        "a git repository on the server": "  workspace: {source: {git: {url: 'file:///tmp'}}}\n",
        "privileged": "  security: {privileged: true}\n",
        "host network": "  network: {mode: host}\n"}.items():
    CASES[f"create a cell naming {_case}"] = (
        lambda api, t, spec=_spec: ("POST", "/api/v1/apply", (
            cell(_unique("host")) + spec).replace("  image: devcell/busybox:latest\n", "")
            if "build" in spec else cell(_unique("host")) + spec), HOST_ONLY)
CASES["give their own cell a host mount"] = (lambda api, t: (
    "POST", "/api/v1/apply", cell(_own_cell(api, t)) + "  mounts: [{hostPath: /tmp, "
    "mountPath: /mnt}]\n"), HOST_ONLY)


# The streams (WebSockets; "WS": an upgrade, its refusal read from the denial response): the
# policy's verb on the cell before anything else. The fake backend cannot forward ports, so
# a request the policy allows meets its refusal (502), which comes after.
FORWARDED = {"viewer": (403, "viewer-read-only"), "developer": (502, None), "admin": (502, None)}
CASES.update({
    "port-forward to another's cell": (lambda api, t: (
        "WS", f"/api/v1/cells/{_admin_cell(api)}/portforward?port=80", None),
        {**FORWARDED, "developer": (403, "developer-not-own")}),
    "port-forward to their own cell": (lambda api, t: (
        "WS", f"/api/v1/cells/{_own_cell(api, t)}/portforward?port=80", None), FORWARDED),
    "port-forward to a cell shared with them": (lambda api, t: (
        "WS", f"/api/v1/cells/{_admin_cell(api, shared_with='u-developer')}/portforward"
        "?port=80", None), FORWARDED),
    # ssh (ssh-proxy through a server): the same stream to the cell's SSH server
    "ssh to another's cell": (lambda api, t: (
        "WS", f"/api/v1/cells/{_admin_cell(api)}/ssh", None),
        {**FORWARDED, "developer": (403, "developer-not-own")}),
    "ssh to their own cell": (lambda api, t: (
        "WS", f"/api/v1/cells/{_own_cell(api, t)}/ssh", None), FORWARDED),
    "ssh to a cell shared with them": (lambda api, t: (
        "WS", f"/api/v1/cells/{_admin_cell(api, shared_with='u-developer')}/ssh", None),
        FORWARDED),
})


# A snapshot's archive (server/transfer_routes.py): an export is the `export` verb on the
# snapshot's cell (its workspace, read as exec reads it); an import creates a snapshot that
# is its caller's (a viewer refused before its body is read), its recorded owner's since it
# has no cell here.
EXPORTED = {"viewer": (403, "viewer-read-only"), "developer": (200, None), "admin": (200, None)}
CASES.update({
    "export another's snapshot": (lambda api, t: (
        "GET", f"/api/v1/snapshots/{_ready(api, _up(api, _admin_cell(api)))}/archive", None),
        {**EXPORTED, "developer": (403, "developer-not-own")}),
    "export a snapshot of their own cell": (lambda api, t: (
        "GET", f"/api/v1/snapshots/{_ready(api, _up(api, _own_cell(api, t)))}/archive",
        None), EXPORTED),
    "export a snapshot of a cell shared with them": (lambda api, t: (
        "GET", f"/api/v1/snapshots/"
        f"{_ready(api, _up(api, _admin_cell(api, shared_with='u-developer')))}/archive",
        None), EXPORTED),
    "export a snapshot they imported": (lambda api, t: (
        "GET", f"/api/v1/snapshots/{_imported(api, t['developer'])}/archive", None), EXPORTED),
    "export a snapshot another imported": (lambda api, t: (
        "GET", f"/api/v1/snapshots/{_imported(api, None)}/archive", None),
        {**EXPORTED, "developer": (403, "developer-not-own")}),
    "import a snapshot archive": (lambda api, t: (
        "POST", f"/api/v1/snapshots/import?name={_unique('in')}", _archive(api)),
        {"viewer": (403, "viewer-read-only"), "developer": (201, None), "admin": (201, None)}),
    # push and pull use the server's registry logins: an admin's alone (registry-admin); the
    # admin's here names no registry (refused as the CLI refuses it, before any is asked)
    "push a snapshot": (lambda api, t: (
        "POST", f"/api/v1/snapshots/{_snapshotted(api, _own_cell(api, t))}/push",
        {"target": "not a reference!"}), {"viewer": (403, "viewer-read-only"),
                                          "developer": (403, "registry-admin"),
                                          "admin": (400, None)}),
    "pull a snapshot": (lambda api, t: (
        "POST", "/api/v1/snapshots/pull", {"source": "not a reference!"}), {
        "viewer": (403, "viewer-read-only"), "developer": (403, "registry-admin"),
        "admin": (400, None)}),
})


@functools.cache
def _archive(api: Api) -> bytes:
    """An archive of a snapshot the admin took (one per session)."""
    snapshot = _ready(api, _up(api, _admin_cell(api)))
    answer = api.client.get(f"/api/v1/snapshots/{snapshot}/archive")
    assert answer.status_code == 200, answer.text
    return answer.content


def _imported(api: Api, token: str | None) -> str:
    """A snapshot imported from `_archive` by `token`'s user over TLS (None: the admin, on
    the unix socket): theirs, with no cell here."""
    name = _unique("in")
    path, headers = f"/api/v1/snapshots/import?name={name}", {"Content-Type": "application/x-tar"}
    if token is None:
        made = api.client.post(path, content=_archive(api), headers=headers)
    else:
        with api.tls_client(token) as c:
            made = c.post(path, content=_archive(api), headers=headers)
    assert made.status_code == 201, made.text
    return name


def _upgrade(api: Api, token: str, path: str) -> httpx.Response:
    """A WebSocket upgrade of `path` over TLS with `token`: its refusal, as an HTTP answer
    (an upgrade that succeeded is a 101)."""
    import ssl

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    trusted = ssl.create_default_context(cafile=str(api.certificate))
    url = api.url.replace("https://", "wss://") + path
    try:
        with connect(url, ssl=trusted, proxy=None, open_timeout=30,
                     additional_headers={"Authorization": f"Bearer {token}"}):
            return httpx.Response(101)
    except InvalidStatus as refused:
        answer = refused.response
        return httpx.Response(answer.status_code, content=bytes(answer.body or b""),
                              headers={"content-type": answer.headers.get("content-type",
                                                                          "")})


def _forked(name: str, snapshot: str) -> str:
    """A cell manifest whose workspace is restored from `snapshot`."""
    return cell(name) + f"  workspace: {{from: {{snapshot: {snapshot}}}}}\n"


def _fork_over_shared(api: Api) -> tuple[str, str, dict[str, Any]]:
    """The admin's cell shared with u-developer and eve, and the admin's fork of it shared
    with u-developer alone: forking the cell over that fork again (exclusive: false) would
    share the fork with eve."""
    source = _admin_cell(api, shared_with="u-developer, eve")
    snapshot = _snapshotted(api, source)
    target = _unique("fork")
    made = api.client.post(f"/api/v1/cells/{source}/fork",
                           json={"name": target, "snapshot": snapshot})
    assert made.status_code == 202, made.text
    narrowed = _forked(target, snapshot) + "  sharedWith: [u-developer]\n"
    assert api.client.post("/api/v1/apply", content=narrowed, headers=YAML).status_code == 200
    return _action("fork", source, {"name": target, "snapshot": snapshot, "exclusive": False})


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", list(CASES))
def test_every_route_for_every_role(api: Api, tokens: dict[str, str], case: str,
                                    role: str) -> None:
    make, expected = CASES[case]
    method, path, body = make(api, tokens)
    status, rule = expected[role]
    before = {e["id"] for e in api.client.get("/api/v1/events").json()["items"]}
    with api.tls_client(tokens[role]) as c:
        if method == "WS":
            response = _upgrade(api, tokens[role], path)
        elif isinstance(body, dict):  # an action's fields
            response = c.request(method, path, json=body)
        elif isinstance(body, bytes):  # a snapshot archive
            response = c.request(method, path, content=body,
                                 headers={"Content-Type": "application/x-tar"})
        else:
            response = c.request(method, path, content=body,
                                 headers=YAML if body is not None else {})
    if status == 403:
        doc = assert_problem(response, 403)
        assert f"refused by rule {rule} " in doc["detail"]
        events = api.client.get("/api/v1/events").json()["items"]
        assert not [e for e in events if e["id"] not in before
                    and e.get("actor") == f"u-{role}"]  # nothing recorded in their name
    else:
        assert response.status_code == status, response.text


def test_without_a_valid_token_every_route_is_401(api: Api, tokens: dict[str, str]) -> None:
    admin = tokens["admin"]
    altered = admin[:-1] + ("1" if admin.endswith("0") else "0")  # a wrong secret
    for token in (None, "not-a-token", admin + "x", altered):
        with api.tls_client(token) as c:
            for method, path in (("GET", "/api/v1/cells"), ("GET", "/api/v1/cells/seed"),
                                 ("GET", "/api/v1/openapi.json"),
                                 ("GET", "/api/v1/ssh/host-key"),
                                 ("DELETE", "/api/v1/cells/seed"),
                                 ("POST", "/api/v1/apply"), ("POST", "/api/v1/diff"),
                                 ("POST", "/api/v1/operations/op_x/resume"),
                                 ("POST", "/api/v1/operations/op_x/cancel"),
                                 ("POST", "/api/v1/cells/seed/sleep"),
                                 ("POST", "/api/v1/cells/seed/fork"),
                                 ("POST", "/api/v1/cells/seed/restart"),
                                 ("POST", "/api/v1/cells/seed/rerun-hooks"),
                                 ("POST", "/api/v1/snapshots/s/restore"),
                                 ("POST", "/api/v1/nodes/local/drain"),
                                 ("GET", "/api/v1/rows/snapshots?cell=seed"),
                                 ("GET", "/api/v1/snapshots/s/archive"),
                                 ("POST", "/api/v1/snapshots/import"),
                                 ("POST", "/api/v1/snapshots/s/push"),
                                 ("POST", "/api/v1/snapshots/pull"),
                                 ("GET", "/api/v1/cells/seed/describe")):
                response = c.request(method, path, content=cell("x"), headers=YAML)
                doc = assert_problem(response, 401)
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert doc["detail"] == "the token is not valid (unknown, expired or revoked)"


def test_plain_http_on_the_tls_port_gets_nothing(api: Api) -> None:
    with httpx.Client(base_url=api.url.replace("https://", "http://"), timeout=10) as c:
        with pytest.raises(httpx.HTTPError):
            c.get("/api/v1/cells").raise_for_status()


def test_a_revoked_token_fails_at_once(api: Api) -> None:
    token = api.token("short-lived", "viewer")
    with api.tls_client(token) as c:
        assert c.get("/api/v1/cells").status_code == 200
        revoked = api.cli("token", "revoke", token.split("_")[1])  # dct_<id>_<secret>
        assert revoked.returncode == 0, revoked.stderr
        assert_problem(c.get("/api/v1/cells"), 401)


def test_an_admin_makes_and_revokes_a_token_through_the_api(api: Api,
                                                             tokens: dict[str, str]) -> None:
    """An admin on their own machine makes a teammate's token: in the answer once (never
    cached), recorded in the admin's name; it works at once, and its revoke through the API
    (by id: a whole token in the path is refused without being repeated) ends it at once."""
    user = _unique("mate")
    with api.tls_client(tokens["admin"]) as admin:
        made = admin.post("/api/v1/tokens", json={"user": user, "role": "developer",
                                                  "expires": "1h"})
        assert made.status_code == 201, made.text
        assert made.headers["cache-control"] == "no-store"
        token, item = made.json()["token"], made.json()["item"]
        assert item["user"] == user and item["role"] == "developer"
        assert item["createdBy"] == "u-admin" and item["expiresAt"] is not None
        with api.tls_client(token) as mate:
            assert mate.get("/api/v1/cells").status_code == 200
            whole = admin.delete(f"/api/v1/tokens/{token}")
            assert whole.status_code == 404 and token not in whole.text
            for answer in (admin.get(f"/api/v1/tokens/{token}"),  # 405, its path repeated
                           admin.delete(f"/api/v1/tokens/{token}/x")):  # no such route
                assert answer.status_code in (404, 405) and token[20:] not in answer.text
                assert f"dct_{item['id']}_" in answer.text  # the id alone
            assert mate.get("/api/v1/cells").status_code == 200
            gone = admin.delete(f"/api/v1/tokens/{item['id']}")
            assert gone.status_code == 200 and gone.json()["revoked"] is True
            assert_problem(mate.get("/api/v1/cells"), 401)
        listed = {t["id"]: t for t in admin.get("/api/v1/tokens").json()["items"]}
        assert listed[item["id"]]["state"] == "revoked"
        assert token not in admin.get("/api/v1/tokens").text
    events = api.client.get("/api/v1/events").json()["items"]
    made_event = [e for e in events if e["reason"] == "TokenCreated"
                  and item["id"] in e["message"]]
    assert made_event and made_event[0].get("actor") == "u-admin"
    assert token not in str(events)


def test_a_watch_ends_when_its_token_is_revoked(api: Api) -> None:
    """A watch opened with a token stops soon after the token is revoked (or expires): it
    used to stream on until its timeoutSeconds, up to an hour, to a caller no longer let in."""
    import threading
    import time

    token = api.token("watcher", "viewer")
    ended: list[float] = []

    def watch() -> None:
        with api.tls_client(token) as c, c.stream("GET", "/api/v1/events", params={
                "watch": "true", "timeoutSeconds": "60"}) as r:
            assert r.status_code == 200
            for _ in r.iter_lines():
                pass
        ended.append(time.monotonic())

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(1.0)
    assert not ended
    assert api.cli("token", "revoke", token.split("_")[1]).returncode == 0
    revoked = time.monotonic()
    thread.join(20)
    assert ended and ended[0] - revoked < 10


def test_the_developers_cell_is_theirs_and_says_so(api: Api, tokens: dict[str, str]) -> None:
    name = _own_cell(api, tokens)
    doc = api.client.get(f"/api/v1/cells/{name}").json()
    assert doc["metadata"]["owner"] == "u-developer"
    events = api.client.get("/api/v1/events", params={"for": f"cell/{name}"}).json()["items"]
    assert events[0]["actor"] == "u-developer"


def test_tokens_never_reach_the_log_or_the_events(api: Api, tokens: dict[str, str]) -> None:
    with api.tls_client(tokens["developer"]) as c:
        c.post("/api/v1/apply", content=cell(_unique("leak")), headers=YAML)
        c.get("/api/v1/cells")
    events = api.client.get("/api/v1/events").text
    log = api.log.read_text(errors="replace")
    for token in tokens.values():
        secret = token.rpartition("_")[2]
        assert token not in log and token not in events
        assert secret not in log and secret not in events


def test_one_user_who_is_not_an_admin_holds_at_most_32_watches(api: Api) -> None:
    """One developer's watches took every one of the 128 slots and left everyone, admins too,
    503 (attack27c's open item): a user who is not an admin holds at most
    MAX_WATCHES_PER_USER; others, and admins, still watch; a closed watch gives its slot back."""
    import contextlib

    from devcell.server.app import MAX_WATCHES_PER_USER

    token = api.token(_unique("watch-hog"), "viewer")
    params = {"watch": "true", "timeoutSeconds": "60"}
    with contextlib.ExitStack() as held:
        hog = held.enter_context(api.tls_client(token))  # httpx pools up to 100
        for _ in range(MAX_WATCHES_PER_USER):
            r = held.enter_context(hog.stream("GET", "/api/v1/events", params=params))
            assert r.status_code == 200
        refused = hog.get("/api/v1/events", params=params)
        assert refused.status_code == 503
        assert "watches and waits open, the most one user may" in refused.json()["detail"]
        other = api.token(_unique("watcher"), "viewer")
        with api.tls_client(other) as c, c.stream("GET", "/api/v1/events", params={
                "watch": "true", "timeoutSeconds": "1"}) as r:
            assert r.status_code == 200
        with api.client.stream("GET", "/api/v1/events", params={
                "watch": "true", "timeoutSeconds": "1"}) as r:  # the socket's admin
            assert r.status_code == 200
    with api.tls_client(token) as c, c.stream("GET", "/api/v1/events", params={
            "watch": "true", "timeoutSeconds": "1"}) as r:
        assert r.status_code == 200


def test_an_action_refused_for_its_wait_records_nothing(api: Api) -> None:
    """A developer at the watch cap asks for a snapshot with wait=true: the 503 comes before
    anything is recorded (it used to record the snapshot, then refuse the wait: a client
    retrying the 503 made it twice)."""
    import contextlib

    from devcell.server.app import MAX_WATCHES_PER_USER

    user = _unique("waiter")
    token = api.token(user, "developer")
    name = _own_cell(api, {"developer": token})
    params = {"watch": "true", "timeoutSeconds": "60"}
    with contextlib.ExitStack() as held, api.tls_client(token) as c:
        for _ in range(MAX_WATCHES_PER_USER):
            assert held.enter_context(c.stream("GET", "/api/v1/events",
                                               params=params)).status_code == 200
        snap = _unique("never")
        refused = c.post(f"/api/v1/cells/{name}/snapshot", params={"wait": "true"},
                         json={"name": snap})
        assert refused.status_code == 503, refused.text
    assert api.client.get(f"/api/v1/snapshots/{snap}").status_code == 404


def test_a_diff_confirms_no_guess_of_anothers_secret(api: Api, tokens: dict[str, str]) -> None:
    """A diff that says whether a value given equals the recorded secret confirms a guess:
    only who may update the cell (its owner, those it is shared with, an admin) is told;
    a viewer's or another developer's diff leaves it undecided, the same for a right guess
    and a wrong one, and `<redacted>` (get's own output) still means the recorded value."""
    name = _unique("sec")
    text = cell(name) + "  env:\n    - {name: TOKEN, value: VALUE, secret: true}\n"
    assert api.client.post("/api/v1/apply", content=text.replace("VALUE", "hunter2"),
                           headers=YAML).status_code == 200

    def diffed(token: str | None, value: str) -> dict[str, Any]:
        body = text.replace("VALUE", value)
        if token is None:
            done = api.client.post("/api/v1/diff", content=body, headers=YAML)
        else:
            with api.tls_client(token) as c:
                done = c.post("/api/v1/diff", content=body, headers=YAML)
        assert done.status_code == 200, done.text
        return dict(done.json())

    for role in ("viewer", "developer"):
        right, wrong = (diffed(tokens[role], v) for v in ("hunter2", "guess"))
        assert right == wrong and right["differs"] and right["items"][0]["undecided"], right
        assert "secret values" in right["warnings"][0] and "hunter2" not in str(right)
        assert not diffed(tokens[role], "<redacted>")["differs"]
    assert not diffed(None, "hunter2")["differs"]  # the admin: told
    assert "<secret changed>" in str(diffed(None, "guess")["items"][0]["hunks"])


def test_a_diff_of_a_cell_naming_the_servers_files_is_an_admins(
        api: Api, tokens: dict[str, str], tmp_path: Any) -> None:
    """Judging a built cell's diff hashes its build context, a path on the server's disk,
    and shows the digest: a viewer could read (and hash the whole of) any directory the
    daemon can. Only an admin sends such a cell, to diff as to apply (rule host-admin)."""
    name = _admin_cell(api)
    built = cell(name).replace("image: devcell/busybox:latest",
                               f"build: {{context: {tmp_path}}}")
    for role in ("viewer", "developer"):
        with api.tls_client(tokens[role]) as c:
            doc = assert_problem(c.post("/api/v1/diff", content=built, headers=YAML), 403)
        assert "refused by rule host-admin " in doc["detail"], doc
        assert "spec.build" in doc["detail"], doc
    with api.tls_client(tokens["viewer"]) as c:  # the rest of a diff stays every role's
        assert c.post("/api/v1/diff", content=cell(name), headers=YAML).status_code == 200


def test_one_user_who_is_not_an_admin_has_at_most_4_apply_or_diff_requests(api: Api) -> None:
    """A diff of thousands of cells costs the daemon seconds of CPU and any role may ask it
    (attack42): a user who is not an admin has at most MAX_MANIFEST_REQUESTS_PER_USER apply
    and diff requests served at once (here held open by bodies that never come); the next
    is a 503 saying so, others still apply and diff, and a slot comes back when its request
    ends."""
    import socket
    import ssl
    import time
    import urllib.parse

    from devcell.server.app import MAX_MANIFEST_REQUESTS_PER_USER

    token = api.token(_unique("diff-hog"), "viewer")
    where = urllib.parse.urlsplit(api.url)
    trusted = ssl.create_default_context(cafile=str(api.certificate))
    held = []
    try:
        for _ in range(MAX_MANIFEST_REQUESTS_PER_USER):
            sock = trusted.wrap_socket(socket.create_connection(
                (where.hostname, where.port), timeout=30), server_hostname=where.hostname)
            sock.sendall(f"POST /api/v1/diff HTTP/1.1\r\nHost: devcell\r\nAuthorization: "
                         f"Bearer {token}\r\nContent-Type: application/yaml\r\n"
                         "Content-Length: 1000\r\n\r\n".encode())
            held.append(sock)
        text = cell(_unique("new"))
        with api.tls_client(token) as c:
            for _ in range(50):  # the held requests' slots are taken once their heads arrive
                refused = c.post("/api/v1/diff", content=text, headers=YAML)
                if refused.status_code == 503:
                    break
            assert refused.status_code == 503, refused.text
            assert "apply and diff requests open, the most one user may" in \
                refused.json()["detail"]
        other = api.token(_unique("differ"), "viewer")
        with api.tls_client(other) as c:
            assert c.post("/api/v1/diff", content=text, headers=YAML).status_code == 200
        assert api.client.post("/api/v1/diff", content=text, headers=YAML).status_code == 200
    finally:
        for sock in held:
            sock.close()
    with api.tls_client(token) as c:
        for _ in range(100):  # the server sees the connections closed and gives the slots back
            if c.post("/api/v1/diff", content=cell(_unique("new")), headers=YAML
                      ).status_code == 200:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the closed requests' slots did not come back")
