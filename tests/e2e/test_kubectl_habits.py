"""kubectl habits through the CLI, as a user runs it: selectors, jsonpath, custom columns,
sorting, label columns, several names, field selectors (issue 13). Each test backs a row of
the "kubectl habits" table in docs/cli.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Cli

CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata:
  name: {name}
  labels: {labels}
spec:
  backend: fake
  state: {state}
"""
CELLS = {  # name: (labels, desired state)
    "c1": ("{team: t1, app.kubernetes.io/name: web}", "Running"),
    "c2": ("{team: t2}", "Running"),
    "c10": ("{team: t3, tier: db}", "Stopped"),
    "plain": ("{}", "Running"),
}


def _write(dir: Path, names: list[str]) -> None:
    dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        labels, state = CELLS[name]
        (dir / f"{name}.yaml").write_text(CELL.format(name=name, labels=labels, state=state))


@pytest.fixture
def cells(cli: Cli, tmp_path: Path) -> Path:
    manifests = tmp_path / "m"
    _write(manifests, list(CELLS))
    result = cli("apply", "-f", str(manifests))
    assert result.returncode == 0, result.stderr
    return manifests


def names(cli: Cli, *args: str) -> list[str]:
    result = cli("get", *args, "-o", "name")
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_set_based_and_not_exists_selectors(cli: Cli, cells: Path) -> None:
    assert names(cli, "cells", "-l", "team in (t1,t2)") == ["cell/c1", "cell/c2"]
    assert names(cli, "cells", "-l", "!team") == ["cell/plain"]
    assert names(cli, "cells", "-l", "team notin (t1),tier") == ["cell/c10"]
    assert names(cli, "cells", "-l", "team==t2") == ["cell/c2"]
    assert names(cli, "cells", "-l", "app.kubernetes.io/name=web") == ["cell/c1"]
    table = cli("get", "cells", "-l", "team in (t1,t2)")
    assert [line.split()[0] for line in table.stdout.splitlines()[1:]] == ["c1", "c2"]


@pytest.mark.parametrize("selector", ["team in (t1", "team=a||b", "!team=t1", "team in t1",
                                      "Team/x=1", "x,,y"])
def test_a_bad_selector_is_a_usage_error_never_an_empty_answer(cli: Cli, cells: Path,
                                                               selector: str) -> None:
    result = cli("get", "cells", "-l", selector)
    assert result.returncode == 2
    assert "invalid label selector" in result.stderr and "at position" in result.stderr
    assert result.stdout == "" and "No resources found" not in result.stderr


def test_jsonpath_and_jsonpath_file(cli: Cli, cells: Path, tmp_path: Path) -> None:
    first = cli("get", "cells", "-o", "jsonpath={.items[0].metadata.name}")
    assert first.returncode == 0 and first.stdout == "c1"
    ranged = cli("get", "cells", "-l", "team", "-o",
                 'jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\\n"}{end}')
    assert ranged.stdout == "c1=Running\nc10=Stopped\nc2=Running\n"
    running = cli("get", "cells", "-o",
                  'jsonpath={.items[?(@.status.phase=="Stopped")].metadata.name}')
    assert running.stdout == "c10"
    one = cli("get", "cell", "c2", "-o", "jsonpath={.metadata.labels.team}")
    assert one.stdout == "t2"  # one name: the object itself, as -o json prints it
    escaped = cli("get", "cell", "c1", "-o",
                  "jsonpath={.metadata.labels.app\\.kubernetes\\.io/name}")
    assert escaped.stdout == "web"
    template = tmp_path / "t.jsonpath"
    template.write_text("{range .items[*]}{.metadata.name} {end}\n")
    from_file = cli("get", "cells", "-o", f"jsonpath-file={template}")
    assert from_file.stdout == "c1 c10 c2 plain "
    bad = cli("get", "cells", "-o", "jsonpath={range .items[*]}{.metadata.name}")
    assert bad.returncode == 2 and "{range} without {end}" in bad.stderr


