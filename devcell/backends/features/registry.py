"""Fetching a feature's artifact through a registry (devcell.backends.oci.client).

A feature published as OCI is an artifact: a manifest whose one layer
(`application/vnd.devcontainers.layer.v1+tar`) is the feature's tarball. The manifest is
asked for by tag or digest, the layer by its digest; both are checked against the digest
they are named by while they are read, and bounded. `images.registryMirrors` of DevCell's
configuration may serve one registry's features from another (tests serve ghcr.io's from a
local registry). A tarball URL is downloaded on the client's terms (https, or plain http
on loopback; a redirect never carries credentials to another host).
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from typing import IO, Any

from devcell.backends.oci import client as oci
from devcell.backends.oci.client import DIGEST as _DIGEST
from devcell.backends.oci.client import Endpoint, docker_auth, endpoint
from devcell.errors import BackendError, ImageBuildFailed

__all__ = ["Endpoint", "docker_auth", "endpoint"]

LAYER_TYPE = "application/vnd.devcontainers.layer.v1+tar"
MAX_LAYER = 64 * 1024 * 1024
FETCH_SECONDS = 600.0
"""The longest one download (a manifest, a layer, a tarball) may take in all: the client's
TIMEOUT bounds each read only, so a server sending a byte a minute would hold the cell's
build for ever."""


class FeatureFetchFailed(BackendError):
    """A feature could not be fetched (registry or URL unreachable, refused credentials):
    retried with backoff, the registry may come back."""

    reason = "FeatureFetchFailed"


def Client(where: Endpoint, repository: str, shown: str) -> oci.Client:  # noqa: N802
    """The registry client for feature `shown`, raising a feature's errors."""
    return oci.Client(where, repository, f"feature {shown}", unreachable=FeatureFetchFailed,
                      refused=ImageBuildFailed, seconds=FETCH_SECONDS)


def feature_layer(manifest: dict[str, Any], shown: str) -> tuple[str, int]:
    """(digest, size) of the feature's tarball in its manifest."""
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not layers:
        raise ImageBuildFailed(f"feature {shown}: its manifest names no layer (is it an "
                               "image rather than a feature?)")
    chosen = [layer for layer in layers if isinstance(layer, dict)
              and layer.get("mediaType") == LAYER_TYPE]
    if len(chosen) != 1:
        raise ImageBuildFailed(f"feature {shown}: its manifest must name one layer of type "
                               f"{LAYER_TYPE}; found {len(chosen)}")
    digest, size = chosen[0].get("digest"), chosen[0].get("size")
    if not isinstance(digest, str) or not _DIGEST.match(digest) or not isinstance(size, int) \
            or isinstance(size, bool) or not 0 <= size <= MAX_LAYER:
        raise ImageBuildFailed(f"feature {shown}: its layer must name a sha256 digest and a "
                               f"size up to {MAX_LAYER >> 20} MiB")
    return digest, size


def download(url: str, into: IO[bytes], shown: str) -> str:
    """A tarball URL's content written to `into` (bounded); its sha256 digest."""
    h = hashlib.sha256()

    def too_slow() -> FeatureFetchFailed:
        return FeatureFetchFailed(f"feature {shown}: the download took longer than "
                                  f"{FETCH_SECONDS:g}s; stopped")

    try:
        with oci.OPENER.open(urllib.request.Request(url, headers={"User-Agent": "devcell"}),
                             timeout=oci.TIMEOUT) as got:
            if oci.read_bounded(got, MAX_LAYER, into, h, seconds=FETCH_SECONDS,
                                too_slow=too_slow) > MAX_LAYER:
                raise ImageBuildFailed(f"feature {shown}: the tarball is larger than "
                                       f"{MAX_LAYER >> 20} MiB")
    except urllib.error.HTTPError as exc:
        exc.close()
        raise FeatureFetchFailed(f"feature {shown}: {exc.code} ({exc.reason})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FeatureFetchFailed(f"feature {shown}: cannot download it "
                                 f"({getattr(exc, 'reason', None) or exc})") from None
    return "sha256:" + h.hexdigest()
