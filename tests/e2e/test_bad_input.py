"""The bad-input corpus: every way a manifest can be wrong is refused cleanly.

For each case `devcell apply` must exit 1, name file:line[:column], the object and the field
for every problem, print no traceback, and leave what the state records exactly as it was
(directly: no database at all when nothing had been applied before). The module runs again
through a server (tests/e2e/conftest.py): the same errors at the user's own file and line, the
same exit code, nothing recorded. The manifests live one case per
file in tests/e2e/bad_inputs/; cases too big to commit (oversize, 100000-deep) are written
into tmp_path by the test.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from devcell.manifests.loader import MAX_DOCUMENT_BYTES
from devcell.manifests.yamlsafe import MAX_DEPTH
from tests.conftest import REPO, Cli

pytestmark = pytest.mark.e2e

Fingerprint = Callable[[Path], str | None]

CORPUS = Path(__file__).resolve().parent / "bad_inputs"
REL = CORPUS.relative_to(REPO).as_posix()  # paths are given relative to the repo (cli's cwd)
PRIOR = f"{REL}/prior/base.yaml"  # api, other, snap-a and snap-b of api, fork from snap-a

# The error lists the Cell spec's fields in the schema's order: read from the schema, so a new
# field does not break every case that quotes the list.
KNOWN_CELL_FIELDS = ", ".join(json.loads(
    (REPO / "devcell" / "schemas" / "cell.schema.json").read_text())["properties"]["spec"]["properties"])
NAME_RULE = 'use lower-case letters, digits and "-", starting and ending with a letter or digit'


@dataclass(frozen=True)
class Case:
    id: str
    paths: tuple[str, ...]
    """What follows each -f, relative to bad_inputs/ ("-" is stdin)."""
    errors: tuple[tuple[str, str], ...]
    """Per problem, in order: the exact start of its line after "error: " (file:line:col:
    Kind "name": field:) and a piece of the message that must follow it."""
    prior: bool = False
    """Apply prior/base.yaml first (the immutable-field cases)."""
    stdin: str | None = None
    """A corpus file to feed on stdin."""


def _p(name: str) -> str:
    return f"{REL}/{name}"


CASES = [
    Case("yaml-syntax-unclosed-flow", ("syntax-error.yaml",), (
        (f"{_p('syntax-error.yaml')}:10:1: ",
         "YAML syntax error: did not find expected ',' or ']' at the end of the file "
         "(while parsing a flow sequence started at line 9, column 16)"),
    )),
    Case("yaml-syntax-bad-indent", ("syntax-error-indent.yaml",), (
        (f"{_p('syntax-error-indent.yaml')}:7:2: ",
         "YAML syntax error: did not find expected key "
         "(while parsing a block mapping started at line 1, column 1)"),
    )),
    Case("duplicate-key", ("duplicate-key.yaml",), (
        (f'{_p("duplicate-key.yaml")}:8:3: Cell "api": spec.backend: ',
         'duplicate key "backend" (first at line 6)'),
    )),
    Case("alias-bomb", ("alias-bomb.yaml",), (
        (f'{_p("alias-bomb.yaml")}:6:8: Cell "api": metadata.annotations.a: ',
         "anchors are not allowed in manifests (&a)"),
    )),
    Case("nesting-too-deep", ("too-deep.yaml",), (
        # root mapping, spec, then lists: the 33rd level opens at column 13 + 30.
        (f'{_p("too-deep.yaml")}:7:43: Cell "api": spec.services' + "[0]" * 30 + ": ",
         f"nesting deeper than {MAX_DEPTH} levels is not allowed"),
    )),
    Case("unknown-kind", ("unknown-kind.yaml",), (
        (f"{_p('unknown-kind.yaml')}:2:7: kind: ",
         'unknown kind "Pod" (known kinds: Cell, Snapshot)'),
    )),
    Case("unknown-field", ("unknown-field.yaml",), (
        (f'{_p("unknown-field.yaml")}:7:3: Cell "api": spec.servics: ',
         f'unknown field (did you mean "services"?); known fields: {KNOWN_CELL_FIELDS}'),
    )),
    Case("wrong-type", ("wrong-type.yaml",), (
        (f'{_p("wrong-type.yaml")}:9:16: Cell "api": spec.services[0].command: ',
         "expected an array of strings, got a string"),
    )),
    Case("unquoted-no-env-value", ("unquoted-no.yaml",), (
        (f'{_p("unquoted-no.yaml")}:9:14: Cell "api": spec.env[0].value: ',
         'expected a string, got boolean false (YAML read unquoted no as boolean false; '
         'write "no" in quotes)'),
    )),
    Case("name-dotdot", ("name-dotdot.yaml",), (
        (f'{_p("name-dotdot.yaml")}:4:9: Cell "..": metadata.name: ',
         f'invalid name "..": {NAME_RULE}'),
    )),
    Case("name-slash", ("name-slash.yaml",), (
        (f'{_p("name-slash.yaml")}:4:9: Cell "a/b": metadata.name: ',
         f'invalid name "a/b": {NAME_RULE}'),
    )),
    Case("name-300-chars", ("name-too-long.yaml",), (
        (f'{_p("name-too-long.yaml")}:4:9: Cell "{"a" * 37}...": metadata.name: ',
         "must be at most 63 characters (got 300)"),
    )),
    Case("name-with-nul", ("name-nul.yaml",), (
        (f'{_p("name-nul.yaml")}:4:9: Cell "api\\0evil": metadata.name: ',
         "must not contain a NUL character"),
    )),
    Case("label-key-invalid", ("label-key.yaml",), (
        (f'{_p("label-key.yaml")}:7:5: Cell "api": metadata.labels.not a key: ',
         'invalid key "not a key": does not match the pattern'),
    )),
    Case("cpus-nan", ("nan.yaml",), (
        (f'{_p("nan.yaml")}:8:11: Cell "api": spec.resources.cpus: ',
         "expected a number, got .nan (not a number)"),
    )),
    Case("explicit-tag-bad-value", ("explicit-tag.yaml",), (
        (f'{_p("explicit-tag.yaml")}:8:11: Cell "api": spec.resources.cpus: ',
         '"two" is not a valid !!float value'),
    )),
    Case("missing-snapshot", ("missing-snapshot.yaml",), (
        (f'{_p("missing-snapshot.yaml")}:9:17: Cell "fork": spec.workspace.from.snapshot: ',
         'snapshot "no-such-snapshot" not found'),
    )),
    Case("immutable-backend", ("immutable-backend.yaml",), (
        (f'{_p("immutable-backend.yaml")}:6:12: Cell "api": spec.backend: ',
         'field is immutable (recorded "fake", got "container")'),
    ), prior=True),
    Case("immutable-snapshot-cell", ("immutable-snapshot-cell.yaml",), (
        (f'{_p("immutable-snapshot-cell.yaml")}:6:9: Snapshot "snap-a": spec.cell: ',
         "a Snapshot's cell is immutable (recorded cell \"api\", got \"other\")"),
    ), prior=True),
    Case("immutable-fork-source", ("immutable-fork-source.yaml",), (
        (f'{_p("immutable-fork-source.yaml")}:9:7: Cell "fork": spec.workspace.from: ',
         'fork source is immutable (recorded snapshot "snap-a", got snapshot "snap-b")'),
    ), prior=True),
    Case("same-name-two-files", ("same-name-dir",), (
        (f'{_p("same-name-dir/b.yaml")}:4:9: Cell "twin": metadata.name: ',
         f'Cell "twin" is defined twice in this apply (also in {_p("same-name-dir/a.yaml")}:1)'),
    )),
    Case("same-name-two-documents", ("same-name-docs.yaml",), (
        (f'{_p("same-name-docs.yaml")}:11:9: Cell "twin": metadata.name: ',
         f'Cell "twin" is defined twice in this apply (also in {_p("same-name-docs.yaml")}:1)'),
    )),
    Case("multi-problem-all-listed", ("multi-problem.yaml",), (
        (f'{_p("multi-problem.yaml")}:7:10: Cell "api": spec.state: ',
         'must be one of: Running, Stopped, Sleeping (got "Paused")'),
        (f'{_p("multi-problem.yaml")}:8:3: Cell "api": spec.imagePulPolicy: ',
         "unknown field"),
        (f'{_p("multi-problem.yaml")}:11:16: Cell "api": spec.services[0].command: ',
         "expected an array of strings, got a string"),
        (f'{_p("multi-problem.yaml")}:14:14: Cell "api": spec.env[0].value: ',
         'YAML read unquoted no as boolean false; write "no" in quotes'),
        (f'{_p("multi-problem.yaml")}:16:11: Cell "api": spec.resources.cpus: ',
         "must be greater than 0"),
        (f'{_p("multi-problem.yaml")}:21:9: Snapshot "Bad_Name": metadata.name: ',
         f'invalid name "Bad_Name": {NAME_RULE}'),
    )),
    Case("security-defaults-refused-at-validation", ("security-refusals.yaml",), (
        (f'{_p("security-refusals.yaml")}:9:16: Cell "risky": spec.workspace.mountPath: ',
         "/proc/ws would hide or overwrite /proc, a system directory of the cell"),
        (f'{_p("security-refusals.yaml")}:11:17: Cell "risky": spec.mounts[0].hostPath: ',
         "host bind mounts are off by default: /etc is not allowed; an administrator can "
         "allow it in security.allowedHostPaths of "),
        (f'{_p("security-refusals.yaml")}:14:11: Cell "risky": spec.network.mode: ',
         "host networking shares the host's network namespace and is off by default"),
    )),
    Case("security-published-ports", ("security-ports.yaml",), (
        (f'{_p("security-ports.yaml")}:12:17: Cell "web": spec.network.ports[0].hostIP: ',
         "publishing on 0.0.0.0 would expose the port beyond this machine"),
        # 0.0.0.0 takes the port on every IPv4 address, loopback included.
        (f'{_p("security-ports.yaml")}:14:19: Cell "web": spec.network.ports[1].hostPort: ',
         "127.0.0.1:8080 is already published by spec.network.ports[0]"),
        (f'{_p("security-ports.yaml")}:17:19: Cell "web": spec.network.ports[2].hostPort: ',
         "127.0.0.1:8080 is already published by spec.network.ports[0]"),
    )),
    Case("all-or-nothing-directory", ("all-or-nothing",), (
        (f'{_p("all-or-nothing/bad.yaml")}:7:10: Cell "bad": spec.state: ',
         'must be one of: Running, Stopped, Sleeping (got "Paused")'),
    )),
    Case("invalid-utf8", ("invalid-utf8.yaml",), (
        (f"{_p('invalid-utf8.yaml')}:6:14: ", "file is not valid UTF-8 (byte 0xe9)"),
    )),
    Case("json-wrong-type", ("wrong-type.json",), (
        (f'{_p("wrong-type.json")}:7:27: Cell "worker": spec.resources.cpus: ',
         "expected a number, got a string"),
    )),
    Case("trailing-newline", ("trailing-newline.yaml",), (
        (f'{_p("trailing-newline.yaml")}:7:11: Cell "api": metadata.labels.team: ',
         '"core\\n" does not match the pattern'),
        (f'{_p("trailing-newline.yaml")}:11:13: Cell "api": spec.env[0].name: ',
         '"FOO\\n" does not match the pattern'),
        (f'{_p("trailing-newline.yaml")}:14:13: Cell "api": spec.resources.memory: ',
         '"512Mi\\n" is not a memory quantity: write 512Mi or 2Gi'),
    )),
    Case("image-reference", ("image-reference.yaml",), (
        (f'{_p("image-reference.yaml")}:8:10: Cell "api": spec.image: ',
         '"devcell/busybox:latest\\n" does not match the pattern'),
        (f'{_p("image-reference.yaml")}:16:10: Cell "web": spec.image: ',
         '"devcell/busybox latest" does not match the pattern'),
    )),
    Case("nul-in-strings", ("nul-strings.yaml",), (
        (f'{_p("nul-strings.yaml")}:12:16: Cell "api": spec.workspace.mountPath: ',
         "must not contain a NUL character"),
        (f'{_p("nul-strings.yaml")}:15:14: Cell "api": spec.env[0].value: ',
         "must not contain a NUL character"),
        (f'{_p("nul-strings.yaml")}:18:23: Cell "api": spec.services[0].command[1]: ',
         "must not contain a NUL character"),
    )),
    Case("bad-durations", ("bad-durations.yaml",), (
        (f'{_p("bad-durations.yaml")}:7:22: Cell "api": spec.snapshots.every: ',
         '"0h" is not a duration: write a whole number of seconds, minutes, hours or days'),
        (f'{_p("bad-durations.yaml")}:7:34: Cell "api": spec.snapshots.retain: ',
         "must be at least 1"),
        (f'{_p("bad-durations.yaml")}:12:24: Snapshot "snap-a": spec.ttl: ',
         '"1.5h" is not a duration'),
    )),
    Case("bad-idle", ("bad-idle.yaml",), (
        (f'{_p("bad-idle.yaml")}:7:22: Cell "api": spec.idle.sleepAfter: ',
         '"0m" is neither a duration nor never: write a whole number of seconds, minutes, '
         'hours or days, e.g. 90s, 30m, 12h, 7d, or never'),
        (f'{_p("bad-idle.yaml")}:15:17: Cell "web": spec.idle.sleepAfter: ',
         '"soon" is neither a duration nor never'),
        (f'{_p("bad-idle.yaml")}:16:5: Cell "web": spec.idle.sleepafter: ',
         'unknown field (did you mean "sleepAfter"?)'),
    )),
    Case("memory-zero-and-overflow", ("memory-range.yaml",), (
        (f'{_p("memory-range.yaml")}:8:13: Cell "zero": spec.resources.memory: ',
         "memory limit must be greater than 0"),
        (f'{_p("memory-range.yaml")}:17:13: Cell "huge": spec.resources.memory: ',
         "memory limit 99999999999999Ti is larger than the maximum of 8Ei"),
    )),
    Case("backend-limits", ("backend-limits.yaml",), (
        (f'{_p("backend-limits.yaml")}:10:16: Cell "small": spec.workspace.mountPath: ',
         "/.dockerenv is reserved by the container backend"),
        (f'{_p("backend-limits.yaml")}:12:11: Cell "small": spec.resources.cpus: ',
         "must be at least 0.01 on the container backend"),
        (f'{_p("backend-limits.yaml")}:13:13: Cell "small": spec.resources.memory: ',
         "memory limit 4Mi is below the container backend's minimum of 6Mi"),
    )),
    Case("sidecars-fields", ("sidecars-fields.yaml",), (
        (f'{_p("sidecars-fields.yaml")}:11:14: Cell "db-app": spec.volumes[1].name: ',
         'duplicate volume name "cache" (first at spec.volumes[0])'),
        (f'{_p("sidecars-fields.yaml")}:16:52: Cell "db-app": spec.sidecars[0].env[0].secret: ',
         "a sidecar's environment is given to the engine as its container's"),
        (f'{_p("sidecars-fields.yaml")}:18:18: Cell "db-app": spec.sidecars[0].env[2].name: ',
         'duplicate variable "MODE"'),
        (f'{_p("sidecars-fields.yaml")}:19:13: Cell "db-app": spec.sidecars[1].name: ',
         'duplicate sidecar name "db" (first at spec.sidecars[0])'),
    )),
    Case("sidecars-image-or-build", ("sidecars-image.yaml",), (
        (f'{_p("sidecars-image.yaml")}:12:7: Cell "db-app": spec.sidecars[0].build: ',
         'give "image" or "build", not both'),
        (f'{_p("sidecars-image.yaml")}:13:7: Cell "db-app": spec.sidecars[1].image: ',
         'missing required field "image" or "build"'),
    )),
    Case("sidecars-resources", ("sidecars-resources.yaml",), (
        (f'{_p("sidecars-resources.yaml")}:12:25: Cell "db-app": spec.sidecars[0].resources.cpus: ',
         "must be at least 0.01 on the container backend"),
        (f'{_p("sidecars-resources.yaml")}:12:40: Cell "db-app": spec.sidecars[0].resources.memory: ',
         "memory limit 4Mi is below the container backend's minimum of 6Mi"),
    )),
    Case("sidecars-on-vm-and-their-paths", ("sidecars-vm.yaml",), (
        (f'{_p("sidecars-vm.yaml")}:16:5: Cell "db-app": spec.sidecars: ',
         "the vm backend runs no sidecar containers"),
        (f'{_p("sidecars-vm.yaml")}:14:5: Cell "db-app": spec.volumes: ',
         "the vm backend runs no named volumes"),
        (f'{_p("sidecars-vm.yaml")}:14:32: Cell "db-app": spec.volumes[0].mountPath: ',
         "/workspace/.cache overlaps /workspace (spec.workspace.mountPath)"),
        (f'{_p("sidecars-vm.yaml")}:19:27: Cell "db-app": spec.sidecars[0].volume.mountPath: ',
         "/etc/db would hide or overwrite /etc"),
        (f'{_p("sidecars-vm.yaml")}:18:45: Cell "db-app": spec.sidecars[0].ports[0].hostPort: ',
         "127.0.0.1:18080 is already published by spec.network.ports[0]"),
    )),
    Case("fork-of-another-backends-snapshot", ("fork-other-backend.yaml",), (
        (f'{_p("fork-other-backend.yaml")}:11:17: Cell "boxed": spec.workspace.from.snapshot: ',
         'snapshot "snap-a" was taken by the fake backend and this cell runs on the container '
         "backend"),
    ), prior=True),
    Case("json-trailing-comma", ("trailing-comma.json",), (
        (f'{_p("trailing-comma.json")}:6:22: Cell "worker": spec: ',
         "JSON syntax error: trailing comma is not allowed"),
    )),
    Case("json-duplicate-key", ("duplicate-key.json",), (
        (f'{_p("duplicate-key.json")}:6:3: Cell "worker": spec: ',
         'duplicate key "spec" (first at line 5)'),
    )),
    Case("json-nan", ("nan.json",), (
        (f'{_p("nan.json")}:2:52: Cell "worker": spec.resources.cpus: ',
         "JSON syntax error: expected a value, found 'N'"),
    )),
    Case("stdin-bad-document", ("-",), (
        ('<stdin>:5:3: Cell "api": metadata.lables: ',
         'unknown field (did you mean "labels"?); known fields: name, labels, annotations'),
    ), stdin="stdin-bad.yaml"),
]


DECLARED = "name, id, labels, annotations, spec, manifest_hash, generation, source, deleted_at"
"""What an apply records of an object: not its status, phase or resourceVersion, which a serving
daemon converging the objects applied before changes meanwhile."""
APPLY_EVENTS = ("Applied", "OwnerChanged", "Adopted", "Pruned")


def recorded(state_dir: Path) -> str | None:
    """A digest of what applies recorded: each Cell's and Snapshot's declared fields, the
    applied sources and the events of those changes; None when nothing is recorded (no
    database, or the one a serving daemon made, without objects)."""
    path = state_dir / "state.db"
    if not path.exists():
        return None
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = [(table, *row) for table in ("cells", "snapshots")
                for row in conn.execute(f"SELECT {DECLARED} FROM {table} ORDER BY id")]
        rows += [("applied", *row) for row in conn.execute(
            "SELECT * FROM applied_sources ORDER BY 1")]
        rows += [("event", *row) for row in conn.execute(
            "SELECT id, object_kind, object_id, reason, message FROM events WHERE reason IN "
            f"({', '.join('?' * len(APPLY_EVENTS))}) ORDER BY id", APPLY_EVENTS)]
    finally:
        conn.close()
    return hashlib.sha256(repr(rows).encode()).hexdigest() if rows else None


State = tuple[str | None, str | None]


@pytest.fixture
def state(state_dir: Path, cli_mode: str, fingerprint: Fingerprint) -> Callable[[], State]:
    """What the state directory records now: what applies recorded, and on the state directory
    (cli_mode direct) every row of state.db as well (None: no database at all); a serving
    daemon writes its own rows (its lease, the objects' convergence) while the test runs."""
    return lambda: (recorded(state_dir),
                    fingerprint(state_dir) if cli_mode == "direct" else cli_mode)


@pytest.fixture
def nothing(cli_mode: str) -> State:
    """The state of a directory nothing was applied to: directly, no database at all."""
    return None, None if cli_mode == "direct" else cli_mode


def assert_state_unchanged(now: State, before: State) -> None:
    """Identical rows after a refused apply; a refused first apply creates no state.db at all
    (directly: served, the daemon made it)."""
    assert now == before, "a rejected apply changed the state database"


def assert_refused(result: subprocess.CompletedProcess[str],
                   errors: tuple[tuple[str, str], ...]) -> None:
    """Exit 1, exactly these problems in this order, the summary line, no traceback."""
    stderr = result.stderr
    assert result.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    assert result.stdout == "", result.stdout
    lines = stderr.splitlines()
    *problems, summary = lines
    assert len(problems) == len(errors), stderr
    for line, (prefix, message) in zip(problems, errors, strict=True):
        assert line.startswith(f"error: {prefix}"), f"\n{line}\nexpected to start with\n{prefix}"
        assert message in line[len("error: ") + len(prefix):], f"\n{line}\nmissing: {message}"
    n = len(errors)
    assert summary == f"{n} problem{'s' if n != 1 else ''} found; nothing was changed"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_refused(cli: Cli, state: Callable[[], State], case: Case) -> None:
    if case.prior:
        prior = cli("apply", "-f", PRIOR)
        assert prior.returncode == 0, prior.stderr
    before = state()
    assert (before[0] is not None) == case.prior
    args = [arg for p in case.paths for arg in ("-f", p if p == "-" else _p(p))]
    stdin = (CORPUS / case.stdin).read_text() if case.stdin else None
    result = cli("apply", *args, input=stdin, timeout=60)
    assert_refused(result, case.errors)
    assert_state_unchanged(state(), before)


@pytest.mark.parametrize("case", [c for c in CASES if c.prior], ids=lambda c: c.id)
def test_bad_input_after_prior_state_changes_nothing(cli: Cli, case: Case) -> None:
    """The refused change really was refused: the recorded objects are as first applied."""
    assert cli("apply", "-f", PRIOR).returncode == 0
    assert cli("apply", "-f", _p(case.paths[0])).returncode == 1
    again = cli("apply", "-f", PRIOR)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "cell/api unchanged", "cell/other unchanged", "snapshot/snap-a unchanged",
        "snapshot/snap-b unchanged", "cell/fork unchanged",
    ]


