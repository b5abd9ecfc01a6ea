"""The container backend: cells as containers on the Docker engine, workspaces on the host.

The package's face is `backend.ContainerBackend` (named by the backend registry,
`devcell/backend_registry.py`, and imported only when a command acts on a container cell).
This `__init__` imports nothing, so a module of the package that needs no SDK (`observe`, which
lists the engine's containers over its socket with the standard library; `capacity`; `layout`)
costs only itself.

    backend.py             the Backend: create, start, stop, delete, exec, checkpoint, restore
    observe.py             what runs now, over the engine's socket (engine_http.py), no SDK
    exec_socket.py         `devcell exec`'s fast path: a command run over the socket, no SDK
    labels.py              the labels DevCell puts on what it makes (a leaf)
    engine.py, sdk.py      the engine's client: connect, translate the SDK's errors to ours
    spec.py                a cell's container configuration, pure (tested without an engine)
    layout.py              where the backend keeps things under the state directory
    workspaces.py          workspace volumes and checkpoints (full trees and layers)
    workspace_restore.py   a workspace rolled back in place to a checkpoint
    overlay.py             a fork's overlay mount, a layer's read-only view
    freezer.py, cgroups.py the freeze of a checkpoint through the cell's cgroup
    capacity.py, changes.py  what a cell's storage costs and what changed since its checkpoint
    images.py, pull.py, pull_progress.py  registry images: policy, pull, the record of pulls
    build.py, build_digest_cache.py, base_image.py  image builds and the offline base image

Only `backend.py`, `sdk.py`, `build.py` and `pull.py` import the docker SDK (a contract in
pyproject.toml allows those four and no other module of DevCell).
"""
