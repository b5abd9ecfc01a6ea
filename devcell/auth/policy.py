"""The policy: whether a principal may apply a verb to a resource, and which rule says so.

Three roles, one rule per case, every decision naming its rule (a refusal says which rule
refused it, so a user knows whether to ask for a role, for a cell to be shared with them,
or for an admin):

- an admin may do everything (`admin`);
- every role may list, get and watch every object (`read`); secret env values are never
  shown to anyone (store.views redacts them in every output), so reading leaks none;
- a viewer may do nothing else (`viewer-read-only`);
- only an admin manages tokens (`token-admin`), and pushes or pulls snapshots through the API
  (`registry-admin`: the server's registry logins are the whole team's);
- a developer may create objects they own (`developer-creates-own`: the creator becomes the
  owner, so a create naming another owner is refused), and change, exec into, read the logs
  of, ssh to, forward ports of, sleep, start, restart, rerun the hooks of, snapshot, fork,
  restore and delete their own cells, and export their snapshots (an archive is the cell's
  workspace, read as exec reads it) (`developer-own`), and those whose spec.sharedWith
  names them (`developer-shared`), and no one else's (`developer-not-own`);
- only a cell's owner (or an admin) changes its metadata.owner or spec.sharedWith
  (`owner-grants`, authorize_update): a developer it is shared with may change the rest of
  it, not make it theirs nor share it further;
- only an admin gives a cell to the state directory's owner (`host-owner`): that owner's
  cells clone with the server's git credentials (git_source.host_credentials).

A resource without an owner (an object recorded before owners were) belongs to no
developer: only an admin changes it. Nor does a node: only an admin cordons or uncordons one
(`node-admin`). Nor does the machine: only an admin collects its garbage (`gc-admin`) or
prunes and builds DevCell's images (`image-admin`); every role lists the images.
"""

from __future__ import annotations

from enum import StrEnum

from devcell.auth.principals import Principal, Role
from devcell.errors import Forbidden
from devcell.records import Record, field


class Verb(StrEnum):
    """What a request does to a resource (the CLI's verbs; `token_admin` for tokens)."""

    list = "list"
    get = "get"
    watch = "watch"
    create = "create"
    update = "update"
    delete = "delete"
    exec = "exec"
    logs = "logs"
    ssh = "ssh"
    port_forward = "port_forward"
    sleep = "sleep"
    start = "start"
    snapshot = "snapshot"
    fork = "fork"
    restart = "restart"
    rerun_hooks = "rerun-hooks"
    restore = "restore"
    export = "export"
    registry = "registry"
    token_admin = "token_admin"
    gc = "gc"
    image_admin = "image_admin"


READ_VERBS = frozenset({Verb.list, Verb.get, Verb.watch})
"""What every role may do to every object."""


class ResourceRef(Record):
    """What a verb acts on: its kind and name (None for a whole list), its owner (a cell's
    metadata.owner; a snapshot's is its cell's) and the users it is shared with
    (spec.sharedWith)."""

    kind: str
    name: str | None = None
    owner: str | None = None
    shared_with: tuple[str, ...] = field(default=())


class Decision(Record):
    """Whether the verb is allowed, and the name of the rule that decided (RULES)."""

    allowed: bool
    rule: str


RULES = {
    "admin": "an admin may do everything",
    "read": "every role may list, get and watch every object",
    "viewer-read-only": "a viewer may only list, get and watch",
    "token-admin": "only an admin manages tokens",
    "registry-admin": "only an admin pushes or pulls snapshots through the API: the server "
                      "reaches registries with its own engine's logins, the whole team's",
    "developer-creates-own": "a developer may create only objects they own",
    "developer-own": "a developer may change their own cells",
    "developer-shared": "a developer may change the cells whose spec.sharedWith names them",
    "developer-not-own": "a developer may change only their own cells and those whose "
                         "spec.sharedWith names them",
    "owner-grants": "only a cell's owner (or an admin) changes its metadata.owner or "
                    "spec.sharedWith",
    "host-admin": "only an admin sends a cell that names the server's own files, devices or "
                  "network (a build, a local feature, a host mount, a host-path, directory or "
                  "archive workspace, a git repository on the server, privileged, host "
                  "network): DevCell's configuration allows them for the whole server, not "
                  "for each user",
    "node-admin": "only an admin changes a node (cordon, uncordon): the machines belong to "
                  "the whole team",
    "host-owner": "only an admin gives a cell to the server's owner (its git clones would use "
                  "the server's git credentials with a spec another user wrote)",
    "gc-admin": "only an admin collects garbage (`devcell gc`, its dry run too): it removes "
                "what every user's cells left on the machine, and holds the reconcile lock "
                "while it judges",
    "image-admin": "only an admin prunes or builds DevCell's images (`devcell image prune`, "
                   "`image build-base`): the machine's engine holds them for every user",
}
"""Every rule's name and what it says (docs/auth.md lists the same)."""


