"""A container cell's root filesystem kept across a recreate that keeps its image.

A sleep stops the container, so its writable layer (what was installed, shell history,
caches) stays with it. A recreate (a spec change: env, services, resources, mounts) needs a
new container, and a new container starts from its image: the layer would be lost. When the
new container's image is the one the old one was made from, the engine commits the old
container as an image first (`POST /commit`: the engine reads the layer, DevCell never walks
a cell's root filesystem) and the new container is made from that image.

The committed image takes the configuration of the cell's own image (entrypoint, command,
environment, working directory, user), never the old container's (those belong to the old
spec: what the engine would merge in from it is masked, see `_config`), and labels saying
whose it is: this state directory, this cell, and the image it was
made from (`BASE`), which a new container inherits, so `observe` still reports the cell's own
image and a pull policy compares the right ids. It is tagged `devcell-rootfs/<owner>-<cell
id>:kept`: each recreate commits again and moves the tag, the older image staying as the
layer below (a chain of one layer per recreate that had changes). An image change starts
fresh from the new image and drops what was kept. Deleting the cell removes the tag, and
the engine the layers with it.
"""

from __future__ import annotations

from typing import Any

from devcell.backends.base import Outputs
from devcell.backends.container.labels import BASE_IMAGE as BASE
from devcell.backends.container.labels import (
    CELL,
    CELL_ID,
    KEPT_ROOTFS,
    MANAGED,
    POST_CREATE,
    STATE,
    STATE_PATH,
)
from devcell.backends.container.spec import base_of
from devcell.errors import BackendConflict, BackendNotFound

REPOSITORY = "devcell-rootfs"
TAG = "kept"
MAX_KEPT_LAYERS = 40
"""Recreates kept in a chain before one starts fresh: each adds a layer, and the engine's
storage driver refuses images past ~125 layers (the cell's own image counts too)."""
CONFIG_KEYS = ("Env", "Cmd", "Entrypoint", "WorkingDir", "User", "ExposedPorts", "StopSignal",
               "Shell", "OnBuild")


def tag(owner: str, cell_id: str) -> str:
    """The tag a cell's kept root filesystem goes by (lower case: a repository name)."""
    return f"{REPOSITORY}/{owner[:12].lower()}-{cell_id.lower()}:{TAG}"


def present(owner: str, cell_id: str) -> bool:
    """Whether the engine holds a kept root filesystem of this cell (asked over the socket:
    a cell's deletion imports the SDK only when there is one to remove)."""
    from devcell.backends.container import observe

    found = observe.image_present(tag(owner, cell_id))
    return found is None or found


def kept_cell_ids(owner: str) -> set[str] | None:
    """The cells of this state directory that have a kept root filesystem on the engine (by
    the labels DevCell committed them with); None when the engine cannot be asked over its
    socket."""
    from devcell.backends.container import observe

    found = observe.list_images({KEPT_ROOTFS: "true", STATE: owner})
    if found is None:
        return None
    return {str((i.get("Labels") or {}).get(CELL_ID) or "") for i in found} - {""}


