"""Turn a manifest file into validated, defaulted Manifests, or into located problems.

Every problem names file:line:column, the object (kind "name") and the field path, and all
problems of a file are reported together.
"""

from __future__ import annotations

import copy
import difflib
import os
from functools import cache
from typing import TYPE_CHECKING, Any

from devcell import API_VERSION, kinds, names
from devcell.errors import ManifestError, Problem
from devcell.manifests import jsonsafe, quantities, readonly, secrets
from devcell.manifests.model import Manifest, Path, SourceFile, field_path
from devcell.manifests.yamlsafe import ParsedDocument, YamlSyntaxError, parse_documents

if TYPE_CHECKING:
    from devcell.manifests.validator_cache import Place

KINDS = kinds.names()

_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true or false)",
    "object": "a mapping",
    "array": "an array",
    "null": "null",
}


@cache
def _validator(kind: str) -> Any:
    import jsonschema

    from devcell import schemas

    schema = schemas.schema(kind)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


_FAST: dict[str, Any] = {}


def _fast_validator(kind: str, place: Place | None = None) -> Any:
    """fastjsonschema's compiled validator: ~20 us per document instead of ~300 us.

    It only answers "valid or not" on the hot path; every message comes from jsonschema
    (the reference implementation), and a test keeps the two in agreement. Our schemas use
    nothing beyond draft 7 except the `$defs` name, which resolves as a JSON pointer.
    Compiling it costs ~0.7 s: its compiled code is kept in `place`, a state directory's
    (manifests/validator_cache.py), when the caller has one; once made, a process keeps it.
    """
    found = _FAST.get(kind)
    if found is None:
        from devcell import schemas
        from devcell.manifests import validator_cache

        found = _FAST[kind] = validator_cache.validator(kind, schemas.schema_text(kind), place)
    return found


def is_valid_fast(kind: str, data: Any, place: Place | None = None) -> bool:
    import fastjsonschema

    try:
        _fast_validator(kind, place)(data)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def _describe_type(schema: dict[str, Any]) -> str:
    t = schema.get("type")
    if t == "array":
        items = schema.get("items", {})
        item_type = items.get("type") if isinstance(items, dict) else None
        if item_type == "string":
            return "an array of strings"
        if item_type == "object":
            return "an array of mappings"
        if item_type == "array":
            return "an array of arrays"
        return "an array"
    if isinstance(t, str):
        return _TYPE_WORDS.get(t, t)
    if isinstance(t, list):
        return " or ".join(_TYPE_WORDS.get(str(x), str(x)) for x in t)
    return "a different value"


def _describe_value(value: Any, *, secret: bool = False) -> str:
    """What the document holds, for a message; a secret's type only, never its value."""
    if value is None:
        return "null"
    if secret:
        return _describe_type({"type": _json_type(value)}) if _json_type(value) else \
            f"a {type(value).__name__}"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value}"


def _json_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    for t, name in ((str, "string"), (dict, "object"), (list, "array")):
        if isinstance(value, t):
            return name
    return None


def _yaml11_hint(ctx: _Context, path: Path, value: Any) -> str:
    raw = ctx.doc.implicit.get(path)
    if raw is None:
        return ""
    if ctx.secret(path):
        return f" (YAML read it unquoted as {_describe_value(value, secret=True)}; " \
            "write it in quotes)"
    return f' (YAML read unquoted {raw} as {_describe_value(value)}; write "{raw}" in quotes)'


def _kind_and_name(data: Any) -> tuple[str | None, str | None]:
    """The document's kind and name as far as they can be read, for locating messages."""
    data = data if isinstance(data, dict) else {}
    kind = data.get("kind") if isinstance(data.get("kind"), str) else None
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str):
        return kind, None
    if names.name_problem(name):
        # Shown, not trusted: keep it one short line and make a NUL visible.
        name = (name[:37] + "..." if len(name) > 40 else name).replace("\x00", "\\0")
    return kind, name


