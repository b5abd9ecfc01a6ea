"""The OpenAPI 3.1 document, made from the route table (routes) and the kinds' JSON schemas
(devcell/schemas): a manifest the API accepts is the one `devcell schema cell` describes."""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from devcell import kinds
from devcell.server import paging, problems, routes

WATCH_MEDIA = "application/x-ndjson"
SSE_MEDIA = "text/event-stream"
YAML_MEDIA = "application/yaml"
MAX_TIMEOUT_S = 3600
ACTION_TIMEOUT_S = 300
"""How long an action with wait=true waits when it names no timeoutSeconds (the CLI's
--timeout)."""
MAX_NAMES = 100
"""Names one rows request may ask for (the CLI asks in parts of this many)."""


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _manifest_schemas() -> dict[str, Any]:
    """Each kind's manifest schema, its $defs moved to components (Cell.name, ...) so every
    $ref resolves inside this document."""
    from devcell import schemas

    out: dict[str, Any] = {}
    for kind in kinds.KINDS.values():
        schema = copy.deepcopy(schemas.schema(kind.name))
        defs = schema.pop("$defs", {})
        for key in ("$schema", "$id"):
            schema.pop(key, None)
        prefix = f"#/components/schemas/{kind.name}."

        def rewrite(node: Any, prefix: str = prefix) -> Any:
            if isinstance(node, dict):
                return {k: (prefix + v[len("#/$defs/"):]
                            if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/")
                            else rewrite(v)) for k, v in node.items()}
            if isinstance(node, list):
                return [rewrite(v) for v in node]
            return node

        out[f"{kind.name}Manifest"] = rewrite(schema)
        for name, sub in defs.items():
            out[f"{kind.name}.{name}"] = rewrite(sub)
    return out


