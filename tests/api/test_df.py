"""devcell.api.df: df is a list of sources, each one a row; another engineer's new kind
of storage (images) is one more function in the list."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.api import df


def test_a_new_source_is_one_more_row(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def images(inv: df.Inventory) -> tuple[df.Row, list[df.Item]]:
        return df.Row("Images", 2, 1, 300, 100), []

    monkeypatch.setattr(df, "SOURCES", [*df.SOURCES, images])
    report = df.df(state_dir)
    assert report.rows[-1] == df.Row("Images", 2, 1, 300, 100)
    assert report.document(verbose=False)["reclaimableBytes"] == 100