class _Context:
    def __init__(self, source: SourceFile, doc: ParsedDocument) -> None:
        self.source = source
        self.doc = doc
        self.kind, self.name = _kind_and_name(doc.data)

    def secret(self, path: Path) -> bool:
        """Whether `path` lies inside a secret (by position): its value is never quoted."""
        return secrets.covers(self.doc.data, path)

    def problem(
        self, path: Path, message: str, *, at_key: bool = False, field: str | None = None
    ) -> Problem:
        pos = None
        if at_key:
            pos = self.doc.key_positions.get(path)
        if pos is None:
            probe = path
            while probe not in self.doc.positions and probe:
                probe = probe[:-1]
            pos = self.doc.positions.get(probe)
        line, col = pos if pos else (self.doc.line, None)
        return Problem(
            file=self.source.display,
            message=message,
            line=line,
            column=col,
            kind=self.kind if self.kind in KINDS else None,
            name=self.name,
            field=field if field is not None else (field_path(path) or None),
        )


def _schema_problems(ctx: _Context, data: dict[str, Any], place: Place | None
                     ) -> list[Problem]:
    if is_valid_fast(ctx.kind or "Cell", data, place):
        return []
    problems: list[Problem] = []
    seen: set[tuple[str | None, str]] = set()
    for error in _validator(ctx.kind or "Cell").iter_errors(data):
        for problem in _translate(ctx, error):
            key = (problem.field, problem.message)
            if key not in seen:
                seen.add(key)
                problems.append(problem)
    if not problems:
        # The two validators disagree (the fast one refused, the reference found nothing):
        # refuse rather than let the reference's leniency through, and say where.
        problems.append(_fast_problem(ctx, data))
    # A bad name fails pattern and maxLength at once; say it once, the clearest way.
    names_seen: set[str | None] = set()
    deduped = []
    for p in problems:
        if p.message.startswith(("invalid name", "must be at most", "must not contain a NUL")):
            if p.field in names_seen:
                continue
            names_seen.add(p.field)
        deduped.append(p)
    return deduped


def _fast_problem(ctx: _Context, data: dict[str, Any]) -> Problem:
    import fastjsonschema

    try:
        _fast_validator(ctx.kind or "Cell")(data)
    except fastjsonschema.JsonSchemaValueException as exc:
        path = tuple(exc.path[1:]) if exc.path and exc.path[0] == "data" else ()
        if ctx.secret(path):
            return ctx.problem(path, f"does not satisfy the schema's {exc.rule} rule")
        # "data.spec.resources.cpus must be bigger than 0": the field is named apart.
        message = exc.message.split(" ", 1)[1] if exc.message.startswith("data") else exc.message
        return ctx.problem(path, names.printable(message))
    except fastjsonschema.JsonSchemaException as exc:
        return ctx.problem((), names.printable(str(exc)))
    return ctx.problem((), "is not valid")


def document_problems(source: SourceFile, doc: ParsedDocument, validator: Any) -> list[Problem]:
    """Every schema problem of a document that is not a manifest (DevCell's configuration)."""
    ctx = _Context(source, doc)
    out: list[Problem] = []
    for error in validator.iter_errors(doc.data):
        out += [p for p in _translate(ctx, error) if p not in out]
    return sorted(out, key=lambda p: (p.line or 0, p.column or 0))