def authorize(principal: Principal, verb: Verb, resource: ResourceRef) -> Decision:
    """Whether `principal` may `verb` `resource`: one rule decides, and is named."""
    if principal.role is Role.admin:
        return Decision(True, "admin")
    if verb in READ_VERBS:
        return Decision(True, "read")
    if principal.role is not Role.developer:  # a viewer, or a role this DevCell does not know
        return Decision(False, "viewer-read-only")
    if verb is Verb.token_admin:
        return Decision(False, "token-admin")
    if verb is Verb.registry:
        return Decision(False, "registry-admin")
    if verb is Verb.gc:
        return Decision(False, "gc-admin")
    if verb is Verb.image_admin:
        return Decision(False, "image-admin")
    if resource.kind == "Node":
        return Decision(False, "node-admin")
    if verb is Verb.create:
        return Decision(resource.owner == principal.user, "developer-creates-own")
    if resource.owner is not None and resource.owner == principal.user:
        return Decision(True, "developer-own")
    if principal.user in resource.shared_with:
        return Decision(True, "developer-shared")
    return Decision(False, "developer-not-own")


def require(principal: Principal, verb: Verb, resource: ResourceRef) -> Decision:
    """authorize(), raising errors.Forbidden (naming the rule) when the verb is refused."""
    decision = authorize(principal, verb, resource)
    if not decision.allowed:
        raise Forbidden(refusal(principal, verb, resource, decision.rule), rule=decision.rule)
    return decision


def authorize_update(principal: Principal, recorded: ResourceRef, wanted: ResourceRef,
                     *, server_owner: str | None = None) -> Decision:
    """Whether `principal` may update `recorded` to `wanted` (a manifest's: its owner None
    when metadata.owner is absent, which keeps the recorded one; its spec.sharedWith): the
    update verb, owner-grants when the owner or the users shared with would change, and
    host-owner when a developer would give the cell to `server_owner` (the state
    directory's owner, whose cells clone with the server's git credentials)."""
    decision = authorize(principal, Verb.update, recorded)
    if not decision.allowed or principal.role is Role.admin:
        return decision
    if server_owner is not None and wanted.owner == server_owner != recorded.owner:
        return Decision(False, "host-owner")
    grants = (wanted.owner is not None and wanted.owner != recorded.owner) \
        or set(wanted.shared_with) != set(recorded.shared_with)
    if grants and (recorded.owner is None or recorded.owner != principal.user):
        return Decision(False, "owner-grants")
    return decision


def require_update(principal: Principal, recorded: ResourceRef, wanted: ResourceRef,
                   *, server_owner: str | None = None) -> Decision:
    """authorize_update(), raising errors.Forbidden (naming the rule) when refused."""
    decision = authorize_update(principal, recorded, wanted, server_owner=server_owner)
    if not decision.allowed:
        raise Forbidden(refusal(principal, Verb.update, recorded, decision.rule),
                        rule=decision.rule)
    return decision


def require_host(principal: Principal, verb: Verb, resource: ResourceRef,
                 reach: str | None) -> None:
    """Refuse (rule host-admin) a cell whose spec reaches the server's own files, devices or
    network (`reach`: the field that does, resources.host_reach) unless an admin sends it."""
    if reach is not None and principal.role is not Role.admin:
        from devcell.names import printable

        raise Forbidden(f"{refusal(principal, verb, resource, 'host-admin')}: it names "
                        f"{printable(reach)}", rule="host-admin")


def refusal(principal: Principal, verb: Verb, resource: ResourceRef, rule: str) -> str:
    """The refusal's message: who, what, and the rule that refused (user strings escaped)."""
    from devcell.names import printable

    target = printable(resource.kind)
    if resource.name is not None:
        target += f' "{printable(resource.name)}"'
    return (f"{printable(principal.user)} ({principal.role}) may not {verb} {target}: "
            f"refused by rule {rule} ({RULES[rule]})")


def cell_resource(name: str, metadata: dict[str, object], spec: dict[str, object],
                  *, kind: str = "Cell") -> ResourceRef:
    """The resource a recorded cell is (its owner from metadata.owner, its sharedWith), from
    its manifest's parts; anything malformed in them counts as absent."""
    owner = metadata.get("owner")
    shared = spec.get("sharedWith")
    users = tuple(u for u in shared if isinstance(u, str)) if isinstance(shared, list) else ()
    return ResourceRef(kind, name, owner if isinstance(owner, str) else None, users)


LIST_VIEW = "every-object-secrets-redacted"
"""What every role's lists show (rule `read`): every object, secret values redacted."""


def list_view(principal: Principal) -> str:
    """What decides, beyond its query, the content of a list `principal` reads. Today one
    view for every role (rule `read`: every object, secret values redacted by store.views).
    The API serves a list's encoded bytes to every request of the same query and view
    (server.lists): a rule that filters or redacts lists per user or role must make this
    answer differ between those it shows differently."""
    del principal
    return LIST_VIEW