def _record_schemas() -> dict[str, Any]:
    located = {"type": "object", "required": ["file", "message"], "properties": {
        "file": {"type": "string"}, "line": {"type": "integer"}, "column": {"type": "integer"},
        "kind": {"type": "string"}, "name": {"type": "string"}, "field": {"type": "string"},
        "message": {"type": "string"}}}
    out: dict[str, Any] = {
        "Problem": {
            "type": "object", "description": "RFC 9457 problem details: every error answered",
            "required": ["type", "title", "status", "detail"],
            "properties": {"type": {"type": "string"}, "title": {"type": "string"},
                           "status": {"type": "integer"}, "detail": {"type": "string"},
                           "problems": {"type": "array", "items": located}}},
        "Operation": {"type": "object", "required": ["id", "status", "steps"],
                      "properties": {"id": {"type": "string"}, "status": {"type": "string"},
                                     "steps": {"type": "array",
                                               "items": {"type": "object"}}}},
        "Event": {"type": "object", "required": ["id", "reason", "message"],
                  "properties": {"id": {"type": "integer"}, "reason": {"type": "string"},
                                 "message": {"type": "string"}}},
        "ApplyResult": {
            "type": "object", "required": ["changes", "missing", "results", "ok"],
            "properties": {
                "changes": {"type": "array", "items": {
                    "type": "object", "required": ["kind", "name", "outcome"],
                    "properties": {"kind": {"type": "string"}, "name": {"type": "string"},
                                   "id": {"type": ["string", "null"]},
                                   "outcome": {"type": "string"}}}},
                "missing": {"type": "array", "items": {"type": "object"}},
                "results": {"type": "array", "items": {"type": "object"}},
                "expired": {"type": "array", "items": {"type": "string"}},
                "ok": {"type": "boolean"}}},
    }
    out["ActionResult"] = copy.deepcopy(out["ApplyResult"])
    out["ActionResult"]["description"] = (
        "An action's answer: what it recorded, and with wait=true how each object ended "
        "(results: settled, failed or waiting) and the operations that ran")
    out["ActionResult"]["required"] = [*out["ApplyResult"]["required"], "resourceVersion"]
    out["ActionResult"]["properties"].update({
        "resourceVersion": {"type": "string", "description":
                            "the events' version before the action: watch from it"},
        "operations": {"type": "array", "items": {"type": "string"}},
        "reconciledBy": {"type": ["string", "null"], "description":
                         "wait=true: the daemon that converged it, as the CLI says it"}})
    text = {"type": ["string", "null"]}
    out["RestoreResult"] = {
        "type": "object", "description": "A restore's plan, and how it went (as `devcell "
        "snapshot restore` says it)",
        "required": ["cell", "snapshot", "done", "ok", "results", "resourceVersion"],
        "properties": {
            "cell": {"type": "string"}, "snapshot": {"type": "string"},
            "safety": {**text, "description": "the safety snapshot's name (null: none)"},
            "running": {"type": "boolean"}, "changedSince": text,
            "changes": {**text, "description": "what it replaces that no snapshot holds"},
            "needsApproval": {"type": "boolean"},
            "operation": text, "done": {"type": "boolean"},
            "awaiting": {**text, "description": "why it waits at its approval gate"},
            "failed": {**text, "description": "why it failed"},
            "results": {"type": "array", "items": {"type": "object"}},
            "ok": {"type": "boolean"}, "resourceVersion": {"type": "string"},
            "reconciledBy": text}}
    for kind in kinds.KINDS.values():
        out[kind.name] = {
            "type": "object", "description": f"A {kind.name} as `devcell get -o json` prints it "
            "(secret values redacted)",
            "required": ["apiVersion", "kind", "metadata", "spec", "status"],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"const": kind.name},
                "metadata": {"type": "object", "required": ["name", "id", "resourceVersion"],
                             "properties": {"name": {"type": "string"},
                                            "id": {"type": "string"},
                                            "resourceVersion": {"type": "string"}}},
                "spec": {"type": "object"}, "status": {"type": "object"}}}
    for r in routes.RESOURCES.values():
        out[f"{r.kind}List"] = {
            "type": "object", "required": ["apiVersion", "kind", "items", "metadata"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"const": "List"},
                           "items": {"type": "array", "items": _ref(r.kind)},
                           "metadata": _list_meta()}}
    number = {"type": ["number", "null"]}
    out["Node"] = {
        "type": "object", "description": "A node as `devcell get nodes -o json` prints it: the "
        "engine's, read when asked (a single host: this machine alone)",
        "required": ["apiVersion", "kind", "metadata", "spec", "status"],
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"const": "Node"},
            "metadata": {"type": "object", "required": ["name", "id", "labels"],
                         "properties": {"name": {"type": "string"}, "id": {"type": "string"},
                                        "labels": {"type": "object",
                                                   "additionalProperties": {"type": "string"}},
                                        "creationTimestamp": text}},
            "spec": {"type": "object", "required": ["role", "availability"],
                     "properties": {"role": {"type": "string"},
                                    "availability": {"type": "string"}}},
            "status": {"type": "object", "required": ["state", "cells"], "properties": {
                "state": {"type": "string"}, "message": {"type": "string"},
                "address": text, "leader": {"type": "boolean"}, "engineVersion": text,
                "capacity": {"type": "object", "properties": {"cpus": number,
                                                              "memoryBytes": number}},
                "reserved": {"type": ["object", "null"]}, "tasks": number,
                "cells": {"type": "array", "items": {"type": "string"}}}}}}
    out["NodeList"] = {
        "type": "object", "required": ["apiVersion", "kind", "items", "metadata"],
        "properties": {"apiVersion": {"type": "string"}, "kind": {"const": "List"},
                       "items": {"type": "array", "items": _ref("Node")},
                       "metadata": {"type": "object", "description": "no resourceVersion: "
                                    "nodes are not the control plane's records"}}}
    out["NodeActionResult"] = {
        "type": "object", "required": ["node", "changed"],
        "properties": {"node": _ref("Node"), "changed": {
            "type": "boolean", "description": "false: its availability was that already"}}}
    out["DrainLine"] = {
        "type": "object", "required": ["type"],
        "description": "One line of a drain's answer (JSON lines): `line`, a line `devcell "
                       "node drain` prints (stream stdout or stderr, text escaped); "
                       "`keepalive` while the moves go on; last `result` (exitCode: the "
                       "command's exit status, and what moved) or `error` (the drain failed "
                       "half-way: its problem document; what it recorded is carried on)",
        "properties": {
            "type": {"enum": ["line", "keepalive", "result", "error"]},
            "stream": {"enum": ["stdout", "stderr"]}, "text": {"type": "string"},
            "exitCode": {"type": "integer"}, "node": {"type": "string"},
            "drained": {"type": "boolean"},
            "moved": {"type": "array", "items": {"type": "object", "properties": {
                "cell": {"type": "string"}, "node": {"type": "string"}}}},
            "failed": {"type": "array", "items": {"type": "object", "properties": {
                "cell": {"type": "string"}, "reason": {"type": "string"}}}},
            "fromSnapshots": {"type": "array", "items": {"type": "object", "properties": {
                "cell": {"type": "string"}, "snapshot": {"type": "string"},
                "takenAt": {"type": "string"}}}},
            "problem": {"type": "object"}}}
    out["Token"] = {
        "type": "object", "description": "A token as `devcell token list -o json` lists it: "
        "everything but the token itself",
        "required": ["id", "user", "role", "state", "createdAt"],
        "properties": {"id": {"type": "string", "pattern": "^[0-9a-f]{12}$"},
                       "user": {"type": "string"},
                       "role": {"enum": ["viewer", "developer", "admin"]},
                       "state": {"enum": ["active", "revoked", "expired"]},
                       "createdAt": {"type": "string"}, "createdBy": text,
                       "expiresAt": text, "revokedAt": text}}
    out["TokenList"] = {
        "type": "object", "required": ["apiVersion", "kind", "items", "metadata"],
        "properties": {"apiVersion": {"type": "string"}, "kind": {"const": "List"},
                       "items": {"type": "array", "items": _ref("Token")},
                       "metadata": {"type": "object"}}}
    out["RowList"] = {
        "type": "object", "required": ["apiVersion", "kind", "items", "metadata"],
        "description": "What `devcell get` prints its tables from (the CLI's remote mode): "
                       "each row, and its document when objects=true",
        "properties": {"apiVersion": {"type": "string"}, "kind": {"const": "RowList"},
                       "items": {"type": "array", "items": {
                           "type": "object", "required": ["row"],
                           "properties": {"row": {"type": "object"},
                                          "object": {"type": "object"}}}},
                       "warnings": {"type": "array", "items": {"type": "string"}},
                       "notes": {"type": "array", "items": {"type": "string"}},
                       "metadata": _list_meta()}}
    out["WatchEvent"] = {
        "type": "object", "required": ["type", "resourceVersion"],
        "description": "One change: ADDED, MODIFIED, DELETED (object: the record), or "
                       "BOOKMARK (no object: the version reached, sent while nothing changes)",
        "properties": {"type": {"enum": ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]},
                       "resourceVersion": {"type": "string"}, "object": {"type": "object"}}}
    return out


def _list_meta() -> dict[str, Any]:
    return {"type": "object", "required": ["resourceVersion"],
            "properties": {"resourceVersion": {"type": "string", "description":
                           "The change log's newest version: watch from here to miss nothing"},
                           "continue": {"type": "string", "description":
                                        "a page with more after it: send this back as "
                                        "continue for the next"}}}


def _problem_responses(*statuses: int) -> dict[str, Any]:
    return {str(s): {"description": "a problem document",
                     "content": {problems.MEDIA_TYPE: {"schema": _ref("Problem")}}}
            for s in statuses}