def test_all_or_nothing_records_not_even_the_valid_file(cli: Cli, state_dir: Path) -> None:
    """The valid half of a rejected directory is not recorded: applying it alone creates it."""
    assert cli("apply", "-f", _p("all-or-nothing")).returncode == 1
    assert cli("apply", "-f", _p("all-or-nothing/good.yaml")).stdout == "cell/good created\n"


def test_alias_bomb_is_refused_quickly(cli: Cli) -> None:
    """The bomb is refused at its first anchor, long before anything could expand it."""
    result = cli("apply", "-f", _p("alias-bomb.yaml"), timeout=10)
    assert result.returncode == 1


def _deep_file(tmp_path: Path, levels: int) -> Path:
    path = tmp_path / f"deep-{levels}.yaml"
    path.write_text("[" * levels + "]" * levels + "\n")
    return path


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 100_000], ids=["limit-plus-one", "100000"])
def test_deep_flow_nesting_is_refused(cli: Cli, state: Callable[[], State], nothing: State,
                                      tmp_path: Path, levels: int) -> None:
    path = _deep_file(tmp_path, levels)
    result = cli("apply", "-f", str(path), timeout=60)
    message = f"nesting deeper than {MAX_DEPTH} levels is not allowed"
    if levels > 1000:
        # libyaml >= 0.2.6 stops by itself at depth 1000 while scanning ahead, before our
        # check at MAX_DEPTH sees the event; the message is the same, the place is libyaml's.
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert f"{path}:1:" in result.stderr and message in result.stderr, result.stderr
        assert_state_unchanged(state(), nothing)
        return
    # The first level beyond the limit opens at column MAX_DEPTH + 1; its path is [0]...[0].
    assert_refused(result, (
        (f"{path}:1:{MAX_DEPTH + 1}: {'[0]' * MAX_DEPTH}: ",
         f"nesting deeper than {MAX_DEPTH} levels is not allowed"),
    ))
    assert_state_unchanged(state(), nothing)


