"""Each feature reference brought to a folder on this host, cached by digest.

Remote features (OCI artifacts, tarball URLs) are extracted once into
`<state>/features/unpacked/sha256-<digest>` (the directory owner-only, 0700), named by the
digest of the tarball they came from, so two references to the same content share it and a
changed one is a new folder. The digest a tag or URL gave is pinned
(`<state>/features/pins/`): later reconciles use it without asking the registry, so a
re-apply is offline and a cell is never rebuilt because a tag moved on its own; naming a new
tag or a digest in the manifest fetches again. A local folder is used where it is (its files
are copied into the build context, checked there).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell import safeio
from devcell.backends.features import metadata
from devcell.backends.features.metadata import Feature
from devcell.errors import ImageBuildFailed
from devcell.manifests import feature_refs as refs

DIRECTORY = "features"
UNUSED_SECONDS = 30 * 86400.0
"""A kept feature no cell's build named for this long is dropped by `devcell gc` and the
daemon's orphan sweep (Store.prune)."""
_PIN_LIMIT = 4096


@dataclass(frozen=True)
class Resolved:
    """A feature ready to install: its folder, the digest of its content (empty for a local
    folder, whose files the build context's digest covers) and its metadata."""

    ref: refs.Ref
    shown: str
    folder: str
    digest: str
    feature: Feature