def _operation(route: routes.Route) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": route.name, "summary": route.summary}
    params: list[dict[str, Any]] = []
    errors = [400, 401, 403, 406, 500, 503]
    r = route.resource
    if route.verb in routes.ACTIONS:
        return _action(route, op)
    if route.verb == "restore":
        return _restore(op)
    if route.upgrade:
        return _port_forward(op, route.verb == "ssh") if route.verb != "exec" else _upgrade(op)
    if route.verb == "logs":
        return _logs(op)
    if route.verb in ("resume", "cancel"):
        return _op_action(route, op)
    if r is routes.NODES:
        return _node(route, op)
    if route.verb == "token_admin":
        return _token(route, op)
    if route.name == "lineage":
        return _lineage(op)
    if route.name == "df":
        return _df(op)
    if route.name in ("export_snapshot", "import_snapshot"):
        return _transfer(route, op)
    if route.name in ("push_snapshot", "pull_snapshot"):
        return _registry(route, op)
    if route.name in ("gc", "list_images", "prune_images", "build_base_image"):
        return _machine(route, op)
    if route.name == "ssh_host_key":
        op["responses"] = {"200": {"description": "the host key's public half", "content": {
            "application/json": {"schema": {
                "type": "object", "required": ["publicKey"], "properties": {"publicKey": {
                    "type": "string", "pattern": "^ssh-ed25519 [A-Za-z0-9+/]{68}$",
                    "description": "as a known_hosts line gives it, after the host "
                                   "pattern"}}}}}}, **_problem_responses(401, 403, 406, 500)}
        return op
    if route.name == "openapi":
        op["responses"] = {"200": {"description": "this document",
                                   "content": {"application/json": {"schema": {
                                       "type": "object"}}}}, **_problem_responses(401, 403)}
        return op
    if route.name in ("apply", "diff"):
        if route.name == "apply":
            params.append({"name": "dryRun", "in": "query", "required": False,
                           "schema": {"type": "boolean"},
                           "description": "validate and say what would change; record "
                                          "nothing"})
            params += _apply_params()
        op["requestBody"] = {"required": route.verb not in routes.OPTIONAL_BODY_ACTIONS,
                             "content": {
            YAML_MEDIA: {"schema": {"type": "string"}},
            "application/json": {"schema": {"oneOf": [
                _ref(f"{k.name}Manifest") for k in kinds.KINDS.values()]}}},
            "description": "a YAML stream of manifests (`---` between documents) or one JSON "
                           "manifest; validated as `devcell apply -f` validates a file"}
        ok: dict[str, Any] = {"200": {"description": "what was recorded",
                                      "content": {"application/json": {
                                          "schema": _ref("ApplyResult")}}}}
        errors += [409, 411, 413, 408, 415, 422, 502]
        if route.name == "diff":
            ok = {"200": {"description": "each manifest's difference from what is recorded",
                          "content": {"application/json": {"schema": _DIFF_RESULT}}}}
            errors.remove(409)
    elif route.name.startswith("rows_"):
        assert r is not None
        params.append({"name": "name", "in": "query", "required": False, "explode": True,
                       "schema": {"type": "array", "maxItems": MAX_NAMES, "items": {
                           "type": "string", "minLength": 1, "maxLength": 63}},
                       "description": "only these (names or ids), as `get KIND NAME...`"})
        if r.labeled:
            params.append({"name": "labelSelector", "in": "query", "required": False,
                           "schema": {"type": "string"},
                           "description": "as -l: team=core,tier!=db,env in (a,b)"})
        if r.kind == "Event":
            params.append({"name": "for", "in": "query", "required": False,
                           "schema": {"type": "string"},
                           "description": "KIND/NAME: only that object's events"})
        if r.kind == "Snapshot":
            params.append({"name": "cell", "in": "query", "required": False,
                           "schema": {"type": "string", "minLength": 1, "maxLength": 63},
                           "description": "only the snapshots of this cell (a name or id; "
                                          "not recorded: 404), as `devcell snapshot list "
                                          "CELL`"})
            errors += [404]
        for flag, what in (("wide", "the -o wide columns (measured now)"),
                           ("labels", "each row's labels (--show-labels, -L)"),
                           ("objects", "each row's document too (-o json|yaml, --sort-by)")):
            params.append({"name": flag, "in": "query", "required": False,
                           "schema": {"type": "boolean"}, "description": what})
        ok = {"200": {"description": f"the rows `devcell get {r.plural}` prints",
                      "content": {"application/json": {"schema": _ref("RowList")}}}}
    elif route.verb == "list":
        assert r is not None
        if r.labeled:
            params.append({"name": "labelSelector", "in": "query", "required": False,
                           "schema": {"type": "string"},
                           "description": "as -l: team=core,tier!=db,env in (a,b)"})
        if r.kind == "Event":
            params.append({"name": "for", "in": "query", "required": False,
                           "schema": {"type": "string"},
                           "description": "KIND/NAME: only that object's events"})
        if r.plural in paging.PAGED:
            params += [
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": paging.MAX_LIMIT},
                 "description": "a page of at most this many (in name order); the list's "
                                "metadata.continue then asks for the next (not with watch)"},
                {"name": "continue", "in": "query", "required": False,
                 "schema": {"type": "string", "maxLength": paging.MAX_TOKEN},
                 "description": "the next page: a list's metadata.continue, sent back "
                                "unchanged with the same labelSelector (anything else is a "
                                "400)"}]
        params += [
            {"name": "watch", "in": "query", "required": False, "schema": {"type": "boolean"},
             "description": "follow the changes (JSON lines; server-sent events when "
                            "Accept: text/event-stream)"},
            {"name": "resourceVersion", "in": "query", "required": False,
             "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
             "description": "watch: the changes after this version (a list's "
                            "metadata.resourceVersion); SSE clients may send Last-Event-ID; "
                            "a version older than the change log keeps is a 410 (list "
                            "again)"},
            {"name": "timeoutSeconds", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S},
             "description": f"watch: end the stream after this long (at most {MAX_TIMEOUT_S})"}]
        ok = {"200": {"description": f"the {r.plural}, or their changes with watch=true",
                      "content": {"application/json": {"schema": _ref(f"{r.kind}List")},
                                  WATCH_MEDIA: {"schema": _ref("WatchEvent")},
                                  SSE_MEDIA: {"schema": {"type": "string"}}}}}
        errors += [410]
    else:
        assert r is not None
        params.append({"name": "name", "in": "path", "required": True,
                       "schema": {"type": "string", "minLength": 1}})
        errors += [404]
        if route.name.startswith("describe_"):
            ok = {"200": {"description": f"the {r.kind} as `devcell describe` prints it",
                          "content": {"text/plain": {"schema": {"type": "string"}}}}}
        elif route.verb == "get":
            ok = {"200": {"description": f"the {r.kind}", "content": {
                "application/json": {"schema": _ref(r.kind)}}}}
        else:
            ok = {"200": {"description": "what was recorded", "content": {
                "application/json": {"schema": _ref("ApplyResult")}}}}
            errors += [409, 502]
    if params:
        op["parameters"] = params
    op["responses"] = {**ok, **_problem_responses(*sorted(set(errors)))}
    return op


