"""What a feature reference names (spec.features[].ref), parsed without any I/O.

Three forms, as devcontainer.json accepts them:
- an OCI reference, `ghcr.io/devcontainers/features/node:1` (a tag, `@sha256:...`, or neither,
  meaning `latest`);
- a local folder, `./my-feature` or `../features/x` (relative to the manifest's directory;
  stored absolute, as spec.build.context is);
- a tarball URL, `https://host/path/feature.tgz` (https only: a feature's install.sh runs as
  root in the build, so it must come over an authenticated channel; http is accepted only
  for a loopback host, as the engine does for registries).
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit


class Kind(enum.Enum):
    OCI = "oci"
    LOCAL = "local"
    TARBALL = "tarball"


_REGISTRY = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]{1,5})?)"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_OCI = re.compile(rf"^(?P<registry>{_REGISTRY})/(?P<repository>{_COMPONENT}(?:/{_COMPONENT})*)"
                  r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
                  r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?\Z")


@dataclass(frozen=True)
class Ref:
    """One parsed reference."""

    kind: Kind
    text: str
    """As written (after a local path was made absolute)."""
    registry: str = ""
    repository: str = ""
    tag: str = ""
    digest: str = ""

    @property
    def resource(self) -> str:
        """What installsAfter and dependsOn name: the reference without its tag or digest
        (an OCI one), the path (a local folder) or the URL (a tarball)."""
        if self.kind is Kind.OCI:
            return f"{self.registry}/{self.repository}"
        return self.text

    @property
    def reference(self) -> str:
        """The manifest to ask the registry for: the digest when given, else the tag."""
        return self.digest or self.tag or "latest"


def is_local(text: str) -> bool:
    return text.startswith(("./", "../", "/")) or text in (".", "..")


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse(text: str) -> Ref:
    """The reference `text` names; ValueError saying what is wrong with it."""
    if is_local(text):
        return Ref(Kind.LOCAL, text)
    if "://" in text:
        parts = urlsplit(text)
        if parts.scheme == "https" and parts.hostname:
            return Ref(Kind.TARBALL, text)
        if parts.scheme == "http" and parts.hostname and loopback(parts.hostname):
            return Ref(Kind.TARBALL, text)
        raise ValueError("a tarball URL must be https (http only for a loopback host): a "
                         "feature's install.sh runs as root in the cell's image build")
    found = _OCI.match(text)
    if found is None or "." not in found["registry"] and ":" not in found["registry"] \
            and found["registry"] != "localhost":
        raise ValueError("expected an OCI reference with its registry "
                         "(ghcr.io/devcontainers/features/node:1), a local folder (./name) "
                         "or an https tarball URL")
    return Ref(Kind.OCI, text, registry=found["registry"], repository=found["repository"],
               tag=found["tag"] or "", digest=found["digest"] or "")
