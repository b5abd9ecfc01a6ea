"""The policy, generated from one table: every role, every verb, a cell of one's own, one
shared with one, and another's."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.auth.policy import RULES, ResourceRef, Verb, authorize, cell_resource, require
from devcell.auth.principals import Principal, Role
from devcell.errors import Forbidden

RELATIONS = ("owned", "shared", "others")
V, D, A = "viewer", "developer", "admin"

_READ = {V: ("+read",) * 3, D: ("+read",) * 3, A: ("+admin",) * 3}
_CHANGE = {V: ("-viewer-read-only",) * 3,
           D: ("+developer-own", "+developer-shared", "-developer-not-own"),
           A: ("+admin",) * 3}

TABLE: dict[Verb, dict[str, tuple[str, str, str]]] = {
    # verb: role -> the decision for (owned, shared, others): +allowed / -refused, and the rule
    Verb.list: _READ,
    Verb.get: _READ,
    Verb.watch: _READ,
    Verb.create: {V: ("-viewer-read-only",) * 3,
                  D: ("+developer-creates-own", "-developer-creates-own",
                      "-developer-creates-own"),
                  A: ("+admin",) * 3},
    Verb.update: _CHANGE,
    Verb.delete: _CHANGE,
    Verb.exec: _CHANGE,
    Verb.logs: _CHANGE,
    Verb.ssh: _CHANGE,
    Verb.port_forward: _CHANGE,
    Verb.sleep: _CHANGE,
    Verb.start: _CHANGE,
    Verb.snapshot: _CHANGE,
    Verb.fork: _CHANGE,
    Verb.restart: _CHANGE,
    Verb.rerun_hooks: _CHANGE,
    Verb.restore: _CHANGE,
    Verb.export: _CHANGE,
    Verb.registry: {V: ("-viewer-read-only",) * 3, D: ("-registry-admin",) * 3,
                    A: ("+admin",) * 3},
    Verb.token_admin: {V: ("-viewer-read-only",) * 3, D: ("-token-admin",) * 3,
                       A: ("+admin",) * 3},
    Verb.gc: {V: ("-viewer-read-only",) * 3, D: ("-gc-admin",) * 3, A: ("+admin",) * 3},
    Verb.image_admin: {V: ("-viewer-read-only",) * 3, D: ("-image-admin",) * 3,
                       A: ("+admin",) * 3},
}

CASES = [(Role(role), verb, relation, expected[i])
         for verb, by_role in TABLE.items() for role, expected in by_role.items()
         for i, relation in enumerate(RELATIONS)]


def resource(relation: str, user: str = "ana") -> ResourceRef:
    """A cell `user` owns, one bob owns and shares with `user` (and carol), or bob's own."""
    if relation == "owned":
        return ResourceRef("Cell", "mine", owner=user)
    if relation == "shared":
        return ResourceRef("Cell", "ours", owner="bob", shared_with=("carol", user))
    return ResourceRef("Cell", "theirs", owner="bob", shared_with=("carol",))


def test_the_table_covers_every_verb_role_and_rule() -> None:
    assert set(TABLE) == set(Verb)
    assert all(set(by_role) == {r.value for r in Role} for by_role in TABLE.values())
    # owner-grants and host-admin judge what a manifest asks for, beside the verb, and
    # node-admin a node, not a cell: below
    assert {cell[1:] for _, _, _, cell in CASES} == set(RULES) - {
        "owner-grants", "host-admin", "host-owner", "node-admin"}


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("verb", list(Verb))
def test_a_node_is_read_by_everyone_and_changed_by_an_admin_alone(role: Role,
                                                                  verb: Verb) -> None:
    """A node belongs to no developer, even one whose user name is the node's (an owner is
    never read from a node): `node-admin` refuses every change but an admin's."""
    decision = authorize(Principal("ana", role), verb, ResourceRef("Node", "w1", owner="ana"))
    if role is Role.admin:
        assert decision.allowed and decision.rule == "admin"
    elif verb in (Verb.list, Verb.get, Verb.watch):
        assert decision.allowed and decision.rule == "read"
    elif role is Role.viewer:
        assert not decision.allowed and decision.rule == "viewer-read-only"
    elif verb is Verb.token_admin:
        assert not decision.allowed and decision.rule == "token-admin"
    elif verb is Verb.registry:
        assert not decision.allowed and decision.rule == "registry-admin"
    elif verb in (Verb.gc, Verb.image_admin):  # the machine's, not a node's
        rule = "gc-admin" if verb is Verb.gc else "image-admin"
        assert not decision.allowed and decision.rule == rule
    else:
        assert not decision.allowed and decision.rule == "node-admin"


