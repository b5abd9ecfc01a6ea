"""POST /api/v1/gc, GET /api/v1/images, POST /api/v1/images/prune and POST
/api/v1/images/build-base: `devcell gc` and `devcell image ls|prune|build-base` through the
API.

They act on the whole machine, not on one user's objects: a collection removes what every
user's cells left (and holds the reconcile lock while it judges, a dry run too), a prune or a
build changes the engine's images every cell starts from. So they are an admin's (rules
`gc-admin`, `image-admin`), a viewer's refused as any change is (`viewer-read-only`). Listing
the images, and a prune's dry run (which says of them what the list says), is every role's
(rule `read`). Each runs on a worker thread, the answer once it is done (a base image's
build takes minutes: no progress is streamed); at most one collection and one build run at
once (the app's slots: a second is a 503), and image lists and dry runs share the node
lists' bound on engine reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcell.auth import policy

GC = policy.ResourceRef("GC")
IMAGES = policy.ResourceRef("Image")


def may_collect(principal: Any) -> None:
    """An admin's alone (rule gc-admin); refused before anything is judged."""
    policy.require(principal, policy.Verb.gc, GC)


def may_change_images(principal: Any) -> None:
    """An admin's alone (rule image-admin)."""
    policy.require(principal, policy.Verb.image_admin, IMAGES)


def collect(state_dir: Path, principal: Any, *, approve: bool, dry_run: bool
            ) -> dict[str, Any]:
    """`devcell gc` (api.gc), its operations recorded in the caller's name."""
    from devcell.api import gc
    from devcell.store import actor

    may_collect(principal)
    with actor.acting_as(principal.user):
        return gc.collect(state_dir, approve=approve, dry_run=dry_run).document()


def listed(state_dir: Path) -> dict[str, Any]:
    """`devcell image ls -o json`: every image this state directory's pulls and builds made."""
    from devcell.api import images

    return {"kind": "List", "items": [r.document() for r in images.list_images(state_dir)]}


def pruned(state_dir: Path, principal: Any, *, dry_run: bool) -> dict[str, Any]:
    """`devcell image prune` (an admin's; its dry run every role's)."""
    from devcell.api import images
    from devcell.store import actor

    if not dry_run:
        may_change_images(principal)
    with actor.acting_as(principal.user):
        return images.prune(state_dir, dry_run=dry_run).document()


def built(state_dir: Path, principal: Any, *, force: bool) -> dict[str, Any]:
    """`devcell image build-base` (an admin's): what it made."""
    from devcell.api import base_image

    may_change_images(principal)
    return base_image.build(state_dir, force=force).document()