def _translate(ctx: _Context, error: Any) -> list[Problem]:
    path: Path = tuple(error.absolute_path)
    validator = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    instance = error.instance
    hidden = ctx.secret(path)
    if validator == "additionalProperties" and isinstance(instance, dict):
        known = list(schema.get("properties", {}))
        out = []
        for key in instance:
            if key in known:
                continue
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            if known:
                hint += f"; known fields: {', '.join(known)}"
            out.append(ctx.problem(path + (key,), f"unknown field{hint}", at_key=True))
        return out
    if validator == "required":
        missing = [k for k in error.validator_value if k not in (instance or {})]
        return [
            ctx.problem(path, f'missing required field "{k}"', field=field_path(path + (k,)))
            for k in missing
        ]
    alternatives: list[list[str]] = [
        sub["required"] for sub in error.validator_value or []
        if isinstance(sub, dict) and isinstance(sub.get("required"), list)
    ] if validator == "anyOf" else []
    if alternatives and all(len(a) == 1 for a in alternatives):
        # Never jsonschema's own message: it quotes the whole mapping, secrets included.
        either = " or ".join(f'"{a[0]}"' for a in alternatives)
        return [ctx.problem(path, f"missing required field {either}",
                            field=field_path(path + (alternatives[0][0],)))]
    if validator == "not" and isinstance(error.validator_value, dict) \
            and list(error.validator_value) == ["required"]:
        both = error.validator_value["required"]
        return [ctx.problem(path + (both[-1],), "give " + " or ".join(f'"{k}"' for k in both)
                            + ", not both (build makes the image)", at_key=True)]
    if validator == "type":
        msg = f"expected {_describe_type(schema)}, got {_describe_value(instance, secret=hidden)}"
        return [ctx.problem(path, msg + _yaml11_hint(ctx, path, instance))]
    if validator == "const":
        return [ctx.problem(path, f'must be "{error.validator_value}"')]
    if validator == "enum":
        allowed = ", ".join(str(v) for v in error.validator_value)
        got = (secrets.REDACTED if hidden else f'"{instance}"' if isinstance(instance, str)
               else _describe_value(instance))
        hint = _yaml11_hint(ctx, path, instance)
        return [ctx.problem(path, f"must be one of: {allowed} (got {got}){hint}")]
    if "propertyNames" in error.relative_schema_path and isinstance(instance, str):
        # The offending key itself (a label key): point at it, not at the whole mapping.
        return [
            ctx.problem(
                path + (instance,),
                f'invalid key "{instance}": does not match the pattern {schema.get("pattern")}',
                at_key=True,
            )
        ]
    if validator in ("pattern", "maxLength", "minLength") and _is_name_schema(schema):
        return [ctx.problem(path, names.name_problem(instance) or error.message)]
    if validator == "pattern":
        shown = secrets.REDACTED if hidden else f'"{names.printable(str(instance))}"'
        if schema["pattern"] == quantities.DURATION_PATTERN:
            return [ctx.problem(path, f"{shown} is not a duration: write a whole number of "
                                      "seconds, minutes, hours or days, e.g. 90s, 30m, 12h, 7d")]
        if schema["pattern"] == quantities.DURATION_OR_NEVER_PATTERN:
            return [ctx.problem(path, f"{shown} is neither a duration nor never: write a whole "
                                      "number of seconds, minutes, hours or days, e.g. 90s, "
                                      "30m, 12h, 7d, or never")]
        if schema["pattern"] == quantities.MEMORY_PATTERN:
            return [ctx.problem(path, f"{shown} is not a memory quantity: "
                                      f"{quantities.MEMORY_WORDS}")]
        if schema["pattern"].startswith("^unix:///"):  # the configuration's cluster.engine
            return [ctx.problem(path, f"{shown} is not a unix socket address: write "
                                      "unix:///path/to/docker.sock (for a manager elsewhere, a "
                                      "socket forwarded with ssh -L; the engine's API is not "
                                      "taken over plain tcp://)")]
        return [ctx.problem(path, f'{shown} does not match the pattern {schema["pattern"]}')]
    if validator == "propertyNames":
        return [ctx.problem(path, f"invalid key: {error.message}")]
    words = {
        "minItems": f"must have at least {error.validator_value} item(s)",
        "maxItems": f"must have at most {error.validator_value} items",
        "minLength": f"must be at least {error.validator_value} characters",
        "maxLength": f"must be at most {error.validator_value} characters",
        "minimum": f"must be at least {error.validator_value}",
        "maximum": f"must be at most {error.validator_value}",
        "exclusiveMinimum": f"must be greater than {error.validator_value}",
        "maxProperties": f"must have at most {error.validator_value} entries",
    }
    # jsonschema's own message quotes the value: never for a secret.
    fallback = f"does not satisfy the schema's {validator} rule" if hidden else error.message
    return [ctx.problem(path, words.get(validator, fallback))]


def _is_name_schema(schema: dict[str, Any]) -> bool:
    return schema.get("pattern") == names.SCHEMA_PATTERN


def _manifest_dir(source: SourceFile) -> str:
    """What a relative path in the manifest is relative to: its file's directory (the
    working directory for standard input)."""
    return os.path.dirname(source.key) if source.key != "-" else os.getcwd()