class Store:
    """The features cache of one state directory."""

    def __init__(self, state_dir: Path, mirrors: dict[str, str] | None = None) -> None:
        self.root = Path(state_dir) / DIRECTORY
        self.mirrors = dict(mirrors or {})

    def resolve(self, text: str, shown: str) -> Resolved:
        """The feature `text` names (a reference as spec.features stores it)."""
        try:
            ref = refs.parse(text)
        except ValueError as exc:
            raise ImageBuildFailed(f"feature {shown}: {exc}") from None
        if ref.kind is refs.Kind.LOCAL:
            if not os.path.isdir(ref.text):
                raise ImageBuildFailed(f"feature {shown}: {ref.text} is not a directory")
            return Resolved(ref, shown, ref.text, "", metadata.read(ref.text, shown))
        if ref.kind is refs.Kind.OCI:
            digest = self._oci(ref, shown)
        else:
            digest = self._tarball(ref, shown)
        from devcell.backends.features import unpack

        kept = self._unpacked(digest)
        self._used(kept)
        folder = unpack.feature_root(str(kept))
        return Resolved(ref, shown, folder, digest, metadata.read(folder, shown))

    @staticmethod
    def _used(path: Path) -> None:
        """Mark a kept feature as used now (its folder's mtime, at most once a day), so
        prune() keeps what a cell still names."""
        try:
            if path.lstat().st_mtime < time.time() - 86400:
                os.utime(path, follow_symlinks=False)
        except OSError:
            pass

    def prune(self, unused_for: float = UNUSED_SECONDS) -> list[str]:
        """Drop the kept features no resolve used for `unused_for` seconds, the pins naming
        them, and what a killed fetch left (an hour old); returns what was dropped. A cell
        naming one again fetches it again (its pin is gone with it)."""
        dropped: list[str] = []
        now = time.time()
        unpacked = self.root / "unpacked"
        if not unpacked.is_dir() or unpacked.is_symlink() or self.root.is_symlink():
            return dropped
        gone: set[str] = set()
        for entry in unpacked.iterdir():
            try:
                age = now - entry.lstat().st_mtime
            except FileNotFoundError:
                continue
            leftover = entry.name.startswith(".")
            if age > (3600.0 if leftover else unused_for):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                if not leftover:
                    gone.add(entry.name.replace("-", ":", 1))
                    dropped.append(f"feature {entry.name}")
        pins = self.root / "pins"
        if pins.is_dir() and not pins.is_symlink():
            for pin in pins.iterdir():
                data = self._pin_file(pin)
                if data is None or data.get("layer", data.get("digest")) in gone:
                    pin.unlink(missing_ok=True)
        return dropped

    # -- the cache's folders ------------------------------------------------------------------

    def _dir(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        for step in [self.root, *(self.root.joinpath(*parts[:i + 1]) for i in range(len(parts)))]:
            try:
                step.mkdir(mode=0o700)
            except FileExistsError:
                if step.is_symlink() or not step.is_dir():
                    raise ImageBuildFailed(f"{step} is not a directory DevCell made") from None
        return path

    def _unpacked(self, digest: str) -> Path:
        return self._dir("unpacked") / digest.replace(":", "-")

    def _pin_path(self, key: str) -> Path:
        return self._dir("pins") / (hashlib.sha256(key.encode()).hexdigest()[:40] + ".json")

    def _pin(self, key: str) -> dict[str, Any] | None:
        data = self._pin_file(self._pin_path(key))
        return data if data is not None and data.get("key") == key else None

    @staticmethod
    def _pin_file(path: Path) -> dict[str, Any] | None:
        return safeio.read_json_object(path, _PIN_LIMIT)

    def _put_pin(self, key: str, value: dict[str, Any]) -> None:
        path = self._pin_path(key)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".pin-")
        with os.fdopen(fd, "w") as f:
            json.dump({**value, "key": key}, f)
        os.replace(tmp, path)

    def _have(self, digest: str) -> bool:
        path = self._unpacked(digest)
        return path.is_dir() and not path.is_symlink()

    def _keep(self, digest: str, download: Any, shown: str) -> None:
        """Fill unpacked/<digest> from `download(file)` (which writes the tarball): extracted
        beside it and renamed into place, so a half-extracted folder is never used."""
        from devcell.backends.features import unpack  # tarfile: only when one is fetched

        final = self._unpacked(digest)
        with tempfile.TemporaryDirectory(dir=final.parent, prefix=".fetch-") as work:
            with open(os.path.join(work, "tarball"), "w+b") as f:
                download(f)
                f.seek(0)
                unpack.extract(f, os.path.join(work, "tree"), shown)
            try:
                os.rename(os.path.join(work, "tree"), final)
            except OSError:
                if not self._have(digest):
                    raise
        os.chmod(final, 0o700)

    # -- each kind ----------------------------------------------------------------------------

    def _oci(self, ref: refs.Ref, shown: str) -> str:
        host = self.mirrors.get(ref.registry, ref.registry)
        key = f"oci\0{host}\0{ref.repository}\0{ref.reference}"
        pin = self._pin(key)
        if pin is not None and isinstance(pin.get("layer"), str) and self._have(pin["layer"]):
            return str(pin["layer"])
        # urllib.request (ssl, http.client, email) costs ~0.1-0.2 s: imported only to fetch,
        # not at every reconcile of a cell whose features are here.
        from devcell.backends.features import registry

        where = registry.endpoint(ref.registry, self.mirrors)
        client = registry.Client(where, ref.repository, shown)
        manifest_digest, manifest = client.manifest(ref.reference)
        layer, size = registry.feature_layer(manifest, shown)
        if not self._have(layer):
            self._keep(layer, lambda f: client.blob(layer, size, f), shown)
        self._put_pin(key, {"manifest": manifest_digest, "layer": layer})
        return layer

    def _tarball(self, ref: refs.Ref, shown: str) -> str:
        key = f"url\0{ref.text}"
        pin = self._pin(key)
        if pin is not None and isinstance(pin.get("digest"), str) and self._have(pin["digest"]):
            return str(pin["digest"])
        from devcell.backends.features import registry

        final_digest: list[str] = []

        with tempfile.TemporaryDirectory(dir=self._dir("unpacked"), prefix=".get-") as work:
            path = os.path.join(work, "tarball")
            with open(path, "w+b") as f:
                final_digest.append(registry.download(ref.text, f, shown))
            digest = final_digest[0]
            if not self._have(digest):
                self._keep(digest, lambda out: _copy(path, out), shown)
        self._put_pin(key, {"digest": digest})
        return digest


def _copy(path: str, out: Any) -> None:
    with open(path, "rb") as f:
        shutil.copyfileobj(f, out)