def test_jsonpath_slices_filters_and_size_as_kubectl(cli: Cli, cells: Path,
                                                     tmp_path: Path) -> None:
    last = cli("get", "cells", "-o", "jsonpath={.items[-1:].metadata.name}")
    assert last.returncode == 0 and last.stdout == "plain"
    for template, message in (("{.items[::-1]}", "step must be > 0"),
                              ("{.items[0:100]}", "index out of bounds: index 99, length 4")):
        refused = cli("get", "cells", "-o", f"jsonpath={template}")
        assert refused.returncode == 1 and message in refused.stderr and refused.stdout == ""
    mixed = cli("get", "cells", "-o", "jsonpath={.items[?(@.metadata.labels.team<2)]}")
    assert mixed.returncode == 2 and "jsonpath filter '[?(@.metadata.labels.team<2)]'" in \
        mixed.stderr and "cannot compare string" in mixed.stderr
    huge = tmp_path / "huge.jsonpath"
    huge.write_text("{.a" + "[?(@.a" * 60 + ".b" * 500_000 + ")]" * 60 + "}")
    too_big = cli("get", "cells", "-o", f"jsonpath-file={huge}", timeout=30)
    assert too_big.returncode == 2 and "larger than 65536 bytes" in too_big.stderr


EVIL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata:
  name: evil
spec:
  backend: fake
  state: Stopped
  env:
    - {name: NL, value: "a\\nb"}
    - {name: SLASH_N, value: 'a\\nb'}
    - {name: ESC, value: "\\e[31mred\\u202e"}
    - {name: TOKEN, value: s3cret-value, secret: true}
