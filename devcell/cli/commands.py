"""Every command of `devcell`, in one table: its words, the function that runs it, its help
and its arguments. The parser, the dispatch, shell completion and docs/cli.md's test all read
this table, so adding a command or a verb is one entry here (and its section in docs/cli.md).

Handlers are named as "module:function" and imported only when their command runs, so that
`devcell get` pays for no other command's imports.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from devcell.cli import arguments
from devcell.cli.arguments import duration
from devcell.records import Record

Arguments = Callable[[argparse.ArgumentParser], None]


class Group(Record):
    """A command whose verbs are commands of their own (`snapshot create`)."""

    help: str
    metavar: str = "VERB"


class Command(Record):
    """One command, or one verb of a group: its words, what runs it, its help and arguments."""

    words: tuple[str] | tuple[str, str]
    """("get",) or, for a verb of a group, ("snapshot", "create")."""
    handler: str
    """"module:function" under devcell.cli; the function takes the parsed arguments and
    returns the exit code."""
    help: str
    arguments: Arguments
    state: bool = True
    """Whether it uses the state directory (checked once before it runs: cli/main.py)."""
    recorded: bool = False
    """Whether it acts only on objects already recorded: with no state database it is refused
    before anything is made (a refused command leaves a new state directory as it was)."""


def _none(p: argparse.ArgumentParser) -> None:
    """A command without arguments of its own."""


def _selector(p: argparse.ArgumentParser) -> None:
    p.add_argument("-l", "--selector", metavar="SELECTOR",
                   help="label selector as kubectl's: team=core, tier!=db, 'team in (a,b)', "
                        "'env notin (prod)', owner, '!owner', joined by commas")


def _timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=duration, default=300.0)


def _apply(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--filename", action="append", required=True,
                   help="file, directory (recursive) or - for stdin; repeatable")
    p.add_argument("--dry-run", action="store_true", help="validate and show what would change")
    p.add_argument("--prune", action="store_true",
                   help="delete objects applied from these paths whose manifests are gone")
    p.add_argument("-l", "--selector", metavar="SELECTOR",
                   help="with --prune: prune only objects whose labels match")
    p.add_argument("--keep-pruned", type=arguments.keep_pruned, default=None, metavar="DURATION",
                   help="keep a pruned cell's workspace as a safety snapshot this long "
                        "(e.g. 12h, 7d as 168h; default 24h; 0: do not keep it)")
    p.add_argument("--timeout", type=duration, default=300.0,
                   help="how long to wait for convergence (e.g. 90s, 5m; default 5m)")
    p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="with a daemon running, wait until the objects are Ready (default on)")
    p.add_argument("--approve", action="store_true",
                   help="pass approval gates up front (e.g. deleting unsaved work)")
    p.add_argument("--workers", type=arguments.workers, default=None, metavar="N",
                   help="objects reconciled at once without a daemon (default: what the "
                        "backends suit: 8 for container, 1 for fake)")


def _get(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", type=arguments.kind(arguments.GET_KINDS), metavar="KIND",
                   help="cells, snapshots, volumes, operations, events, controllers or nodes")
    p.add_argument("names", nargs="*", metavar="NAME", help="names or ids (default: all)")
    p.add_argument("-o", "--output", default="table", metavar="FORMAT", type=arguments.get_output,
                   help="table, wide, yaml, json, name, jsonpath=TEMPLATE, jsonpath-file=FILE, "
                        "custom-columns=HEADER:PATH,..., custom-columns-file=FILE")
    _selector(p)
    p.add_argument("--field-selector", metavar="SELECTOR",
                   help="e.g. status.phase=Running,spec.backend!=fake (cells: metadata.name, "
                        "metadata.id, status.phase, spec.backend, spec.state; snapshots: "
                        "metadata.name, metadata.id, status.phase, spec.cell)")
    p.add_argument("--sort-by", metavar="JSONPATH",
                   help="order items by a field, e.g. .metadata.creationTimestamp")
    p.add_argument("--no-headers", action="store_true", help="tables without the header line")
    p.add_argument("--show-labels", action="store_true", help="add a LABELS column")
    p.add_argument("-L", "--label-columns", action="append", metavar="KEY[,KEY2]",
                   help="add a column with each label's value; repeatable")
    p.add_argument("-w", "--watch", action="store_true",
                   help="after listing, print rows again as they change (Ctrl-C to stop)")
    p.add_argument("--tree", action="store_true",
                   help="snapshots: lineage as a tree (cell -> snapshots -> forks -> ...)")
    p.add_argument("--for", dest="for_object", metavar="KIND/NAME",
                   help="events: only those of one object, e.g. --for cell/api")


def _describe(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", type=arguments.kind({**arguments.OBJECT_KINDS, "operation": "Operation",
                                                "op": "Operation", "operations": "Operation"}),
                   metavar="KIND", help="cell, snapshot or operation")
    p.add_argument("names", nargs="*", metavar="NAME", help="names or ids")
    _selector(p)


def _delete(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", nargs="?", type=arguments.kind(arguments.OBJECT_KINDS), metavar="KIND")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("-f", "--filename", action="append", help="delete the objects in these files")
    _selector(p)
    _timeout(p)
    p.add_argument("--approve", action="store_true",
                   help="delete even a workspace that changed since its last snapshot")
    p.add_argument("--workers", type=arguments.workers, default=None, metavar="N",
                   help="objects reconciled at once without a daemon (default: by backend)")


def _diff(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--filename", action="append", required=True)


def _snapshot_create(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell")
    p.add_argument("--name", required=True)
    p.add_argument("--ttl", default=None, type=arguments.ttl,
                   help="expire the snapshot this long after it is created (30m, 12h, 7d)")
    p.add_argument("--consistency", choices=("filesystem", "machine"), default=None,
                   help="machine: keep memory and processes too (vm cells); forks resume them")
    _timeout(p)


def _snapshot_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("snapshot")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the archive to write (- for standard output)")


def _snapshot_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="the archive (- for standard input)")
    p.add_argument("--name", default=None, help="the snapshot's name here (default: its "
                                                "name in the archive)")


def _snapshot_push(p: argparse.ArgumentParser) -> None:
    p.add_argument("snapshot")
    p.add_argument("target", metavar="REGISTRY/REPOSITORY[:TAG]",
                   help="where to store it (the engine's credentials, ~/.docker/config.json)")
    p.add_argument("--compression", choices=("zstd", "gzip", "none"), default="zstd",
                   help="the layer's compression (default zstd)")


def _snapshot_pull(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="REF", help="REGISTRY/REPOSITORY:TAG or "
                                                 "REGISTRY/REPOSITORY@sha256:DIGEST")
    p.add_argument("--name", default=None, help="the snapshot's name here (default: its "
                                                "name when it was pushed)")


def _snapshot_restore(p: argparse.ArgumentParser) -> None:
    p.add_argument("snapshot")
    p.add_argument("--cell", default=None,
                   help="the cell to restore (default: the snapshot's own; a fork may go "
                        "back to the snapshot it was forked from)")
    p.add_argument("--no-safety-snapshot", dest="safety", action="store_false",
                   help="do not snapshot the workspace first (its changes are then lost)")
    p.add_argument("--approve", action="store_true",
                   help="restore even over a workspace that changed since its last snapshot")
    p.add_argument("--dry-run", action="store_true",
                   help="show what would be done and replaced; change nothing")
    _timeout(p)


def _snapshot_list(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell")
    p.add_argument("-o", "--output", choices=["table", "wide", "yaml", "json", "name"],
                   default="table")


def _cell_fork(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell")
    p.add_argument("--snapshot", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--count", type=arguments.fork_count, metavar="N",
                   help="make N forks, NAME-1 to NAME-N (each --port HOST plus K-1)")
    ports = p.add_mutually_exclusive_group()
    ports.add_argument("--port", action="append", type=arguments.port_mapping, default=[],
                       metavar="CONTAINER:HOST",
                       help="publish the parent's CONTAINER port on host port HOST instead "
                            "(repeatable; the parent's own host ports are taken by the parent)")
    ports.add_argument("--no-ports", action="store_true",
                       help="publish none of the parent's ports")
    _timeout(p)


def _one_cell(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell")
    _timeout(p)


def _cell_restart(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell")
    p.add_argument("service", nargs="?", default=None,
                   help="restart only this service (default: the cell's runtime, all of them)")
    _timeout(p)


def _wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", type=arguments.kind(arguments.OBJECT_KINDS), metavar="KIND")
    p.add_argument("names", nargs="*", metavar="NAME")
    _selector(p)
    p.add_argument("--for", dest="condition", default=("Ready", "True"),
                   type=arguments.wait_condition, metavar="CONDITION",
                   help="condition=TYPE[=STATUS] (STATUS True, False or Unknown), create or "
                        "delete (default condition=Ready; an object not recorded yet is waited "
                        "for within the timeout)")
    p.add_argument("--timeout", type=duration, default=30.0, help="e.g. 60s (default 30s)")


def daemon_arguments(p: argparse.ArgumentParser) -> None:
    """`controller run`'s, and `celld`'s (cli/main.py)."""
    p.add_argument("--manifests", required=True, help="directory of manifests to keep converged")
    p.add_argument("--workers", type=arguments.workers, default=4, metavar="N",
                   help="parallel reconciles, 1-64 (default 4)")
    p.add_argument("--resync", type=arguments.resync, default=60.0,
                   help="period of the full resync that repairs drift (default 60s, at least "
                        "1s; 0: never)")
    p.add_argument("--no-runtime-events", dest="runtime_events", action="store_false",
                   help="do not follow the backend's runtime events (the engine's event "
                        "stream); only the resync then finds a runtime that died")
    p.add_argument("--allow-empty", action="store_true",
                   help="let a manifests directory that holds no manifest file prune what it "
                        "defined (by default an emptied directory is taken for a checkout in "
                        "progress and nothing is pruned)")
    p.add_argument("--keep-pruned", type=arguments.keep_pruned, default=None, metavar="DURATION",
                   help="keep a pruned cell's workspace as a safety snapshot this long "
                        "(e.g. 12h, 7d as 168h; default 24h; 0: do not keep it)")
    p.add_argument("--log-json", action="store_true", help="machine-readable logs on stderr")
    p.add_argument("--listen", action="append", metavar="unix:PATH|tcp:HOST:PORT",
                   help="also serve the HTTP API there (docs/api.md); may be repeated; tcp "
                        "serves TLS and asks for tokens (devcell token create)")
    p.add_argument("--tls-cert", metavar="FILE",
                   help="the certificate (PEM) --listen tcp serves (default: one DevCell "
                        "makes in the state directory, api-tls/cert.pem)")
    p.add_argument("--tls-key", metavar="FILE", help="its private key (PEM, owner-only)")


def _op_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument("operation", help="operation id (op_...)")
    p.add_argument("--input", action="append", metavar="KEY=VALUE",
                   help="resume input, validated against the operation's schema")
    p.add_argument("--input-file", action="append", metavar="FILE",
                   help="resume input as a YAML/JSON mapping")
    _timeout(p)


def _op_cancel(p: argparse.ArgumentParser) -> None:
    p.add_argument("operation", help="operation id (op_...)")
    _timeout(p)


def _schema(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", type=arguments.kind({**arguments.OBJECT_KINDS, "config": "Config"}),
                   metavar="KIND")


def _image_build_base(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="rebuild even if the image exists")


def _image_ls(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")


def _dry_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="show what would be removed")


def _import_devcontainer(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", metavar="PATH",
                   help="devcontainer.json, or a folder holding .devcontainer/devcontainer.json "
                        "or .devcontainer.json (default: the current folder)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the manifest to FILE (default: standard output)")
    p.add_argument("--name", help="the cell's name (default: devcontainer.json's name)")


def _gc(p: argparse.ArgumentParser) -> None:
    p.add_argument("--approve", action="store_true",
                   help="also remove orphans that hold files (no object ever named them)")
    _dry_run(p)


def _df(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["table", "yaml", "json"], default="table")


def _exec(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--stdin", action="store_true",
                   help="forward standard input to the command (its end closes the command's)")
    p.add_argument("-t", "--tty", action="store_true",
                   help="run the command on a pseudo-terminal (standard input must be a terminal)")
    p.add_argument("-e", "--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable for the command (repeatable)")
    p.add_argument("-w", "--workdir", metavar="DIR",
                   help="working directory in the cell (an absolute path)")
    p.add_argument("-u", "--user", metavar="USER[:GROUP]",
                   help="run as this user of the cell (a name or uid; container cells)")
    p.add_argument("cell", help="cell name or id")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD...",
                   help="the command and its arguments, after --")


def _port_forward(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default="127.0.0.1",
                   help="loopback address to listen on (127.0.0.1, ::1 or localhost)")
    p.add_argument("cell", help="cell name or id")
    p.add_argument("ports", nargs="+", metavar="[LOCAL:]REMOTE",
                   help="REMOTE (the same port here), LOCAL:REMOTE, or :REMOTE (any free port)")


def _ssh(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--tty", action="store_true",
                   help="a pseudo-terminal for CMD too (a shell always gets one)")
    p.add_argument("cell", help="cell name")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD...",
                   help="a command instead of a shell: one word is a shell command line, "
                        "several are kept as separate arguments")


def _ssh_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("cells", nargs="*", metavar="CELL",
                   help="cells to write a Host block for (default: every cell that runs "
                        "commands)")


def _code(p: argparse.ArgumentParser) -> None:
    p.add_argument("--print", action="store_true",
                   help="print the command that opens VS Code instead of running it")
    p.add_argument("cell", help="cell name or id")


def _ssh_proxy(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", help="cell name or id")


def _logs(p: argparse.ArgumentParser) -> None:
    p.add_argument("cell", help="cell name or id")
    p.add_argument("service", nargs="?", help="one service (default: all, each line prefixed)")
    p.add_argument("-c", "--sidecar", "--container", dest="sidecar", metavar="NAME",
                   help="a sidecar's output (spec.sidecars[].name), read through the engine, "
                        "instead of the services' logs")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing as logs grow")
    p.add_argument("--tail", type=arguments.tail_lines, default=-1, metavar="N",
                   help="only the last N lines of each service's log (default -1: all)")
    p.add_argument("--since", metavar="DURATION|TIME", default=None,
                   help="only lines written in the last DURATION (5s, 2m, 1h) or since an "
                        "RFC 3339 TIME (2026-01-02T03:04:05Z)")
    p.add_argument("--since-time", dest="since", metavar="TIME",
                   help="kubectl's spelling of --since TIME")
    p.add_argument("--timestamps", action="store_true",
                   help="start each line with the time it was written (RFC 3339, UTC)")


def _explain(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="KIND[.FIELD.PATH]", type=arguments.explained,
                   help="e.g. cell, cell.spec.services, snapshot.spec.cell, config.security")
    p.add_argument("--recursive", action="store_true",
                   help="list every field below, nested, with its type")


def _version(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["json", "yaml"], default=None)


def _completion(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=["bash", "zsh", "fish"], metavar="SHELL",
                   help="bash (source <(devcell completion bash)), zsh or fish")


def _node(p: argparse.ArgumentParser) -> None:
    p.add_argument("node", metavar="NODE", help="node id, unique hostname or unique id prefix "
                                                "(as `get nodes` shows them)")


def _node_drain(p: argparse.ArgumentParser) -> None:
    _node(p)
    p.add_argument("--from-last-snapshot", action="store_true",
                   help="for a node that is lost: move each cell from its newest snapshot in "
                        "cluster.registry (what it wrote since is lost)")
    _timeout(p)


def _token_create(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", required=True, help="the user the token acts as (made by its "
                                                 "first token)")
    p.add_argument("--role", required=True, choices=["viewer", "developer", "admin"],
                   help="viewer: list, get, watch; developer: also make cells and change "
                        "their own; admin: everything")
    p.add_argument("--expires", default=None, metavar="DURATION",
                   help="valid this long (30m, 12h, 90d; default: until revoked)")


def _token_list(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["json"], default=None)


def _token_revoke(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="the token's id, as `token list` shows it")


def _context_list(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["json"], default=None)


def _context_use(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", metavar="NAME", help="the context to use from now on")
    p.add_argument("--none", action="store_true",
                   help="no current context: commands use the state directory again")


def _context_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME")
    # --server URL, --token-file FILE ('' removes it) and --certificate-authority FILE
    # ('' removes it) are the global options, kept in the context
    p.add_argument("--use", action="store_true", help="make it the current context")


def _context_delete(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME")


GROUPS = {
    "snapshot": Group("snapshot verbs"),
    "cell": Group("cell verbs"),
    "controller": Group("the reconciling daemon"),
    "op": Group("act on suspended operations"),
    "image": Group("images for the container backend"),
    "import": Group("write a Cell manifest from another tool's description", metavar="FORMAT"),
    "token": Group("tokens for the daemon's HTTP API (users and their roles)"),
    "node": Group("the cluster's machines (docs/cluster.md)"),
    "context": Group("the servers this CLI talks to (the contexts file, as kubeconfig)"),
}
"""The commands that take a verb, with their own help."""

TABLE = (
    Command(("apply",), "cmd_apply:run_apply",
            "record manifests as desired state and converge", _apply),
    Command(("get",), "cmd_get:run_get", "list objects", _get),
    Command(("describe",), "cmd_get:run_describe", "show an object in detail", _describe),
    Command(("delete",), "cmd_apply:run_delete", "delete objects", _delete, recorded=True),
    Command(("diff",), "cmd_apply:run_diff", "show what apply would change", _diff),
    Command(("snapshot", "create"), "cmd_cells:run_snapshot_create", "checkpoint a cell",
            _snapshot_create, recorded=True),
    Command(("snapshot", "export"), "cmd_transfer:run_snapshot_export",
            "write a snapshot as a self-describing archive", _snapshot_export, recorded=True),
    Command(("snapshot", "import"), "cmd_transfer:run_snapshot_import",
            "bring in a snapshot archive as a Ready snapshot", _snapshot_import),
    Command(("snapshot", "push"), "cmd_transfer:run_snapshot_push",
            "store a snapshot in a registry as an OCI artifact", _snapshot_push, recorded=True),
    Command(("snapshot", "pull"), "cmd_transfer:run_snapshot_pull",
            "bring in a snapshot from a registry as a Ready snapshot", _snapshot_pull),
    Command(("snapshot", "restore"), "cmd_restore:run_snapshot_restore",
            "roll a cell's workspace back to a snapshot, in place", _snapshot_restore, recorded=True),
    Command(("snapshot", "list"), "cmd_cells:run_snapshot_list", "a cell's snapshots",
            _snapshot_list, recorded=True),
    Command(("cell", "fork"), "cmd_cells:run_cell_fork", "new cell from a snapshot of a cell",
            _cell_fork, recorded=True),
    Command(("cell", "sleep"), "cmd_cells:run_cell_sleep",
            "checkpoint the workspace, then stop", _one_cell, recorded=True),
    Command(("cell", "start"), "cmd_cells:run_cell_start", "start a stopped or sleeping cell",
            _one_cell, recorded=True),
    Command(("cell", "restart"), "cmd_cells:run_cell_restart",
            "restart a running cell's services, or one of them", _cell_restart, recorded=True),
    Command(("cell", "rerun-hooks"), "cmd_cells:run_cell_rerun_hooks",
            "run a running cell's postCreate hooks again", _one_cell, recorded=True),
    Command(("wait",), "cmd_controller:run_wait", "wait for a condition on an object", _wait),
    Command(("controller", "run"), "cmd_controller:run_daemon",
            "keep a directory of manifests converged (also installed as celld)",
            daemon_arguments),
    Command(("op", "resume"), "cmd_op:run_op_resume",
            "approve and continue a suspended operation", _op_resume, recorded=True),
    Command(("op", "cancel"), "cmd_op:run_op_cancel", "cancel a suspended operation",
            _op_cancel, recorded=True),
    Command(("token", "create"), "cmd_token:run_token_create",
            "make a token for a user and role (printed once)", _token_create),
    Command(("token", "list"), "cmd_token:run_token_list",
            "the tokens: id, user, role, state (never a token itself)", _token_list),
    Command(("token", "revoke"), "cmd_token:run_token_revoke",
            "revoke a token: it fails from its next use", _token_revoke, recorded=True),
    Command(("node", "cordon"), "cmd_nodes:run_cordon",
            "keep new cells off a node (the engine's availability pause)", _node),
    Command(("node", "uncordon"), "cmd_nodes:run_uncordon",
            "let new cells onto a node again (availability active)", _node),
    Command(("node", "drain"), "cmd_nodes:run_drain",
            "move every cell off a node (through the cluster's registry), then drain it",
            _node_drain, recorded=True),
    Command(("context", "list"), "cmd_context:run_list",
            "the contexts of the contexts file (* the current one)", _context_list,
            state=False),
    Command(("context", "use"), "cmd_context:run_use",
            "make a context current (--none: use the state directory)", _context_use,
            state=False),
    Command(("context", "set"), "cmd_context:run_set",
            "make or change a context: its server, token file and certificate",
            _context_set, state=False),
    Command(("context", "delete"), "cmd_context:run_delete", "remove a context",
            _context_delete, state=False),
    Command(("schema",), "cmd_text:run_schema",
            "print a kind's JSON Schema (cell, snapshot, or config)", _schema, state=False),
    Command(("image", "build-base"), "cmd_image:run_build_base",
            "build devcell/busybox:latest offline from busybox-static", _image_build_base),
    Command(("image", "ls"), "cmd_image:run_ls",
            "the images DevCell pulled for this state directory, with sizes", _image_ls),
    Command(("image", "prune"), "cmd_image:run_prune",
            "remove the images DevCell pulled that no cell or container uses", _dry_run),
    Command(("import", "devcontainer"), "cmd_import:run_import",
            "from a devcontainer.json (VS Code, Codespaces, DevPod, Coder)",
            _import_devcontainer, state=False),
    Command(("gc",), "cmd_gc:run_gc", "remove volumes and checkpoints nothing references", _gc),
    Command(("df",), "cmd_df:run_df",
            "disk used by workspaces, checkpoints, fork layers, logs, runtimes (-v: each one)",
            _df),
    Command(("exec",), "cmd_exec:run_exec", "run a command in a running cell", _exec, recorded=True),
    Command(("logs",), "cmd_logs:run_logs", "print the logs of a cell's services", _logs, recorded=True),
    Command(("port-forward",), "cmd_port_forward:run_port_forward",
            "relay local ports to ports a running cell listens on (until Ctrl-C)",
            _port_forward, recorded=True),
    Command(("ssh",), "cmd_ssh:run_ssh",
            "open a shell (or run CMD) in a running cell with OpenSSH's ssh", _ssh, recorded=True),
    Command(("ssh-config",), "cmd_ssh:run_ssh_config",
            "print ~/.ssh/config blocks (Host CELL.devcell) for ssh, scp, sftp and IDEs",
            _ssh_config, recorded=True),
    Command(("code",), "cmd_code:run_code",
            "open VS Code on a running cell over Remote-SSH, with its extensions and settings",
            _code, recorded=True),
    Command(("ssh-proxy",), "cmd_ssh:run_ssh_proxy",
            "serve SSH for one cell on stdin/stdout (the ProxyCommand of ssh-config)",
            _ssh_proxy, recorded=True),
    Command(("explain",), "cmd_text:run_explain",
            "document a kind or one of its fields, from its JSON Schema", _explain, state=False),
    Command(("version",), "cmd_version:run_version",
            "client and schema versions, and the backends this machine can run", _version,
            state=False),
    Command(("completion",), "cmd_text:run_completion",
            "print a shell completion script (bash, zsh or fish)", _completion, state=False),
)
"""Every command line `devcell` runs, in the order `devcell --help` lists them."""

COMMANDS = tuple(dict.fromkeys(entry.words[0] for entry in TABLE))
"""Each command's first word."""
VERBS = {group: tuple(entry.words[1] for entry in TABLE if entry.words[0] == group and
                      len(entry.words) == 2) for group in GROUPS}
"""The verbs of the commands that take one, so a command line's verb is known before its
parser is built."""


def uses_state(command: str, verb: str | None) -> bool:
    """Whether `command` (and `verb`) uses the state directory."""
    words = (command,) if verb is None else (command, verb)
    return next(entry.state for entry in TABLE if entry.words == words)


def needs_records(command: str, verb: str | None) -> bool:
    """Whether `command` (and `verb`) acts only on objects already recorded."""
    words = (command,) if verb is None else (command, verb)
    return next(entry.recorded for entry in TABLE if entry.words == words)


def handler_of(command: str, verb: str | None) -> str:
    """The "module:function" that runs `command` (and `verb`)."""
    words = (command,) if verb is None else (command, verb)
    return next(entry.handler for entry in TABLE if entry.words == words)