def _apply_params() -> list[dict[str, Any]]:
    """Where the client read the stream, and the prune (server.applying)."""
    from devcell.server import applying

    return [
        {"name": "from", "in": "query", "required": False, "explode": True,
         "schema": {"type": "array", "maxItems": applying.MAX_ORIGINS, "items": {
             "type": "string", "pattern": "^[1-9][0-9]{0,8}:(-|/[^\\x00]*)$",
             "maxLength": applying.MAX_PATH_CHARS + 10}},
         "description": "LINE:PATH: the stream's documents from LINE on were read from PATH "
                        "(absolute; - for standard input) on the client, as `apply -f PATH` "
                        "names it: recorded as the caller's, for a later prune"},
        {"name": "prune", "in": "query", "required": False, "schema": {"type": "boolean"},
         "description": "also delete what the caller applied before from the `from` paths "
                        "(or paths under them) that this stream does not declare, as `apply "
                        "--prune`; one the caller may not delete refuses the whole apply "
                        "(403 naming the rule)"},
        {"name": "labelSelector", "in": "query", "required": False,
         "schema": {"type": "string"},
         "description": "with prune=true: prune only what it matches (as -l)"},
        {"name": "keepPrunedSeconds", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 0, "maximum": 999999 * 86400},
         "description": "how long a pruned cell's workspace is kept as a safety snapshot "
                        "(default 86400; 0: not kept), as --keep-pruned"}]


def answer_schema(name: str) -> dict[str, Any]:
    """The schema of the 200 answer of gc's and the images' routes (named as the route
    table names them): what a client checks an answer against before printing any of it."""
    route = next(r for r in routes.table() if r.name == name)
    return dict(_machine(route, {})["responses"]["200"]["content"]["application/json"][
        "schema"])


def _machine(route: routes.Route, op: dict[str, Any]) -> dict[str, Any]:
    """gc and the images' routes (server.machine_routes)."""
    text, figure = {"type": "string"}, {"type": "integer", "minimum": 0}
    some_text = {"type": ["string", "null"]}
    item: dict[str, Any] = {"type": "object", "required": ["kind", "id", "why"],
            "properties": {"kind": text, "id": text, "why": text}}
    words = {"type": "object", "additionalProperties": text}

    def flag(name: str, what: str) -> dict[str, Any]:
        return {"name": name, "in": "query", "required": False,
                "schema": {"type": "boolean"}, "description": what}

    if route.name == "gc":
        op["parameters"] = [flag("dryRun", "say what it would remove, remove nothing"),
                            flag("approve", "also what holds files no object ever named "
                                            "(--approve)")]
        planned = {"type": "object", "required": ["kind", "id", "why", "keptBecause",
                                                  "freedBytes"],
                   "properties": {**item["properties"], "keptBecause": some_text,
                                  "freedBytes": {"type": ["integer", "null"], "minimum": 0}}}
        backend = {"type": "object", "required": ["backend", "operation", "error", "planned",
                                                  "needsApproval", "failed"],
                   "properties": {"backend": text, "operation": some_text, "error": some_text,
                                  "planned": {"type": "array", "items": planned},
                                  "needsApproval": {"type": "array", "items": item},
                                  "failed": {"type": "array", "items": item}}}
        schema: dict[str, Any] = {
            "type": "object", "required": ["finished", "unfinished", "awaiting", "backends",
                                           "unavailable", "ok"],
            "properties": {"finished": {"type": "array", "items": text},
                           "unfinished": words, "awaiting": words,
                           "backends": {"type": "array", "items": backend},
                           "unavailable": words, "ok": {"type": "boolean"}}}
        said = "what it removed (would remove), kept and could not remove, as `devcell gc`"
    elif route.name == "list_images":
        image = {"type": "object", "required": [
            "image", "id", "size", "present", "moved", "pulledAt", "cells", "containers",
            "replaced", "replacedSize", "origin", "tags"], "properties": {
            "image": text, "id": text, "digest": some_text, "size": figure,
            "present": {"type": "boolean"}, "moved": {"type": "boolean"}, "pulledAt": text,
            "cells": {"type": "array", "items": text},
            "containers": {"type": "array", "items": text},
            "replaced": {"type": "array", "items": text}, "replacedSize": figure,
            "origin": {"enum": ["pulled", "built"]}, "tags": {"type": "array", "items": text}}}
        schema = {"type": "object", "required": ["kind", "items"], "properties": {
            "kind": {"const": "List"}, "items": {"type": "array", "items": image}}}
        said = "the images, as `devcell image ls -o json` lists them"
    elif route.name == "prune_images":
        op["parameters"] = [flag("dryRun", "say what it would remove, remove nothing (every "
                                           "role may ask)")]
        kept = {"type": "object", "required": ["image", "why"],
                "properties": {"image": text, "why": text}}
        schema = {"type": "object", "required": ["removed", "kept", "forgotten", "freedBytes"],
                  "properties": {"removed": {"type": "array", "items": text},
                                 "kept": {"type": "array", "items": kept},
                                 "forgotten": {"type": "array", "items": text},
                                 "freedBytes": figure}}
        said = "what it removed (would remove), kept and forgot, as `devcell image prune`"
    else:
        op["parameters"] = [flag("force", "build it again even when it exists (--force)")]
        vm = {"type": ["object", "null"], "required": ["image", "rootDiskMiB", "kernelRelease",
                                                       "accel"],
              "properties": {"image": text, "rootDiskMiB": figure, "kernelRelease": text,
                             "accel": text}}
        schema = {"type": "object", "required": ["image", "imageId", "built", "nodeToolsId",
                                                 "nodeToolsProblem", "vm", "vmProblem"],
                  "properties": {"image": text, "imageId": text, "built": {"type": "boolean"},
                                 "nodeToolsId": some_text, "nodeToolsProblem": some_text,
                                 "vm": vm, "vmProblem": some_text}}
        said = "what it made, as `devcell image build-base` says it"
    op["responses"] = {"200": {"description": said, "content": {
        "application/json": {"schema": schema}}},
        **_problem_responses(400, 401, 403, 406, 500, 502, 503)}
    return op


