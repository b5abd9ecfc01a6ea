"""Reconciler tests use the same fixtures as the controller tests."""

from tests.controllers.conftest import _quiet_logs, ctx, db

__all__ = ["_quiet_logs", "ctx", "db"]