@pytest.mark.parametrize(("role", "verb", "relation", "expected"), CASES,
                         ids=[f"{r}-{v}-{rel}" for r, v, rel, _ in CASES])
def test_decision(role: Role, verb: Verb, relation: str, expected: str) -> None:
    principal = Principal("ana", role)
    decision = authorize(principal, verb, resource(relation))
    assert (decision.allowed, decision.rule) == (expected[0] == "+", expected[1:])
    if decision.allowed:
        assert require(principal, verb, resource(relation)) == decision
    else:
        with pytest.raises(Forbidden) as refused:
            require(principal, verb, resource(relation))
        assert refused.value.rule == decision.rule
        assert f"refused by rule {decision.rule} ({RULES[decision.rule]})" in str(refused.value)
        assert refused.value.exit_code == 1 and refused.value.permanent


def test_an_ownerless_resource_is_no_developers() -> None:
    """A node, or a cell recorded before owners were: only an admin changes it."""
    node = ResourceRef("Node", "n1")
    assert authorize(Principal("ana", Role.developer), Verb.update, node).rule == "node-admin"
    old = ResourceRef("Cell", "c1")
    assert authorize(Principal("ana", Role.developer), Verb.update, old).rule \
        == "developer-not-own"
    assert authorize(Principal("ana", Role.developer), Verb.get, node).allowed
    assert authorize(Principal("", Role.developer), Verb.delete, node).allowed is False
    assert authorize(Principal("ana", Role.admin), Verb.delete, node).allowed


def test_a_refusal_names_who_what_and_the_rule_escaped() -> None:
    with pytest.raises(Forbidden) as refused:
        require(Principal("ana", Role.viewer), Verb.exec,
                ResourceRef("Cell", "evil\x1b[2J", owner="bob"))
    assert str(refused.value) == (
        'ana (viewer) may not exec Cell "evil\\x1b[2J": refused by rule viewer-read-only '
        "(a viewer may only list, get and watch)")


def test_cell_resource_reads_owner_and_shared_with() -> None:
    ref = cell_resource("web", {"name": "web", "owner": "bob"},
                        {"sharedWith": ["ana", 3, "carol"]})
    assert ref == ResourceRef("Cell", "web", "bob", ("ana", "carol"))
    assert cell_resource("web", {"owner": 5}, {"sharedWith": "ana"}) \
        == ResourceRef("Cell", "web", None, ())