def _df(op: dict[str, Any]) -> dict[str, Any]:
    figure = {"type": "integer", "minimum": 0}
    row = {"type": "object", "required": ["type", "total", "active", "sizeBytes",
                                          "reclaimableBytes"],
           "properties": {"type": {"type": "string"}, "total": figure, "active": figure,
                          "sizeBytes": figure, "reclaimableBytes": figure}}
    item = {"type": "object", "required": ["type", "name", "backend", "owner", "active",
                                           "sizeBytes", "detail"],
            "properties": {"type": {"type": "string"}, "name": {"type": "string"},
                           "backend": {"type": "string"}, "owner": {"type": "string"},
                           "active": {"type": "boolean"}, "sizeBytes": figure,
                           "logicalBytes": {"type": ["integer", "null"]},
                           "detail": {"type": "string"}}}
    op["parameters"] = [{"name": "verbose", "in": "query", "required": False,
                         "schema": {"type": "boolean"}, "description": "each item too (-v)"}]
    op["responses"] = {"200": {"description": "as `devcell df -o json` prints it", "content": {
        "application/json": {"schema": {
            "type": "object", "required": ["types", "totalBytes", "reclaimableBytes"],
            "properties": {"types": {"type": "array", "items": row}, "totalBytes": figure,
                           "reclaimableBytes": figure,
                           "items": {"type": "array", "items": item},
                           "problems": {"type": "array", "items": {"type": "string"}}}}}}},
        **_problem_responses(400, 401, 403, 406, 500, 503)}
    return op


