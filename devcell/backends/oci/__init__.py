"""The OCI distribution API (stdlib HTTP): client.py fetches and pushes manifests and blobs
of a registry with the engine's credentials. Features are fetched through it
(backends/features) and snapshots pushed and pulled (api/snapshot_registry)."""