def test_reading_a_cell_never_shows_its_secret_values(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What `read` lets every role see: a cell's secret env values are redacted in every
    output (store.views), whoever owns the cell."""
    from devcell.cli.main import main

    state, path = tmp_path / "state", tmp_path / "api.yaml"
    path.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
                    "metadata: {name: api, owner: bob}\nspec:\n  backend: fake\n"
                    "  env: [{name: TOKEN, value: hunter2-secret, secret: true}]\n")
    assert main(["--state-dir", str(state), "apply", "-f", str(path)]) == 0
    for argv in (["get", "cells", "-o", "json"], ["get", "cell", "api", "-o", "yaml"],
                 ["describe", "cell", "api"], ["get", "events", "-o", "json"]):
        capsys.readouterr()
        assert main(["--state-dir", str(state), *argv]) == 0
        out = capsys.readouterr().out
        assert "hunter2-secret" not in out, argv
    assert "<redacted>" in (main(["--state-dir", str(state), "get", "cell", "api", "-o",
                                  "json"]) or capsys.readouterr().out)


def test_only_the_owner_changes_who_owns_or_shares_a_cell() -> None:
    """A developer a cell is shared with may update it, but not make it theirs by applying
    it with their own metadata.owner, nor share it further (or unshare it): that is its
    owner's (or an admin's) call, rule owner-grants."""
    from devcell.auth.policy import Decision, authorize_update, require_update

    ana, bob = Principal("ana", Role.developer), Principal("bob", Role.developer)
    recorded = ResourceRef("Cell", "ours", owner="bob", shared_with=("ana",))

    def wanted(owner: str | None, *shared: str) -> ResourceRef:
        return ResourceRef("Cell", "ours", owner, shared)

    assert authorize_update(ana, recorded, wanted(None, "ana")) \
        == Decision(True, "developer-shared")
    assert authorize_update(ana, recorded, wanted("bob", "ana")).allowed
    for takeover in (wanted("ana", "ana"), wanted(None, "ana", "eve"), wanted(None)):
        assert authorize_update(ana, recorded, takeover) == Decision(False, "owner-grants")
    with pytest.raises(Forbidden, match="owner-grants"):
        require_update(ana, recorded, wanted("ana", "ana"))
    assert authorize_update(bob, recorded, wanted("carol", "eve")) \
        == Decision(True, "developer-own")
    assert authorize_update(Principal("root", Role.admin), recorded, wanted("eve")).allowed
    assert authorize_update(Principal("eve", Role.developer), recorded, wanted("eve")) \
        == Decision(False, "developer-not-own")


def test_only_an_admin_gives_a_cell_to_the_servers_owner() -> None:
    """The state directory's owner's cells clone with the server's git credentials: a
    developer giving their cell (a dotfiles URL of their choice in the same apply) to that
    owner would clone with them what only the owner may read (found by attack-git)."""
    from devcell.auth.policy import Decision, authorize_update

    ana = Principal("ana", Role.developer)
    mine = ResourceRef("Cell", "mine", owner="ana", shared_with=())
    given = ResourceRef("Cell", "mine", "root", ("ana",))
    assert authorize_update(ana, mine, given).allowed  # no server owner named: as before
    assert authorize_update(ana, mine, given, server_owner="root") \
        == Decision(False, "host-owner")
    assert authorize_update(ana, mine, ResourceRef("Cell", "mine", "bob", ()),
                            server_owner="root").allowed
    assert authorize_update(Principal("admin2", Role.admin), mine, given,
                            server_owner="root").allowed


@pytest.mark.parametrize(("spec", "field"), [
    ({"image": "x"}, None),
    ({"build": {"context": "."}}, "spec.build"),
    ({"sidecars": [{"name": "db", "image": "x"}, {"name": "b", "build": {}}]},
     "spec.sidecars[1].build"),
    ({"features": [{"ref": "ghcr.io/devcontainers/features/node:1"}]}, None),
    ({"features": [{"ref": "ghcr.io/x:1"}, {"ref": "./mine"}]}, "spec.features[1].ref"),
    ({"features": [{"ref": "/srv/feature"}]}, "spec.features[0].ref"),
    ({"mounts": [{"hostPath": "/srv", "mountPath": "/m"}]}, "spec.mounts"),
    ({"workspace": {"source": {"hostPath": {"path": "/home/ana"}}}},
     "spec.workspace.source.hostPath"),
    ({"workspace": {"source": {"archive": {"path": "/x.tar"}}}},
     "spec.workspace.source.archive"),
    ({"workspace": {"source": {"git": {"url": "https://example.org/r.git"}}}}, None),
    ({"workspace": {"source": {"git": {"url": "FILE:///srv/r"}}}},
     "spec.workspace.source.git.url"),
    ({"dotfiles": {"git": {"url": "/home/ana/dots"}}}, "spec.dotfiles.git.url"),
    ({"security": {"capabilities": ["SYS_PTRACE"]}}, None),
    ({"security": {"privileged": True}}, "spec.security.privileged"),
    ({"security": {"devices": ["/dev/fuse"]}}, "spec.security.devices"),
    ({"network": {"mode": "host"}}, "spec.network.mode"),
    ({"hooks": {"hostInitialize": [["true"]]}}, "spec.hooks.hostInitialize"),
    ({"workspace": "not a mapping", "sidecars": [5]}, None),
])
def test_host_reach_names_the_field_and_only_an_admin_may_send_it(
        spec: dict[str, object], field: str | None) -> None:
    """A cell naming the server's own files, devices or network through the API (found by
    attack27c: a developer built an image from another user's 0700 folder)."""
    from devcell.auth.policy import require_host
    from devcell.auth.resources import host_reach

    assert host_reach(spec) == field
    cell = ResourceRef("Cell", "mine", owner="ana")
    require_host(Principal("root", Role.admin), Verb.create, cell, field)
    if field is None:
        require_host(Principal("ana", Role.developer), Verb.create, cell, field)
        return
    with pytest.raises(Forbidden) as refused:
        require_host(Principal("ana", Role.developer), Verb.create, cell, field)
    assert refused.value.rule == "host-admin"
    assert str(refused.value).endswith(f"it names {field}")