def _transfer(route: routes.Route, op: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's archive, out (streamed) or in (spooled, then checked as `devcell
    snapshot import` checks it)."""
    archive = {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}
    if route.name == "export_snapshot":
        op["parameters"] = [{"name": "name", "in": "path", "required": True,
                             "schema": {"type": "string", "minLength": 1},
                             "description": "the snapshot's name or id"}]
        op["responses"] = {"200": {
            "description": "the archive, as `devcell snapshot export` writes it; a body "
                           "that ends without its last chunk was cut short (the export "
                           "failed): not an archive",
            "content": archive, "headers": {"DevCell-Operation": {
                "description": "the id the export's operation is recorded under once the "
                               "archive was written whole (its figures: sha256, entries, "
                               "bytes, skipped)", "schema": {"type": "string"}}}},
            **_problem_responses(400, 401, 403, 404, 406, 409, 500, 502, 503)}
        return op
    op["parameters"] = [
        {"name": "name", "in": "query", "required": False,
         "schema": {"type": "string", "minLength": 1, "maxLength": 253},
         "description": "import under this name (as --name; none: the archive's)"},
        {"name": "origin", "in": "query", "required": False,
         "schema": {"type": "string", "maxLength": 4096},
         "description": "where the archive came from, recorded as its origin (the client's "
                        "file; none: `-`, standard input)"}]
    op["requestBody"] = {"required": True, "content": archive,
                         "description": "a snapshot archive (`devcell snapshot export`), "
                                        "at most the server's bound (8 GiB)"}
    op["responses"] = {"201": {"description": "what was imported", "content": {
        "application/json": {"schema": {
            "type": "object", "required": ["name", "id", "backend", "sha256", "files",
                                           "bytes", "operation"],
            "properties": {"name": {"type": "string"}, "id": {"type": "string"},
                           "backend": {"type": "string"}, "sha256": {"type": "string"},
                           "files": {"type": "integer", "minimum": 0},
                           "bytes": {"type": "integer", "minimum": 0},
                           "operation": {"type": "string"}}}}}},
        **_problem_responses(400, 401, 403, 406, 408, 409, 411, 413, 415, 422, 500, 502,
                             503)}
    return op


def _registry(route: routes.Route, op: dict[str, Any]) -> dict[str, Any]:
    """push and pull (an admin's: the server's registry logins)."""
    text = {"type": "string"}
    figure = {"type": "integer", "minimum": 0}
    if route.name == "push_snapshot":
        op["parameters"] = [{"name": "name", "in": "path", "required": True,
                             "schema": {"type": "string", "minLength": 1}}]
        fields = {"target": {"type": "string", "minLength": 1, "maxLength": 1024,
                             "description": "REGISTRY/REPOSITORY[:TAG]"},
                  "compression": {"enum": ["zstd", "gzip", "none"]}}
        required, status = ["target"], "200"
        answer = {"type": "object", "required": ["name", "ref", "digest", "layer",
                                                 "layerBytes", "entries", "bytes", "operation"],
                  "properties": {"name": text, "ref": text, "digest": text, "layer": text,
                                 "layerBytes": figure, "entries": figure, "bytes": figure,
                                 "operation": text}}
    else:
        fields = {"source": {"type": "string", "minLength": 1, "maxLength": 1024,
                             "description": "REGISTRY/REPOSITORY:TAG or @sha256:DIGEST"},
                  "name": {"type": ["string", "null"], "minLength": 1, "maxLength": 253}}
        required, status = ["source"], "201"
        answer = {"type": "object", "required": ["name", "id", "backend", "sha256", "files",
                                                 "bytes", "operation", "ref", "digest"],
                  "properties": {"name": text, "id": text, "backend": text, "sha256": text,
                                 "files": figure, "bytes": figure, "operation": text,
                                 "ref": text, "digest": text}}
    op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": required, "additionalProperties": False,
        "properties": fields}}}}
    op["responses"] = {status: {"description": "what the registry has, or what was imported",
                                "content": {"application/json": {"schema": answer}}},
                       **_problem_responses(400, 401, 403, 404, 406, 408, 409, 411, 413, 415,
                                            422, 500, 502, 503)}
    return op


def _lineage(op: dict[str, Any]) -> dict[str, Any]:
    text = {"type": ["string", "null"]}

    def row(link: str, *more: str) -> dict[str, Any]:
        fields = {"id": {"type": "string"}, "name": {"type": "string"}, "phase": text,
                  "deleting_at": text, "deleted_at": text, link: text}
        fields.update({name: text for name in more})
        return {"type": "object", "required": ["id", "name", "phase", "deleting_at",
                                               "deleted_at", link], "properties": fields}

    cell, snapshot = row("forked_from"), row("cell_id", "consistency", "imported_from")
    op["responses"] = {"200": {"description": "every live cell and snapshot, a deleted cell "
                               "that still has live snapshots and a deleted snapshot a live "
                               "fork came from, each in creation order", "content": {
        "application/json": {"schema": {
            "type": "object", "required": ["cells", "snapshots"], "properties": {
                "cells": {"type": "array", "items": cell},
                "snapshots": {"type": "array", "items": snapshot}}}}}},
        **_problem_responses(401, 403, 406, 500, 503)}
    return op


def _token(route: routes.Route, op: dict[str, Any]) -> dict[str, Any]:
    """The tokens' routes (an admin's): list, create (the token in its answer once), revoke."""
    errors = [400, 401, 403, 406, 500, 503]
    if route.name == "list_tokens":
        ok = {"200": {"description": "every token recorded, oldest first", "content": {
            "application/json": {"schema": _ref("TokenList")}}}}
    elif route.name == "create_token":
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["user", "role"], "additionalProperties": False,
            "properties": {
                "user": {"type": "string", "description": "the user the token acts as"},
                "role": {"enum": ["viewer", "developer", "admin"]},
                "expires": {"type": ["string", "null"], "description":
                            "valid this long (30m, 12h, 90d); none: until revoked"}}}}}}
        ok = {"201": {"description": "the token (shown only this once) and its record",
                      "content": {"application/json": {"schema": {
                          "type": "object", "required": ["token", "item"], "properties": {
                              "token": {"type": "string",
                                        "pattern": "^dct_[0-9a-f]{12}_[0-9a-f]{64}$"},
                              "item": _ref("Token")}}}}}}
        errors += [408, 411, 413, 415]
    else:
        op["parameters"] = [{"name": "name", "in": "path", "required": True,
                             "schema": {"type": "string", "minLength": 1},
                             "description": "the token's id (12 hex digits), never a token"}]
        ok = {"200": {"description": "the token after, and whether it was active until now",
                      "content": {"application/json": {"schema": {
                          "type": "object", "required": ["item", "revoked"], "properties": {
                              "item": _ref("Token"), "revoked": {"type": "boolean"}}}}}}}
        errors.append(404)
    op["responses"] = {**ok, **_problem_responses(*sorted(errors))}
    return op


def _node(route: routes.Route, op: dict[str, Any]) -> dict[str, Any]:
    """The nodes' routes: a list (labelSelector), one node, cordon and uncordon (admins')."""
    errors = [400, 401, 403, 406, 500, 502, 503]
    if route.verb == "drain":
        return _drain(op, errors)
    if route.verb == "list":
        op["parameters"] = [{"name": "labelSelector", "in": "query", "required": False,
                             "schema": {"type": "string"},
                             "description": "as -l: by node label (zone=a,disk!=hdd)"}]
        ok = {"description": "the nodes, as the engine reports them now",
              "content": {"application/json": {"schema": _ref("NodeList")}}}
    else:
        op["parameters"] = [{"name": "name", "in": "path", "required": True,
                             "schema": {"type": "string", "minLength": 1}}]
        errors.append(404)
        ok = {"description": "the node" if route.verb == "get" else
              "the node after, and whether its availability changed", "content": {
                  "application/json": {"schema": _ref(
                      "Node" if route.verb == "get" else "NodeActionResult")}}}
    op["responses"] = {"200": ok, **_problem_responses(*sorted(errors))}
    return op


def _drain(op: dict[str, Any], errors: list[int]) -> dict[str, Any]:
    """A node's drain: its lines as JSON lines (DrainLine), refused before they begin."""
    op["parameters"] = [
        {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "minLength": 1}},
        {"name": "fromLastSnapshot", "in": "query", "required": False,
         "schema": {"type": "boolean"},
         "description": "a lost node's cells: each from its newest snapshot in "
                        "cluster.registry (what it wrote since is lost)"},
        {"name": "timeoutSeconds", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S},
         "description": f"how long the moves are waited for (as --timeout; default "
                        f"{ACTION_TIMEOUT_S}); a move not finished then is said left"}]
    op["responses"] = {"200": {"description": "the drain's lines as they come, then its "
                                              "result (JSON lines)", "content": {
        WATCH_MEDIA: {"schema": _ref("DrainLine")}}},
        **_problem_responses(*sorted([*errors, 404, 409]))}
    return op


def _op_action(route: routes.Route, op: dict[str, Any]) -> dict[str, Any]:
    """resume and cancel of a suspended operation: its document after."""
    op["parameters"] = [{"name": "name", "in": "path", "required": True,
                         "schema": {"type": "string", "minLength": 1},
                         "description": "the operation's id (op_...)"}]
    if route.verb == "resume":
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": False, "properties": {
                "input": {"type": "object", "description": "the approval gate's answers "
                                                           "(as op resume --input KEY=VALUE)"}}}}}}
    op["responses"] = {"200": {"description": "the operation, once resumed or cancelled (the "
                                              "daemon continues its object)",
                               "content": {"application/json": {"schema": _ref("Operation")}}},
                       **_problem_responses(400, 401, 403, 404, 406, 408, 413, 415, 422, 500,
                                            503)}
    return op


_DIFF_RESULT: dict[str, Any] = {
    "type": "object", "required": ["items", "warnings", "differs"],
    "description": "as `devcell diff -f` prints it: each manifest's unified diff against its "
                   "recorded object (secrets never shown: a changed one reads `<secret "
                   "changed>`); the client names each manifest's file",
    "properties": {
        "items": {"type": "array", "items": {
            "type": "object", "required": ["kind", "name", "line", "hunks", "undecided"],
            "properties": {
                "kind": {"type": "string"}, "name": {"type": "string"},
                "line": {"type": "integer", "description": "where its document starts in "
                                                           "the stream sent"},
                "hunks": {"type": "array", "items": {"type": "string"},
                          "description": "the unified diff's lines after its two headers "
                                         "(--- recorded/KIND/NAME, +++ FILE/KIND/NAME); none: "
                                         "no difference"},
                "hold": {"type": ["string", "null"],
                         "description": "a held cell's state, a comment line after its diff"},
                "undecided": {"type": "boolean",
                              "description": "its build's inputs could not be judged (a "
                                             "warning says why): never no difference"}}}},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "differs": {"type": "boolean", "description": "`devcell diff` exits 1"}}}

