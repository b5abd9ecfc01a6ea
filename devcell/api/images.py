"""`devcell image ls|prune`: the images DevCell pulled or built for a state directory, with
their sizes, and removing those nothing needs any more.

DevCell never touches an image it did not pull or build: an image is listed only when this
state directory's pull record (`<state>/pulled-images.json`) names it, or when it carries
DevCell's labels for this state directory and a tag a build of it gave (labels alone are
not enough: an image built FROM a DevCell image inherits them), and prune acts on a pulled
image only while the engine's tag still points at what DevCell pulled (on a built one, only
on the tags its builds gave). An image DevCell pulled that someone else also uses is kept
while any container on the engine (anyone's) runs or holds it, and prune removes only
DevCell's tag, never by force: another tag on the same image keeps its data. A user who
relies on an image that DevCell pulled, and wants prune to leave it, tags it under a name of
their own (`docker tag`).

`bytes_used()` is the figure a storage report (`devcell df`) counts for images.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devcell.backends.container import images
from devcell.errors import BackendConflict, BackendNotFound, BackendUnavailable
from devcell.store import db as dbmod
from devcell.store import objects

if TYPE_CHECKING:
    from devcell.backends.container.backend import ContainerBackend


@dataclass(frozen=True)
class ImageRow:
    """One image DevCell pulled, as the engine has it now."""

    image: str
    id: str
    size: int
    """Bytes of the image on the engine (layers shared with other images counted in full, as
    `docker image ls` counts them); 0 when the engine no longer has it."""
    pulled_at: str
    digest: str | None = None
    present: bool = True
    moved: bool = False
    """The tag now names another image than DevCell pulled (someone pulled or tagged over
    it): that image is not DevCell's, and neither ls's size nor prune concern it."""
    cells: tuple[str, ...] = ()
    """Live cells of this state directory whose spec names the image."""
    containers: tuple[str, ...] = ()
    """Containers on the engine (anyone's) made from the image."""
    replaced: tuple[str, ...] = ()
    """Earlier images DevCell pulled under this reference that the engine still holds."""
    replaced_size: int = 0
    origin: str = "pulled"
    """`pulled` (in the pull record) or `built` (carrying DevCell's labels)."""
    tags: tuple[str, ...] = ()
    """A built image's tags (a pulled image's is `image`)."""

    @property
    def in_use(self) -> bool:
        return bool(self.cells or self.containers)

    def document(self) -> dict[str, Any]:
        """As `devcell image ls -o json` lists it (and the API answers it)."""
        return {"image": self.image, "id": self.id, "digest": self.digest, "size": self.size,
                "present": self.present, "moved": self.moved, "pulledAt": self.pulled_at,
                "cells": list(self.cells), "containers": list(self.containers),
                "replaced": list(self.replaced), "replacedSize": self.replaced_size,
                "origin": self.origin, "tags": list(self.tags)}


@dataclass
class PruneReport:
    removed: list[str] = field(default_factory=list)
    """References untagged (and image ids removed) by DevCell."""
    kept: list[tuple[str, str]] = field(default_factory=list)
    """(reference, why it stays)."""
    freed_bytes: int = 0
    """The removed images' sizes: at most what the engine frees (a layer another image
    shares stays)."""
    forgotten: list[str] = field(default_factory=list)
    """Records dropped: the engine no longer has the image, or its tag moved to another."""

    def document(self) -> dict[str, Any]:
        """What `devcell image prune` says, as data (the API's answer)."""
        return {"removed": list(self.removed),
                "kept": [{"image": name, "why": why} for name, why in self.kept],
                "forgotten": list(self.forgotten), "freedBytes": self.freed_bytes}


def _backend(state_dir: Path) -> ContainerBackend:
    from devcell.backends.container.backend import ContainerBackend

    return ContainerBackend(state_dir=state_dir)


def _cells_naming(state_dir: Path) -> dict[str, list[str]]:
    """Image reference -> live cells of this state directory whose spec names it."""
    from devcell.store import guard

    if not guard.database_exists(state_dir):
        return {}
    db = dbmod.open_database(state_dir)
    try:
        out: dict[str, list[str]] = {}
        for cell in objects.list_live(db.conn, "Cell"):
            image = cell.spec.get("image")
            if isinstance(image, str):
                out.setdefault(image, []).append(cell.name)
        return out
    finally:
        db.close()


def _row(backend: ContainerBackend, entry: images.PulledImage, cells: list[str]) -> ImageRow:
    info = backend.image_info(entry.image)
    replaced = [(i, backend.image_info(i)) for i in entry.replaced]
    held = [(i, info_) for i, info_ in replaced if info_ is not None]
    common: dict[str, Any] = {
        "image": entry.image, "id": entry.id, "pulled_at": entry.pulledAt,
        "digest": entry.digest, "cells": tuple(cells),
        "replaced": tuple(i for i, _ in held),
        "replaced_size": sum(int(i.get("Size") or 0) for _, i in held)}
    if info is None:
        return ImageRow(size=0, present=False, **common)
    if str(info["Id"]) != entry.id:
        return ImageRow(size=0, moved=True, **common)
    return ImageRow(size=int(info.get("Size") or 0), containers=tuple(
        backend.containers_using(entry.id)), **common)


def _built(backend: ContainerBackend, info: dict[str, Any], naming: dict[str, list[str]]
           ) -> ImageRow | None:
    """The row of an image this state directory's builds made, or None when it only carries
    DevCell's labels: labels are inherited, so an image a user builds FROM a DevCell image
    has them too. Only the tags a build gives (container_build.tag_for) are DevCell's, and
    only those are listed and removed: a tag a user added (`docker tag`) stays."""
    from devcell.backends.container.build import REPOSITORY

    image_id = str(info["Id"])
    prefix = f"{REPOSITORY}/{backend.owner[:12]}/"
    tags = tuple(t for t in info.get("RepoTags") or [] if t.startswith(prefix))
    if not tags:
        return None
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(info.get("Created") or 0)))
    cells = tuple(dict.fromkeys(c for t in tags for c in naming.get(t, [])))
    return ImageRow(image=tags[0] if tags else image_id, id=image_id,
                    size=int(info.get("Size") or 0), pulled_at=created, origin="built",
                    tags=tags, cells=cells, containers=tuple(backend.containers_using(image_id)))


