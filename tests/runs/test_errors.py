"""StorageError: part of the one error tree, with code, path and reason."""

from __future__ import annotations

import pickle

import pytest

from devcell.errors import DevCellError
from devcell.runs import StorageError


def test_attributes_and_message() -> None:
    error = StorageError(code=StorageError.CORRUPT_SNAPSHOT, path="/s/runs/op_1/snapshot.json",
                         reason="checksum mismatch")
    assert isinstance(error, DevCellError)
    assert (error.code, error.path, error.reason) == (
        "CORRUPT_SNAPSHOT", "/s/runs/op_1/snapshot.json", "checksum mismatch")
    assert str(error) == "/s/runs/op_1/snapshot.json: checksum mismatch (CORRUPT_SNAPSHOT)"
    assert error.exit_code == 1


def test_unknown_code_is_a_bug() -> None:
    with pytest.raises(ValueError):
        StorageError(code="OOPS", path="p", reason="r")


def test_survives_pickling() -> None:
    error = StorageError(code=StorageError.DISK_FULL, path="/db#op_1", reason="full")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is StorageError
    assert (again.code, again.path, again.reason) == (error.code, error.path, error.reason)
