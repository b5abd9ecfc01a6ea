"""The labels DevCell puts on what it makes on the Docker engine, and nothing else.

A leaf (no import at all): spec.py builds containers with them, and the exec fast path
(exec_socket.py) finds a cell's container by them without importing spec.py's rules.
"""

LABEL = "dev.devcell"
MANAGED, STATE, CELL_ID, CELL = (f"{LABEL}.managed", f"{LABEL}.state-dir", f"{LABEL}.cell-id",
                                 f"{LABEL}.cell")
VOLUME, RUNTIME_HASH = f"{LABEL}.volume", f"{LABEL}.runtime-hash"
OPERATION = f"{LABEL}.operation"
STATE_PATH = f"{LABEL}.state-path"
"""For people (and test clean-up); ownership is decided by STATE, the digest of that path."""
BASE_IMAGE = f"{LABEL}.base-image"
"""On a kept root filesystem (container/rootfs.py), inherited by a container made from it: the
id of the image it was made on (the cell's own image)."""
KEPT_ROOTFS = f"{LABEL}.rootfs"
"""On an image: a cell's kept root filesystem (never a build's)."""
POST_CREATE = f"{LABEL}.post-create"
"""On a kept root filesystem: the digest of the postCreate hooks that succeeded in it (empty
when none did), so a container made from it with the same hooks does not run them again."""
SIDECAR_OF, SIDECAR = f"{LABEL}.sidecar-of", f"{LABEL}.sidecar"
"""On a cell's sidecar container: the cell's id and the sidecar's name. A sidecar carries no
CELL_ID (set empty), so everything that finds a cell's one container by CELL_ID never sees
it."""
CELL_VOLUME = f"{LABEL}.cell-volume"
"""On an engine volume of spec.volumes (beside CELL_ID): its name in the spec."""