def test_nesting_at_the_limit_is_parsed(cli: Cli, tmp_path: Path) -> None:
    """Exactly MAX_DEPTH levels is read (and then refused by the schema, not the depth check)."""
    path = _deep_file(tmp_path, MAX_DEPTH)
    result = cli("apply", "-f", str(path))
    assert_refused(result, (
        (f"{path}:1:1: ", "expected a mapping with apiVersion, kind, metadata and spec"),
    ))


VALID = (b"apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
         b"metadata: {name: big}\nspec: {backend: fake}\n")


def _padded(size: int) -> bytes:
    """A valid manifest padded with a comment line to exactly `size` bytes."""
    data = VALID + b"#" + b"x" * (size - len(VALID) - 2) + b"\n"
    assert len(data) == size
    return data


def test_oversize_file_is_refused(cli: Cli, state: Callable[[], State], nothing: State,
                                  tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(_padded(MAX_DOCUMENT_BYTES + 1))
    result = cli("apply", "-f", str(path))
    assert_refused(result, (
        (f"{path}:1: ", f"document is larger than the limit of {MAX_DOCUMENT_BYTES} bytes"),
    ))
    assert state() == nothing  # refused before the database is opened


def test_oversize_stdin_is_refused(cli: Cli, state: Callable[[], State], nothing: State) -> None:
    result = cli("apply", "-f", "-", input=_padded(MAX_DOCUMENT_BYTES + 1).decode())
    assert_refused(result, (
        ("<stdin>:1: ", f"document is larger than the limit of {MAX_DOCUMENT_BYTES} bytes"),
    ))
    assert state() == nothing


def test_file_of_exactly_the_limit_is_accepted(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(_padded(MAX_DOCUMENT_BYTES))
    result = cli("apply", "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "cell/big created\n"


def _cells(count: int) -> bytes:
    return b"".join(b"---\napiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
                    b"metadata: {name: c%d}\nspec: {backend: fake}\n" % i for i in range(count))


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_the_limit_is_per_document_not_per_file(cli: Cli, tmp_path: Path, stdin: bool) -> None:
    """kubectl has no per-file limit: 10,000 small documents (1.2 MB) are one valid file."""
    path = tmp_path / "many.yaml"
    data = _cells(10_000)
    path.write_bytes(data + b"#" * (1_200_000 - len(data)) + b"\n")
    assert path.stat().st_size > MAX_DOCUMENT_BYTES
    given = ("-f", "-") if stdin else ("-f", str(path))
    result = cli("apply", *given, "--dry-run", timeout=120,
                 input=path.read_text() if stdin else None)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 10_000


def test_a_document_over_the_limit_is_refused_at_its_line(
        cli: Cli, state: Callable[[], State], nothing: State, tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    head = _cells(3)  # 3 documents of 5 lines: the big one starts on line 16
    path.write_bytes(head + b"---\n" + _padded(2 * MAX_DOCUMENT_BYTES) + _cells(1))
    result = cli("apply", "-f", str(path))
    assert_refused(result, (
        (f"{path}:16: ", f"document is larger than the limit of {MAX_DOCUMENT_BYTES} bytes"),
    ))
    assert state() == nothing


def test_a_json_file_is_one_document_under_the_limit(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    body = (b'{"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "j", '
            b'"annotations": {"pad": "%s"}}, "spec": {"backend": "fake"}}\n')
    path.write_bytes(body % (b"x" * MAX_DOCUMENT_BYTES))
    result = cli("apply", "-f", str(path))
    assert_refused(result, (
        (f"{path}:1: ", f"(one JSON document) is larger than the limit of {MAX_DOCUMENT_BYTES}"),
    ))