def list_images(state_dir: Path) -> list[ImageRow]:
    """Every image this state directory's pulls fetched or builds made, as the engine holds
    it now (pulled first, by reference; then built)."""
    entries = images.PullRecord(state_dir).load()
    naming = _cells_naming(state_dir)
    backend = _backend(state_dir)
    try:
        rows = [_row(backend, e, naming.get(e.image, [])) for e in sorted(
            entries.values(), key=lambda e: e.image)]
        pulled = {r.id for r in rows}
        built = (_built(backend, i, naming) for i in backend.labelled_images()
                 if str(i["Id"]) not in pulled)
        rows += sorted((r for r in built if r is not None), key=lambda r: r.image)
        return rows
    finally:
        backend.close()


def bytes_used(state_dir: Path) -> int:
    """Bytes of the images DevCell pulled for `state_dir` that the engine still holds (each
    image once, earlier digests included): what `devcell df` counts for images."""
    try:
        rows = list_images(state_dir)
    except BackendUnavailable:
        if images.PullRecord(state_dir).load():
            raise
        return 0  # no engine and nothing recorded: nothing of DevCell's to count
    current = {row.id: row.size for row in rows if row.present and not row.moved}
    return sum(current.values()) + sum(row.replaced_size for row in rows)


def prune(state_dir: Path, *, dry_run: bool = False,
          on_removed: Callable[[str, int], None] | None = None) -> PruneReport:
    """Remove the images DevCell pulled that no live cell names and no container uses (see the
    module's note for what is never touched)."""
    record = images.PullRecord(state_dir)
    report = PruneReport()
    rows = list_images(state_dir)
    if not rows:
        return report
    backend = _backend(state_dir)
    try:
        for row in rows:
            _prune_one(backend, record, row, report, dry_run, on_removed)
    finally:
        backend.close()
    return report


def _prune_one(backend: ContainerBackend, record: images.PullRecord, row: ImageRow,
               report: PruneReport, dry_run: bool,
               on_removed: Callable[[str, int], None] | None) -> None:
    if row.origin == "built":
        _prune_built(backend, row, report, dry_run, on_removed)
        return
    left = list(row.replaced)
    for old in row.replaced:  # earlier digests: removed by id only while nothing names them
        info = backend.image_info(old)
        if info is None or [t for t in info.get("RepoTags") or [] if t != "<none>:<none>"]:
            continue  # tagged again by someone: theirs now
        if backend.containers_using(old):
            report.kept.append((f"{row.image} ({old[:19]})", "a container uses it"))
            continue
        if not dry_run and not _removed(backend, old, report, row.image):
            continue
        left.remove(old)
        report.removed.append(f"{row.image} ({old[:19]})")
        report.freed_bytes += int(info.get("Size") or 0)
        if on_removed:
            on_removed(f"{row.image} ({old[:19]})", int(info.get("Size") or 0))
    current = record.load().get(row.image)
    if current is None:
        return
    current.replaced = left
    if not row.present or row.moved:
        report.forgotten.append(row.image)
        if not dry_run:
            record.update(None if not left else current, row.image)
        return
    if row.cells:
        report.kept.append((row.image, "named by cell " + ", ".join(row.cells)))
    elif row.containers:
        report.kept.append((row.image, "used by container " + ", ".join(row.containers)))
    elif dry_run or _removed(backend, row.image, report, row.image):
        report.removed.append(row.image)
        report.freed_bytes += row.size
        if on_removed:
            on_removed(row.image, row.size)
        if not dry_run:
            record.update(None if not left else current, row.image)
        return
    if not dry_run:
        record.update(current, row.image)


def _prune_built(backend: ContainerBackend, row: ImageRow, report: PruneReport, dry_run: bool,
                 on_removed: Callable[[str, int], None] | None) -> None:
    """DevCell's tags on a built image go (and the image with the last tag; a user's own tag
    on it keeps it)."""
    if row.cells:
        report.kept.append((row.image, "named by cell " + ", ".join(row.cells)))
        return
    if row.containers:
        report.kept.append((row.image, "used by container " + ", ".join(row.containers)))
        return
    if not dry_run:
        for name in row.tags:
            if not _removed(backend, name, report, row.image):
                return
    report.removed.append(row.image)
    report.freed_bytes += row.size
    if on_removed:
        on_removed(row.image, row.size)


def _removed(backend: ContainerBackend, name: str, report: PruneReport, image: str) -> bool:
    try:
        backend.untag_image(name)
    except BackendConflict:  # the engine refuses: a container made since holds it
        report.kept.append((image, "the engine refuses: in use"))
        return False
    except BackendNotFound:
        pass  # gone meanwhile: nothing left to remove
    return True