def _config(base: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The committed image's configuration: the cell's image's, with what the engine would
    otherwise merge in from the old container masked. The engine fills whatever the given
    configuration leaves out from the container's own (its environment, labels, user): a
    variable the new spec dropped would live on, and the `managed` label would make the
    image look like a build (`image ls`, `image prune` list those). So every variable name
    the old container had and the image has not is given bare (`NAME`, no `=`: no value,
    which a process's environment ignores and the new spec's `NAME=value` replaces), every
    label empty, `managed` false, and the user the image's (root, spelled `0`, when it
    names none)."""
    config = {k: v for k, v in base.items() if k in CONFIG_KEYS}
    env = list(base.get("Env") or [])
    named = {e.split("=", 1)[0] for e in env}
    env += sorted({e.split("=", 1)[0] for e in old.get("Env") or []} - named)
    config["Env"] = env
    config["User"] = base.get("User") or "0"
    labels = old.get("Labels") or {}
    config["Labels"] = {**dict.fromkeys(labels, ""), **(base.get("Labels") or {}),
                        MANAGED: "false",  # whose it is (for a test's or a user's cleanup):
                        **{k: labels[k] for k in (CELL, STATE_PATH) if k in labels}}
    return config


def keep(api: Any, container: dict[str, Any], *, owner: str, cell_id: str, cell_name: str,
         image: dict[str, Any], container_config: dict[str, Any], post_create: str = ""
         ) -> Outputs:
    """Commit `container` (stopped, this cell's) as the cell's kept root filesystem when it
    was made on `image` (the engine's inspection of the image the new container is made
    from); else drop what was kept before. Says which, and why. `post_create`: the digest
    of the postCreate hooks that succeeded in it, carried on the kept image."""
    wanted = str(image.get("Id") or "")
    if base_of(container) != wanted:
        drop(api, owner=owner, cell_id=cell_id)
        return {"kept": False, "why": "the image changed: the root filesystem starts fresh "
                                      "from the new image"}
    with _calls(f"looking up the image of cell {cell_name}'s container"):
        made_from = api.inspect_image(container["ImageID"])
    kept_layers = (len((made_from.get("RootFS") or {}).get("Layers") or [])
                   - len((image.get("RootFS") or {}).get("Layers") or []))
    if kept_layers >= MAX_KEPT_LAYERS:
        drop(api, owner=owner, cell_id=cell_id)
        return {"kept": False, "why": f"{kept_layers} recreates were kept, one layer each: the "
                                      "root filesystem starts fresh from the image"}
    config = _config(image.get("Config") or {}, container_config)
    config["Labels"] |= {STATE: owner, CELL_ID: cell_id, KEPT_ROOTFS: "true", BASE: wanted,
                         POST_CREATE: post_create}
    repository, _, label = tag(owner, cell_id).rpartition(":")
    with _calls(f"keeping the root filesystem of cell {cell_name}"):
        made = api.commit(container["Id"], repository=repository, tag=label, pause=False,
                          message=f"root filesystem of cell {cell_name}, kept by DevCell "
                                  "across a recreate", conf=config)
    return {"kept": True, "image": str(made.get("Id", ""))[:19]}


def _calls(action: str) -> Any:
    """The SDK's errors translated (imported here: observe uses this module's labels and
    must not import the SDK)."""
    from devcell.backends.container import sdk

    return sdk.engine_calls(action)


def _inspect(api: Any, owner: str, cell_id: str) -> dict[str, Any] | None:
    try:
        with _calls("looking up a kept root filesystem"):
            info: dict[str, Any] = api.inspect_image(tag(owner, cell_id))
    except BackendNotFound:
        return None
    return info


def _ours(info: dict[str, Any], owner: str, cell_id: str) -> bool:
    labels = (info.get("Config") or {}).get("Labels") or {}
    return (labels.get(KEPT_ROOTFS) == "true" and labels.get(STATE) == owner
            and labels.get(CELL_ID) == cell_id)


def kept_for(api: Any, *, owner: str, cell_id: str, image_id: str) -> tuple[str, str] | None:
    """The tag of the cell's kept root filesystem when it was made on `image_id` and is
    DevCell's for this cell (by its labels), with the digest of the postCreate hooks that
    succeeded in it (its POST_CREATE label, "" when none); else None."""
    info = _inspect(api, owner, cell_id)
    labels = ((info or {}).get("Config") or {}).get("Labels") or {}
    if info is None or not _ours(info, owner, cell_id) or labels.get(BASE) != image_id:
        return None
    return tag(owner, cell_id), str(labels.get(POST_CREATE) or "")


def drop(api: Any, *, owner: str, cell_id: str) -> bool:
    """Remove the cell's kept root filesystem (its tag; the engine removes the layers no
    other image or container uses). Never forced: one a container still uses stays, and the
    next drop takes it. True when it was removed."""
    info = _inspect(api, owner, cell_id)
    if info is None or not _ours(info, owner, cell_id):
        return False  # not ours: a tag someone else made under the same name is left alone
    try:
        with _calls("removing a kept root filesystem"):
            api.remove_image(tag(owner, cell_id), force=False, noprune=False)
    except (BackendNotFound, BackendConflict):
        return False
    return True