"""


def _on_a_terminal(state_dir: Path, *args: str) -> str:
    """stdout of `devcell ARGS` when stdout is a terminal (a pseudo-terminal, raw mode)."""
    import os
    import pty
    import subprocess
    import sys
    import tty

    leader, follower = pty.openpty()
    tty.setraw(follower)  # no \n -> \r\n: the bytes as the program wrote them
    try:
        proc = subprocess.run([sys.executable, "-m", "devcell", *args], stdout=follower,
                              stderr=subprocess.PIPE, timeout=120,
                              env=dict(os.environ, DEVCELL_HOME=str(state_dir)))
        assert proc.returncode == 0, proc.stderr
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side is closed, all is read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    return b"".join(chunks).decode()


def test_jsonpath_prints_raw_into_a_pipe_and_escaped_on_a_terminal(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "evil.yaml").write_text(EVIL)
    assert cli("apply", "-f", str(tmp_path / "evil.yaml")).returncode == 0
    values = "jsonpath={range .spec.env[*]}{.value}{'|'}{end}"
    piped = cli("get", "cell", "evil", "-o", values)
    assert piped.returncode == 0, piped.stderr
    # as kubectl: the data as is, so `X=$(devcell get ... -o jsonpath=...)` is not altered
    assert piped.stdout == "a\nb|a\\nb|\x1b[31mred\u202e|<redacted>|"
    shown = _on_a_terminal(state_dir, "get", "cell", "evil", "-o", values)
    # on a terminal: controls escaped and the backslash too, so the two first values differ
    assert shown == "a\nb|a\\\\nb|\\x1b[31mred\\u202e|<redacted>|"
    secret = cli("get", "cell", "evil", "-o", "jsonpath={.spec.env[3]}")
    assert "s3cret" not in secret.stdout and "<redacted>" in secret.stdout
    assert "s3cret" not in _on_a_terminal(state_dir, "get", "cells", "-o", "jsonpath={..value}")


def test_custom_columns_spec_and_file(cli: Cli, cells: Path, tmp_path: Path) -> None:
    out = cli("get", "cells", "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,"
                                    "TEAM:.metadata.labels.team")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    assert rows == [["NAME", "PHASE", "TEAM"], ["c1", "Running", "t1"], ["c10", "Stopped", "t3"],
                    ["c2", "Running", "t2"], ["plain", "Running", "<none>"]]
    spec = tmp_path / "cols"
    spec.write_text("NAME          TEAM\n.metadata.name .metadata.labels.team\n")
    from_file = cli("get", "cells", "-l", "team=t2", "-o", f"custom-columns-file={spec}")
    assert [line.split() for line in from_file.stdout.splitlines()] == [["NAME", "TEAM"],
                                                                        ["c2", "t2"]]
    bad = cli("get", "cells", "-o", "custom-columns=NAME")
    assert bad.returncode == 2 and "expected <header>:<json-path-expr>" in bad.stderr


def test_sort_by_and_no_headers(cli: Cli, cells: Path) -> None:
    by_name = cli("get", "cells", "--sort-by=.metadata.name", "--no-headers")
    assert [line.split()[0] for line in by_name.stdout.splitlines()] == ["c1", "c2", "c10",
                                                                        "plain"]
    by_team = names(cli, "cells", "--sort-by", "{.metadata.labels.team}")
    assert by_team == ["cell/plain", "cell/c1", "cell/c2", "cell/c10"]  # no label: first
    by_age = cli("get", "cells", "--sort-by=.metadata.creationTimestamp", "-o", "json")
    stamps = [i["metadata"]["creationTimestamp"] for i in json.loads(by_age.stdout)["items"]]
    assert stamps == sorted(stamps)


def test_show_labels_and_label_columns(cli: Cli, cells: Path) -> None:
    shown = cli("get", "cells", "--show-labels").stdout.splitlines()
    assert shown[0].split()[-1] == "LABELS"
    assert shown[1].split()[0] == "c1"
    assert shown[1].split()[-1] == "app.kubernetes.io/name=web,team=t1"
    assert shown[4].split()[-1] == "<none>"
    columns = cli("get", "cells", "-L", "team", "-L", "tier,app.kubernetes.io/name")
    header = columns.stdout.splitlines()[0].split()
    assert header[-3:] == ["TEAM", "TIER", "NAME"]
    c10 = next(line for line in columns.stdout.splitlines() if line.startswith("c10 "))
    assert c10.split()[-3:] == ["t3", "db", "<none>"]  # as every empty cell of our tables
    # kubectl accepts any key for -L: it only names a column, empty when no object has it
    odd = cli("get", "cells", "-L", "Bad Key", "-L", "\x1bx")
    assert odd.returncode == 0, odd.stderr
    assert odd.stdout.splitlines()[0].split()[-3:] == ["BAD", "KEY", "\\x1bX"]  # escaped
    assert all(line.split()[-2:] == ["<none>", "<none>"] for line in odd.stdout.splitlines()[1:])
    refused = cli("get", "volumes", "--show-labels")
    assert refused.returncode == 2 and "have no labels" in refused.stderr


def described_names(out: str) -> list[str]:
    return [line.split()[1] for line in out.splitlines() if line.startswith("Name:")]


def test_several_names_in_get_and_describe(cli: Cli, cells: Path) -> None:
    assert names(cli, "cells", "c2", "c1") == ["cell/c2", "cell/c1"]  # the order given
    partly = cli("get", "cells", "c1", "nope")
    assert partly.returncode == 1
    assert partly.stdout.splitlines()[1].split()[0] == "c1"
    assert 'cell "nope" not found' in partly.stderr
    listing = json.loads(cli("get", "cells", "c1", "c2", "-o", "json").stdout)
    assert listing["kind"] == "List" and len(listing["items"]) == 2
    described = cli("describe", "cell", "c1", "c2")
    assert described.returncode == 0, described.stderr
    assert described_names(described.stdout) == ["c1", "c2"]
    by_label = cli("describe", "cells", "-l", "team=t3")
    # By the Name: lines only: a random id elsewhere in the output may hold "c2".
    assert by_label.returncode == 0 and described_names(by_label.stdout) == ["c10"]
    missing = cli("describe", "cell", "c1", "nope")
    assert missing.returncode == 1 and 'cell "nope" not found' in missing.stderr
    assert "c1" in missing.stdout


def test_delete_several_names_and_by_selector(cli: Cli, cells: Path) -> None:
    both = cli("delete", "cell", "c1", "c2")
    assert both.returncode == 0, both.stderr
    assert both.stdout.split("\n")[:2] == ["cell/c1 deleted", "cell/c2 deleted"]
    by_label = cli("delete", "cells", "-l", "tier=db")
    assert by_label.returncode == 0, by_label.stderr
    assert by_label.stdout.strip() == "cell/c10 deleted"
    assert names(cli, "cells") == ["cell/plain"]
    none = cli("delete", "cells", "-l", "team in (t9)")
    assert none.returncode == 0 and "No resources found" in none.stderr
    bad = cli("delete", "cells", "-l", "team in (")
    assert bad.returncode == 2 and names(cli, "cells") == ["cell/plain"]
    partly = cli("delete", "cell", "plain", "nope")
    assert partly.returncode == 1 and "cell/nope not found" in partly.stdout
    assert names(cli, "cells") == []


def test_wait_by_selector(cli: Cli, cells: Path) -> None:
    ready = cli("wait", "cells", "-l", "team in (t1,t2)", "--for", "condition=Ready",
                "--timeout", "30s")
    assert ready.returncode == 0, ready.stderr
    assert ready.stdout.splitlines() == ["cell/c1 condition met (Ready=True)",
                                         "cell/c2 condition met (Ready=True)"]
    nothing = cli("wait", "cells", "-l", "team=t9", "--timeout", "1s")
    assert nothing.returncode == 1 and "no matching resources found" in nothing.stderr


@pytest.mark.parametrize("verb", ["get", "describe", "delete", "wait"])
def test_a_name_with_a_selector_is_refused_as_kubectl(cli: Cli, cells: Path, verb: str) -> None:
    # kubectl: "name cannot be provided when a selector is specified"; never the union
    result = cli(verb, "cells", "c1", "-l", "team=t2", "--timeout", "1s") if verb == "wait" \
        else cli(verb, "cells", "c1", "-l", "team=t2")
    assert result.returncode == 2
    assert "a NAME cannot be given with -l" in result.stderr
    assert result.stdout == ""
    assert names(cli, "cells") == ["cell/c1", "cell/c10", "cell/c2", "cell/plain"]


def test_apply_prune_with_selector_prunes_only_matching(cli: Cli, cells: Path) -> None:
    for name in ("c1", "c2"):
        (cells / f"{name}.yaml").unlink()
    result = cli("apply", "-f", str(cells), "--prune", "-l", "team=t1")
    assert result.returncode == 0, result.stderr
    assert "cell/c1 pruned" in result.stdout and "cell/c2" not in result.stdout
    assert names(cli, "cells") == ["cell/c10", "cell/c2", "cell/plain"]
    without = cli("apply", "-f", str(cells), "-l", "team=t1")
    assert without.returncode == 2 and "with --prune" in without.stderr


def test_field_selector(cli: Cli, cells: Path) -> None:
    assert names(cli, "cells", "--field-selector", "status.phase=Running") == [
        "cell/c1", "cell/c2", "cell/plain"]
    assert names(cli, "cells", "--field-selector",
                 "status.phase!=Running,spec.backend=fake") == ["cell/c10"]
    assert names(cli, "cells", "--field-selector", "metadata.name==c2",
                 "-l", "team") == ["cell/c2"]
    refused = cli("get", "cells", "--field-selector", "spec.image=busybox")
    assert refused.returncode == 2
    assert "supported: metadata.id, metadata.name, spec.backend, spec.state, status.phase" \
        in refused.stderr