def _normalise_cell(spec: dict[str, Any], base: str) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    for build in [spec.get("build"), *(s.get("build") for s in spec.get("sidecars", []))]:
        if build is not None:
            # Stored absolute, so the daemon and every later reconcile build the same directory
            # whoever runs them and from wherever; admission checks where it leads.
            build["context"] = os.path.normpath(os.path.join(base, build.get("context", ".")))
            build.setdefault("dockerfile", "Dockerfile")
    for feature in spec.get("features", []):
        ref = feature["ref"]
        if ref.startswith(("./", "../")) or ref in (".", ".."):
            # A local feature folder: stored absolute, as build.context is.
            feature["ref"] = os.path.normpath(os.path.join(base, ref))
        feature.setdefault("options", {})
    spec.setdefault("state", "Running")
    workspace = spec.setdefault("workspace", {})
    workspace.setdefault("mountPath", "/workspace")
    for service in spec.get("services", []):
        service.setdefault("restart", "Always")
    for var in spec.get("env", []):
        var.setdefault("secret", False)
    for mount in spec.get("mounts", []):
        mount.setdefault("readOnly", False)
    spec.setdefault("network", {}).setdefault("mode", "none")
    ports = list(spec["network"].get("ports", []))
    for sidecar in spec.get("sidecars", []):
        sidecar.setdefault("restart", "Always")
        for var in sidecar.get("env", []):
            var.setdefault("secret", False)
        ports += sidecar.get("ports", [])
    for port in ports:
        port.setdefault("hostPort", port["containerPort"])
        port.setdefault("hostIP", "127.0.0.1")
    return spec


def _nan_problems(ctx: _Context, value: Any, path: Path = ()) -> list[Problem]:
    """NaN (`.nan`) passes every JSON Schema bound (all comparisons are false): refuse it."""
    if isinstance(value, float) and value != value:
        raw = "a value" if ctx.secret(path) else ctx.doc.implicit.get(path, ".nan")
        return [ctx.problem(path, f"expected a number, got {raw} (not a number)")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nan_problems(ctx, v, path + (k,))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nan_problems(ctx, v, path + (i,))]
    return []


NUL_FREE_EXCEPT = (("metadata", "annotations"),)
"""Free-form notes that never reach a process or an engine: they may hold a NUL (shown
escaped, like every printed string)."""


def _nul_problems(ctx: _Context, value: Any, path: Path = ()) -> list[Problem]:
    """A NUL (written `\\0` in YAML, `\\u0000` in JSON) cannot reach a process: argv, the
    environment, paths and labels are C strings that end at the first NUL. Refused in every
    string, keys included (annotations aside), so no field can carry one to a backend."""
    if path in NUL_FREE_EXCEPT:
        return []
    if isinstance(value, str):
        return [ctx.problem(path, "must not contain a NUL character")] if "\x00" in value else []
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if "\x00" in k:
                out.append(ctx.problem(path + (k,), "key must not contain a NUL character",
                                       at_key=True))
            else:
                out += _nul_problems(ctx, v, path + (k,))
        return out
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nul_problems(ctx, v, path + (i,))]
    return []


def _quantity_problems(ctx: _Context, spec: dict[str, Any]) -> list[Problem]:
    """Quantities that match their pattern but no backend could use (0, overflow)."""
    memory = (spec.get("resources") or {}).get("memory")
    problem = quantities.memory_problem(memory) if isinstance(memory, str) else None
    return [ctx.problem(("spec", "resources", "memory"), problem)] if problem else []


def _semantic_problems(ctx: _Context, data: dict[str, Any]) -> list[Problem]:
    """Rules JSON Schema cannot say: uniqueness inside lists, exact names, quantities."""
    problems = _quantity_problems(ctx, data["spec"]) if ctx.kind == "Cell" else []
    # Python's `$` also matches before a trailing newline, so a schema pattern lets "api\n"
    # through; names end up in paths and labels, so check them exactly.
    name_problem = names.name_problem(data["metadata"]["name"])
    if name_problem:
        problems.append(ctx.problem(("metadata", "name"), name_problem))
    if ctx.kind == "Cell":
        seen: dict[str, int] = {}
        for i, service in enumerate(data["spec"].get("services", [])):
            if service["name"] in seen:
                problems.append(
                    ctx.problem(
                        ("spec", "services", i, "name"),
                        f'duplicate service name "{service["name"]}" '
                        f"(first at spec.services[{seen[service['name']]}])",
                    )
                )
            seen.setdefault(service["name"], i)
        problems += _feature_problems(ctx, data["spec"])
        problems += _env_problems(ctx, data["spec"].get("env", []), ("spec", "env"))
        problems += _unique_names(ctx, data["spec"].get("volumes", []), ("spec", "volumes"),
                                  "volume")
        sidecars = data["spec"].get("sidecars", [])
        problems += _unique_names(ctx, sidecars, ("spec", "sidecars"), "sidecar")
        for i, sidecar in enumerate(sidecars):
            where = ("spec", "sidecars", i, "env")
            problems += _env_problems(ctx, sidecar.get("env", []), where)
            problems += [ctx.problem((*where, j, "secret"), (
                "a sidecar's environment is given to the engine as its container's (docker "
                "inspect shows it), so it holds no secret; put the secret in a file of the "
                "sidecar's volume, or in spec.env of the cell"))
                for j, var in enumerate(sidecar.get("env", [])) if var.get("secret")]
    return problems


