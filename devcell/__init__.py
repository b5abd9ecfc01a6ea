"""DevCell: isolated development environments ("cells") managed like Kubernetes workloads.

Kept import-free on purpose: `devcell get` must start fast, so each layer is imported
where it is used (`from devcell.store import objects`).
"""

__version__ = "0.1.0"
API_VERSION = "devcell.dev/v1alpha1"