_EXCLUSIVE = {"type": "boolean", "description": "false: a name already recorded is recorded "
              "again as the CLI's verb does (a snapshot of this cell; a cell the caller may "
              "change) instead of a 409"}
_ACTION_BODIES: dict[str, dict[str, Any]] = {
    "snapshot": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "maxLength": 63, "description": "the new snapshot's name"},
            "ttl": {"type": "string", "maxLength": 32,
                    "description": "expire it this long after (30m, 7d)"},
            "consistency": {"enum": ["filesystem", "machine"],
                            "description": "machine: keep memory too (vm)"},
            "exclusive": _EXCLUSIVE}},
    "fork": {
        "type": "object", "required": ["name", "snapshot"], "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "maxLength": 63, "description": "the new cell's name"},
            "snapshot": {"type": "string", "maxLength": 63,
                         "description": "a snapshot of this cell"},
            "publish": {"type": "boolean", "description": "false: the fork publishes no "
                        "port (default true: the cell's, or those `ports` maps)"},
            "ports": {"type": "object", "description": "container port -> the fork's host "
                      "port", "additionalProperties": {"type": "integer", "minimum": 1,
                                                       "maximum": 65535}},
            "count": {"type": "integer", "minimum": 1, "maximum": 100, "description":
                      "make this many forks, NAME-1 to NAME-N (each name free; fork K "
                      "publishes `ports`' host ports plus K-1)"},
            "exclusive": _EXCLUSIVE}},
    "restart": {
        "type": "object", "additionalProperties": False,
        "properties": {
            "service": {"type": "string", "maxLength": 63,
                        "description": "only this service (left out: all the cell's)"}}},
}


def _action(route: routes.Route, op: dict[str, Any]) -> dict[str, Any]:
    """An action on one cell: recorded (202), or waited for (wait=true: 200)."""
    op["parameters"] = [
        {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "minLength": 1}},
        {"name": "wait", "in": "query", "required": False, "schema": {"type": "boolean"},
         "description": "answer once the objects settled, failed or the timeout ran out "
                        "(200); else once recorded (202)"},
        {"name": "timeoutSeconds", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S},
         "description": f"wait: at most this long (default {ACTION_TIMEOUT_S})"}]
    errors = [400, 401, 403, 404, 406, 409, 422, 500, 502, 503]
    if route.verb in _ACTION_BODIES:
        op["requestBody"] = {"required": route.verb not in routes.OPTIONAL_BODY_ACTIONS,
                             "content": {
            "application/json": {"schema": _ACTION_BODIES[route.verb]}}}
        errors += [408, 413, 415]
    result = {"content": {"application/json": {"schema": _ref("ActionResult")}}}
    op["responses"] = {"200": {"description": "wait=true: how each object ended", **result},
                       "202": {"description": "recorded: the daemon converges it", **result},
                       **_problem_responses(*sorted(errors))}
    return op


def _restore(op: dict[str, Any]) -> dict[str, Any]:
    """A snapshot restored into its cell: planned (dryRun: 200), recorded (202), or waited
    for (wait=true: 200)."""
    op["parameters"] = [
        {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "minLength": 1}},
        {"name": "wait", "in": "query", "required": False, "schema": {"type": "boolean"},
         "description": "answer once the daemon carried it out, it waits at its approval "
                        "gate, or the timeout ran out (200); else once recorded (202)"},
        {"name": "timeoutSeconds", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S},
         "description": f"wait: at most this long (default {ACTION_TIMEOUT_S})"}]
    op["requestBody"] = {"required": False, "content": {"application/json": {"schema": {
        "type": "object", "additionalProperties": False, "properties": {
            "cell": {"type": "string", "minLength": 1, "maxLength": 63,
                     "description": "the cell to restore into (default: the snapshot's own; "
                                    "else only a fork of it)"},
            "safety": {"type": "boolean", "description": "false: no safety snapshot first"},
            "dryRun": {"type": "boolean", "description": "say what it would do; record "
                                                         "nothing"},
            "approve": {"type": "boolean", "description": "approve its gate (the workspace "
                                                          "changed since its last snapshot)"}}}}}}
    result = {"content": {"application/json": {"schema": _ref("RestoreResult")}}}
    op["responses"] = {"200": {"description": "dryRun: the plan; wait=true: how it ended",
                               **result},
                       "202": {"description": "recorded: the daemon carries it out", **result},
                       **_problem_responses(400, 401, 403, 404, 406, 408, 409, 413, 415, 422,
                                            500, 502, 503)}
    return op