def _env_problems(ctx: _Context, env: list[dict[str, Any]], where: Path) -> list[Problem]:
    seen: set[str] = set()
    problems = []
    for i, var in enumerate(env):
        if var["name"] in seen:
            problems.append(ctx.problem((*where, i, "name"), f'duplicate variable "{var["name"]}"'))
        seen.add(var["name"])
    return problems


def _unique_names(ctx: _Context, items: list[dict[str, Any]], where: Path, what: str
                  ) -> list[Problem]:
    """A name given twice in one list (sidecars, volumes: each names an engine object)."""
    seen: dict[str, int] = {}
    problems = []
    for i, item in enumerate(items):
        first = seen.setdefault(item["name"], i)
        if first != i:
            problems.append(ctx.problem((*where, i, "name"), (
                f'duplicate {what} name "{item["name"]}" (first at '
                f"{field_path((*where, first))})")))
    return problems


def _feature_problems(ctx: _Context, spec: dict[str, Any]) -> list[Problem]:
    """Each spec.features[].ref is one of the three forms, and named once."""
    if not spec.get("features"):
        return []
    from devcell.manifests import feature_refs as refs

    problems = []
    seen: dict[str, int] = {}
    for i, feature in enumerate(spec.get("features", [])):
        try:
            resource = refs.parse(feature["ref"]).resource
        except ValueError as exc:
            problems.append(ctx.problem(("spec", "features", i, "ref"), str(exc)))
            continue
        if resource in seen:
            problems.append(ctx.problem(("spec", "features", i, "ref"), (
                f"names the feature of spec.features[{seen[resource]}] again; list each "
                "feature once")))
        seen.setdefault(resource, i)
    return problems


def is_json(source: SourceFile) -> bool:
    """A `.json` file is read as JSON, strictly; everything else (stdin too) as YAML."""
    return source.display.endswith(".json")


def read_mapping(source: SourceFile) -> dict[str, Any]:
    """The one mapping a data file holds (a resume input): parsed as manifests are (strict
    JSON for `.json`, YAML without aliases or duplicate keys), located problems otherwise."""
    try:
        text = source.data.decode("utf-8")
        docs = (jsonsafe.parse_document(text) if is_json(source)
                else parse_documents(text))
    except UnicodeDecodeError:
        raise ManifestError([Problem(source.display, "file is not valid UTF-8")]) from None
    except YamlSyntaxError as exc:
        raise ManifestError([Problem(source.display, exc.message, line=exc.line,
                                     column=exc.column)]) from None
    docs = [d for d in docs if d.data is not None]
    problems = [Problem(source.display, p.message, line=p.line, column=p.column,
                        field=field_path(p.path) or None) for d in docs for p in d.problems]
    if len(docs) != 1 or not isinstance(docs[0].data, dict):
        line = docs[1].line if len(docs) > 1 else (docs[0].line if docs else None)
        problems.append(Problem(source.display, "input must be one mapping of keys to values",
                                line=line))
    if problems:
        raise ManifestError(problems)
    data: dict[str, Any] = docs[0].data
    return data


def object_keys(source: SourceFile) -> list[tuple[str, str]]:
    """The kind and name of each document of a file, as far as they read, without validating
    it: a third of `parse_source`'s cost, for a GitOps full sync finding the objects defined
    in two files before it applies any (the file is validated when it is applied)."""
    try:
        text = source.data.decode("utf-8")
        docs = jsonsafe.parse_document(text) if is_json(source) else parse_documents(text)
    except (UnicodeDecodeError, YamlSyntaxError):
        return []
    out = []
    for doc in docs:
        kind, name = _kind_and_name(doc.data)
        if kind in KINDS and name is not None:
            out.append((kind, name))
    return out


