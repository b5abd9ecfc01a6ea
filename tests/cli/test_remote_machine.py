"""`gc` and `image ls|prune|build-base` through a server (cli/remote_machine.py): the answer
is checked against its OpenAPI schema before anything is printed (a made-up answer is one
error line, nothing on stdout), then printed by the command's own printer, escaped."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from devcell.api import base_image, gc, images
from devcell.backends.base import Owned, OwnedKind
from devcell.cli import cmd_gc, remote_machine
from devcell.client import Client
from devcell.controllers.gc import Judged, Verdict
from devcell.errors import DevCellError
from devcell.reconciler.gc import Collected

HOSTILE = "\x1b]0;pwned\x07"


def _client(answer: Any) -> Client:
    client = Client("unix:/nowhere")
    client._json = lambda *a, **k: answer  # type: ignore[method-assign]
    return client


def _report() -> gc.GCReport:
    vol = Owned(OwnedKind.VOLUME, "vol_1", "cell_x")
    chk = Owned(OwnedKind.CHECKPOINT, "chk_2", "cell_x")
    held = Owned(OwnedKind.VOLUME, "vol_3", "cell_y", content="/x")
    gone = Owned(OwnedKind.VOLUME, "vol_4", "cell_z")
    planned = [Judged(vol, Verdict.RECLAIM, "its cell was deleted"),
               Judged(chk, Verdict.RECLAIM, "its snapshot was deleted"),
               Judged(gone, Verdict.RECLAIM, "its cell was deleted")]
    collected = Collected("fake", judged=[*planned, Judged(held, Verdict.NEEDS_APPROVAL,
                                                           "it holds files")],
                          planned=planned, op_id="op_1", freed={"vol_1": 2048},
                          kept={"chk_2": "referenced again"}, failed={"vol_4": "busy"})
    return gc.GCReport((collected,), {"vm": "no KVM"}, (), ("snapshot/s",), {"cell/c": "x"},
                       {"cell/d": "waits"})


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_gc_through_a_server_prints_what_it_prints_here(
        capsys: pytest.CaptureFixture[str], dry_run: bool) -> None:
    report = _report()
    args = SimpleNamespace(dry_run=dry_run, approve=False)
    here = cmd_gc.print_report(args, report.document())  # type: ignore[arg-type]
    said = capsys.readouterr()
    remote = SimpleNamespace(remote=_client(json.loads(json.dumps(report.document()))),
                             **vars(args))
    assert remote_machine.run_gc(remote) == here == 1  # type: ignore[arg-type]
    assert capsys.readouterr() == said
    assert "vol_1 removed (2.0 KiB)" in said.out or "would remove" in said.out
    assert "error: volume/vol_4: not removed: busy" in said.err


@pytest.mark.parametrize("answer", [
    None, [], {"finished": []}, {**_report().document(), "ok": "yes"},
    {**_report().document(), "backends": [{"backend": "fake"}]},
    {**_report().document(), "unavailable": {"vm": 3}},
], ids=["null", "list", "short", "ok-text", "backend-short", "why-number"])
def test_a_gc_a_server_made_up_is_one_line(capsys: pytest.CaptureFixture[str],
                                            answer: Any) -> None:
    args = SimpleNamespace(remote=_client(answer), dry_run=False, approve=False)
    with pytest.raises(DevCellError, match="is it DevCell's API"):
        remote_machine.run_gc(args)  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""


def test_the_images_a_server_lists_are_printed_escaped(
        capsys: pytest.CaptureFixture[str]) -> None:
    row = images.ImageRow(image=f"evil{HOSTILE}:1", id="sha256:" + "a" * 64, size=1 << 20,
                          pulled_at="2026-01-01T00:00:00Z", cells=(f"c{HOSTILE}",))
    for output in ("table", "json"):
        args = SimpleNamespace(remote=_client({"kind": "List", "items": [row.document()]}),
                               output=output)
        assert remote_machine.run_image_ls(args) == 0  # type: ignore[arg-type]
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and "evil" in out


@pytest.mark.parametrize("answer", [
    {"kind": "List"}, {"kind": "List", "items": [{"image": "x"}]},
    {"kind": "List", "items": [{**images.ImageRow("x", "y", -1, "t").document()}]},
])
def test_an_image_list_a_server_made_up_is_one_line(answer: Any) -> None:
    args = SimpleNamespace(remote=_client(answer), output="table")
    with pytest.raises(DevCellError, match="is it DevCell's API"):
        remote_machine.run_image_ls(args)  # type: ignore[arg-type]


def test_a_prune_and_a_build_a_server_answers(capsys: pytest.CaptureFixture[str]) -> None:
    pruned = images.PruneReport(removed=[f"a{HOSTILE}"], kept=[("b", f"named by {HOSTILE}")],
                                freed_bytes=5, forgotten=["c"])
    args = SimpleNamespace(remote=_client(pruned.document()), dry_run=True)
    assert remote_machine.run_image_prune(args) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert out.startswith("image/a\\x1b]0;pwned\\x07 would remove\n")
    assert out.endswith("would free up to 5 B\n")
    made = base_image.BaseImage("devcell/busybox:latest", "sha256:" + "b" * 64, True,
                                base_image.VmReady("vm1", 512, "6.1", "kvm"), None,
                                node_tools_problem=f"no {HOSTILE}")
    args = SimpleNamespace(remote=_client(made.document()), force=False)
    assert remote_machine.run_image_build_base(args) == 0  # type: ignore[arg-type]
    said = capsys.readouterr()
    assert said.out == ("image/devcell/busybox:latest built (sha256:bbbbbbbbbbbb)\n"
                        "vm/vm1 ready (512 MiB root disk, kernel 6.1, KVM)\n")
    assert said.err == "node tools image not made: no \\x1b]0;pwned\\x07\n"
    args = SimpleNamespace(remote=_client({**made.document(), "vm": {"image": 1}}),
                           force=False)
    with pytest.raises(DevCellError, match="is it DevCell's API"):
        remote_machine.run_image_build_base(args)  # type: ignore[arg-type]
