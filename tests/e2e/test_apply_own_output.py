"""`devcell get -o yaml | devcell apply -f -` is accepted, as kubectl accepts its own output
(issue 31 item 7): the read-only fields get shows (metadata.id, generation, resourceVersion,
creationTimestamp, source; status) are ignored on apply, a secret get hid (`<redacted>`)
keeps its recorded value, and a stale resourceVersion, when given, is a conflict."""

from __future__ import annotations

import json

import yaml

from tests.conftest import EXAMPLES, Cli


def _applied(cli: Cli) -> str:
    done = cli("apply", "-f", str(EXAMPLES / "api.yaml"))
    assert done.returncode == 0, done
    return cli("get", "cell", "api", "-o", "yaml").stdout


def test_get_output_applies_back_unchanged(cli: Cli) -> None:
    shown = _applied(cli)
    before = cli("get", "cell", "api", "-o", "json").stdout
    diff = cli("diff", "-f", "-", input=shown)
    assert (diff.returncode, diff.stdout, diff.stderr) == (0, "", "")
    again = cli("apply", "-f", "-", input=shown)
    assert (again.returncode, again.stderr) == (0, ""), again
    # Configured only in that it is now applied from standard input (its source): its spec,
    # labels and generation are as they were. Through a server the first apply was recorded
    # from standard input already (docs/api.md): unchanged.
    was = json.loads(before)
    moved = "configured" if was["metadata"]["source"] != "-" else "unchanged"
    assert again.stdout == f"cell/api {moved}\n"
    after = json.loads(cli("get", "cell", "api", "-o", "json").stdout)
    assert after["metadata"]["generation"] == was["metadata"]["generation"]
    assert (after["spec"], after["metadata"]["labels"]) == (was["spec"], was["metadata"]["labels"])
    assert after["metadata"]["source"] == "-"
    secret = next(e for e in after["spec"]["env"] if e["name"] == "API_TOKEN")
    assert secret["value"] == "<redacted>"  # shown so; kept as recorded (next test)


def test_an_edited_get_output_is_applied_and_keeps_a_hidden_secret(cli: Cli) -> None:
    doc = yaml.safe_load(_applied(cli))
    doc["metadata"]["labels"]["team"] = "edge"
    done = cli("apply", "-f", "-", input=yaml.safe_dump(doc))
    assert (done.returncode, done.stdout) == (0, "cell/api configured\n"), done
    # The secret kept its recorded value: applying the original file changes only the label.
    diff = cli("diff", "-f", str(EXAMPLES / "api.yaml"))
    assert diff.returncode == 1
    changed = [line for line in diff.stdout.splitlines()
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-    team: edge", "+    team: core"], diff.stdout


def test_a_stale_resource_version_is_a_conflict(cli: Cli) -> None:
    doc = yaml.safe_load(_applied(cli))
    doc["metadata"]["labels"]["team"] = "edge"
    assert cli("apply", "-f", "-", input=yaml.safe_dump(doc)).returncode == 0
    doc["metadata"]["labels"]["team"] = "other"  # the same, now stale, resourceVersion
    stale = cli("apply", "-f", "-", input=yaml.safe_dump(doc))
    assert stale.returncode == 1 and stale.stdout == "", stale
    assert stale.stderr.startswith('error: cell "api": the object has been modified '
                                   f"(resourceVersion {doc['metadata']['resourceVersion']} "
                                   "given, "), stale
    assert stale.stderr.count("\n") == 1
    labels = json.loads(cli("get", "cell", "api", "-o", "json").stdout)["metadata"]["labels"]
    assert labels == {"team": "edge"}


def test_a_secret_hidden_and_never_recorded_is_refused(cli: Cli) -> None:
    doc = yaml.safe_load(_applied(cli))
    for field in ("resourceVersion", "id"):
        del doc["metadata"][field]
    doc["metadata"]["name"] = "other"
    done = cli("apply", "-f", "-", input=yaml.safe_dump(doc))
    assert done.returncode == 1, done
    assert "spec.env[1].value: <redacted> is what get shows of a secret" in done.stderr, done
    assert cli("get", "cell", "other").returncode == 1