def parse_source(source: SourceFile, place: Place | None = None
                 ) -> tuple[list[Manifest], list[Problem]]:
    """All manifests in one file, or the problems that stop them being accepted. `place`:
    where the state directory keeps compiled validators (validator_cache.at), if any."""
    try:
        text = source.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = source.data[: exc.start]
        line = before.count(b"\n") + 1
        # Everything before the first bad byte decodes, so the column can count characters.
        column = len(before[before.rfind(b"\n") + 1 :].decode("utf-8")) + 1
        bad = source.data[exc.start : exc.start + 1].hex()
        message = f"file is not valid UTF-8 (byte 0x{bad}); save it as UTF-8"
        return [], [Problem(source.display, message, line=line, column=column)]
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        return [], [Problem(source.display, "file contains a NUL byte", line=line)]
    try:
        docs = (jsonsafe.parse_document(text) if is_json(source)
                else parse_documents(text))
    except YamlSyntaxError as exc:
        kind, name = _kind_and_name(exc.data)
        return [], [
            Problem(
                source.display, exc.message, line=exc.line, column=exc.column,
                kind=kind if kind in KINDS else None, name=name,
                field=field_path(exc.path) or None,
            )
        ]
    manifests: list[Manifest] = []
    problems: list[Problem] = []
    escapes = "\\" in text
    for doc in docs:
        if doc.data is None:
            continue
        ctx = _Context(source, doc)
        for yp in doc.problems:
            problems.append(
                Problem(
                    source.display, yp.message, line=yp.line, column=yp.column,
                    kind=ctx.kind if ctx.kind in KINDS else None, name=ctx.name,
                    field=field_path(yp.path) or None,
                )
            )
        data = doc.data
        if not isinstance(data, dict):
            problems.append(
                ctx.problem((), "expected a mapping with apiVersion, kind, metadata and spec")
            )
            continue
        if ctx.kind not in KINDS:
            shown = data.get("kind")
            msg = (
                f'unknown kind "{shown}" (known kinds: {", ".join(KINDS)})'
                if "kind" in data
                else f'missing required field "kind" (one of: {", ".join(KINDS)})'
            )
            problems.append(ctx.problem(("kind",), msg, field="kind"))
            continue
        if data.get("apiVersion") != API_VERSION and "apiVersion" in data:
            problems.append(
                ctx.problem(
                    ("apiVersion",), f'must be "{API_VERSION}" (got "{data["apiVersion"]}")'
                )
            )
            continue
        data, given_version = readonly.strip(data)  # get's own output applies
        version = readonly.resource_version(given_version)
        # A literal NUL byte was refused above; one can only come from an escape (\0 in
        # YAML, \u0000 in JSON), so a file without a backslash needs no walk.
        found = _nul_problems(ctx, data) if escapes else []
        if isinstance(version, str):
            found.append(ctx.problem(("metadata", "resourceVersion"), version))
        flagged = {p.field for p in found}
        found += [p for p in _schema_problems(ctx, data, place) if p.field not in flagged]
        flagged = {p.field for p in found}
        found += [p for p in _nan_problems(ctx, data) if p.field not in flagged]
        if not found:
            found = _semantic_problems(ctx, data)
        if found or doc.problems:
            problems.extend(sorted(found, key=lambda p: (p.line or 0, p.column or 0)))
            continue
        assert ctx.kind is not None and ctx.name is not None
        spec = (_normalise_cell(data["spec"], _manifest_dir(source)) if ctx.kind == "Cell"
                else dict(data["spec"]))
        meta = data["metadata"]
        manifests.append(
            Manifest(
                kind=ctx.kind,
                name=ctx.name,
                spec=spec,
                labels=dict(meta.get("labels", {})),
                annotations=dict(meta.get("annotations", {})),
                file=source.display,
                source=source.key,
                line=doc.positions.get((), (doc.line, 1))[0],
                positions=doc.positions,
                resource_version=version if isinstance(version, int) else None,
                owner=meta.get("owner"),
            )
        )
    return manifests, problems