def _logs(op: dict[str, Any]) -> dict[str, Any]:
    """A cell's service logs: chunked text, as `devcell logs` prints them."""
    op["parameters"] = [
        {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "minLength": 1}},
        {"name": "service", "in": "query", "required": False, "schema": {"type": "string"},
         "description": "one service's log (else all, each line prefixed [SERVICE])"},
        {"name": "tail", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 0, "maximum": 999999999},
         "description": "only the last N lines"},
        {"name": "since", "in": "query", "required": False, "schema": {"type": "string"},
         "description": "a duration (5m) or an RFC 3339 time: the lines from then"},
        {"name": "timestamps", "in": "query", "required": False,
         "schema": {"type": "boolean"}, "description": "keep each line's time"},
        {"name": "follow", "in": "query", "required": False, "schema": {"type": "boolean"},
         "description": "go on as the logs grow (until timeoutSeconds)"},
        {"name": "timeoutSeconds", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S},
         "description": f"follow: end after this long (default and at most {MAX_TIMEOUT_S})"}]
    op["responses"] = {"200": {"description": "the lines, escaped", "content": {
        "text/plain": {"schema": {"type": "string"}}}, "headers": {"DevCell-Notes": {
            "description": "what `devcell logs` says on stderr first (a runtime that "
                           "drifted, the cell's sidecars): a JSON list of lines",
            "schema": {"type": "string"}}}},
        **_problem_responses(400, 401, 403, 404, 406, 500, 502, 503)}
    return op


def _upgrade(op: dict[str, Any]) -> dict[str, Any]:
    """exec: a WebSocket (docs/api.md: its framing); a plain request is a 426."""
    op["description"] = ("Upgrade to a WebSocket (Upgrade: websocket; subprotocol "
                         "v1.exec.devcell.dev): binary messages whose first byte is the "
                         "channel: 0 stdin (empty: its end), 1 stdout, 2 stderr, 3 status "
                         "(JSON: exitCode, or a problem document; the last), 4 resize (JSON: "
                         "rows, columns). A refusal before the upgrade is a problem document.")
    words = {"type": "array", "items": {"type": "string"}}
    op["parameters"] = [
        {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "minLength": 1}},
        {"name": "command", "in": "query", "required": True, "schema": words,
         "style": "form", "explode": True, "description": "the command, once per word"},
        {"name": "stdin", "in": "query", "required": False, "schema": {"type": "boolean"},
         "description": "send standard input (channel 0), as exec -i"},
        {"name": "tty", "in": "query", "required": False, "schema": {"type": "boolean"},
         "description": "run it on a pseudo-terminal, as exec -t"},
        {"name": "env", "in": "query", "required": False, "schema": words, "style": "form",
         "explode": True, "description": "NAME alone: its value arrives in the stream's "
         "first message (channel 6, JSON {\"NAME\": \"value\"}; never in the URL, where "
         "a proxy's log keeps it); or NAME=VALUE for a value that is no secret; as exec -e"},
        {"name": "workdir", "in": "query", "required": False, "schema": {"type": "string"},
         "description": "an absolute directory in the cell, as exec -w"},
        {"name": "user", "in": "query", "required": False, "schema": {"type": "string"},
         "description": "USER[:GROUP], as exec -u"}]
    op["responses"] = {"101": {"description": "upgraded: the stream"},
                       **_problem_responses(400, 401, 403, 404, 406, 426, 500, 502, 503)}
    return op


def _port_forward(op: dict[str, Any], ssh: bool) -> dict[str, Any]:
    """portforward (and ssh, its stream to the cell's SSH server, without a port): a
    WebSocket carrying one TCP connection (docs/api.md); a plain request is a 426."""
    op["description"] = ("Upgrade to a WebSocket (Upgrade: websocket; subprotocol "
                         "v1.portforward.devcell.dev) carrying one TCP connection to the "
                         "port: binary messages whose first byte is the channel: 0 the bytes "
                         "to the port (empty: the end of them, a half-close), 1 the bytes "
                         "from it (empty: their end), 5 notices (UTF-8 lines), 3 status (the "
                         "last; JSON: closed, or a problem document). A refusal before the "
                         "upgrade is a problem document, a port nothing listens on included "
                         "(502).")
    op["parameters"] = [
        {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "minLength": 1}},
        {"name": "port", "in": "query", "required": True,
         "schema": {"type": "integer", "minimum": 1, "maximum": 65535},
         "description": "the port the cell listens on (on its own loopback or any address)"}]
    if ssh:
        op["description"] = op["description"].replace("the port", "the cell's SSH server")
        del op["parameters"][1]
    op["responses"] = {"101": {"description": "upgraded: the connection"},
                       **_problem_responses(400, 401, 403, 404, 406, 426, 500, 502, 503)}
    return op


@cache
def document_text() -> str:
    """The document as served (made once per process: it depends on nothing at run time)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes.table():
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "DevCell API", "version": "v1",
                 "description": "DevCell's resources as the CLI names them; see docs/api.md"},
        "paths": paths,
        "components": {
            "schemas": {**_manifest_schemas(), **_record_schemas()},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
    return json.dumps(doc, sort_keys=True)
