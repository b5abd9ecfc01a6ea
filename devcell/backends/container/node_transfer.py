"""A checkpoint moved from the node that holds it to another node, through a registry
(docs/cluster.md, "Moving a workspace between nodes").

The manager never reads a node's disk, and no swarm call carries bytes between nodes (facts):
the checkpoint's tree goes from its node into the cluster's registry (`cluster.registry`) as
the layer of an OCI artifact, and from there into a new workspace volume on the other node.
Each side is a node job (node_jobs.py) of the node tools image, on the node's host network
(the registry is the node's to reach, as its engine reaches it for images):

- **push**, on the checkpoint's node, the checkpoint volume read-only: GNU tar of the tree
  (`--sparse`: holes stay holes; links, fifos and device files archived as what they are,
  never followed or opened) streamed into a blob upload (curl, chunked), its SHA-256 and
  length computed on the way; the blob committed under that digest, which the job prints.
  The manager then puts the artifact's config and manifest (tag: the checkpoint's id), so the
  blob is named and kept by the registry, and records the digest with the checkpoint.
- **pull**, on the node the swarm picks for the fork (the cell's placement, its reservations,
  not the checkpoint's node): the blob streamed from the registry through sha256sum into GNU
  tar's extraction into the new volume; a digest other than the recorded one empties the
  volume again and fails the job (the volume is used only once the job completed, so a damaged
  or altered blob never becomes a workspace). GNU tar extracts member names without `..` or a
  leading `/`, makes links last (never writing through one), and runs in a job whose only
  writable mount is the new volume, on a read-only root filesystem.

What is not carried: extended attributes and ACLs (GNU tar's defaults; a workspace's user
files do not rely on them), as a same-node fork's `cp -a` carries them.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from devcell import names
from devcell.backends.container import node_jobs
from devcell.backends.container.cluster import Manager
from devcell.backends.oci import client as oci
from devcell.errors import BackendError, RegistryUnreachable
from devcell.manifests import feature_refs as refs

ARTIFACT_TYPE = "application/vnd.devcell.checkpoint.v1"
CONFIG_TYPE = "application/vnd.devcell.checkpoint.config.v1+json"
LAYER_TYPE = "application/vnd.devcell.checkpoint.layer.v1.tar"
"""A checkpoint in transit: one layer, the tree as a POSIX (pax) tar with sparse members."""
TRANSFER_CAPS_PUSH = ("DAC_OVERRIDE", "DAC_READ_SEARCH")
"""Reading every entry of the tree, whatever its mode (root's read, nothing written)."""
TRANSFER_CAPS_PULL = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD")
"""Root's extraction: owners, modes (setuid too), times, device files made with mknod."""
TMP = {"Type": "tmpfs", "Target": "/tmp", "TmpfsOptions": {"SizeBytes": 1 << 20}}
"""The jobs' scratch (their fifos and the HTTP headers): the root filesystem is read-only."""
_T = node_jobs.TOOLS
CURL = (
    'fetch() { ' + _T + '/curl -sS --fail --connect-timeout 20 --retry 2 "$@"; }\n'
    'glue() { case "$1" in *\\?*) echo "$1&";; *) echo "$1?";; esac; }\n'
    'located() { loc=$(sed -n "s/^[Ll]ocation: *//p" "$1" | tr -d "\\r" | tail -n 1)\n'
    '  case "$loc" in /*) echo "$DEVCELL_REGISTRY$loc";; http://*|https://*) echo "$loc";;\n'
    '  *) echo "the registry gave no upload location" >&2; return 1;; esac; }\n')
PUSH = (
    'set -o pipefail\n' + CURL +
    '[ -d /c/tree ] || { echo "the checkpoint volume holds no tree" >&2; exit 1; }\n'
    'base="$DEVCELL_REGISTRY/v2/$DEVCELL_REPOSITORY/blobs/uploads/"\n'
    'fetch -X POST -D /tmp/h1 -o /dev/null -H "Content-Length: 0" "$base"\n'
    'loc=$(located /tmp/h1)\n'
    'mkfifo /tmp/sum.in /tmp/size.in\n'
    'sha256sum < /tmp/sum.in > /tmp/sum & a=$!\n'
    'wc -c < /tmp/size.in > /tmp/size & b=$!\n'
    f'{_T}/tar --create --sparse --numeric-owner --format=posix -C /c/tree -f - . |'
    ' tee /tmp/sum.in /tmp/size.in |'
    ' fetch -X PATCH -H "Content-Type: application/octet-stream" -T - -D /tmp/h2'
    ' -o /dev/null "$loc"\n'
    'wait $a; wait $b\n'
    'digest="sha256:$(cut -d" " -f1 /tmp/sum)"; size=$(tr -d " " < /tmp/size)\n'
    'loc=$(located /tmp/h2)\n'
    'fetch -X PUT -H "Content-Length: 0" -o /dev/null "$(glue "$loc")digest=$digest"\n'
    'echo "devcell-pushed digest=$digest size=$size"\n')
"""The push job: the checkpoint (read-only at /c) into a blob of DEVCELL_REPOSITORY at
DEVCELL_REGISTRY (scheme://host); prints its digest and length."""
PULL = (
    'set -o pipefail\n' + CURL +
    f'figures() {{\n{node_jobs.TREE_FIGURES}}}\n'
    'empty() { find /w -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +; }\n'
    'empty\n'
    'mkfifo /tmp/sum.in\n'
    'sha256sum < /tmp/sum.in > /tmp/sum & a=$!\n'
    'ok=1\n'
    'fetch -L "$DEVCELL_REGISTRY/v2/$DEVCELL_REPOSITORY/blobs/$DEVCELL_DIGEST" |'
    ' tee /tmp/sum.in |'
    f' {{ {_T}/tar --extract --numeric-owner --same-owner --preserve-permissions'
    ' -C /w -f - && cat > /dev/null; } || ok=0\n'
    'wait $a || ok=0\n'
    'got="sha256:$(cut -d" " -f1 /tmp/sum)"\n'
    'if [ "$got" != "$DEVCELL_DIGEST" ]; then empty\n'
    '  echo "the registry served blob $DEVCELL_DIGEST with other content (it gives $got):'
    ' damaged or altered in the registry; nothing kept" >&2; exit 1; fi\n'
    '[ $ok = 1 ] || { empty; echo "the checkpoint\'s archive could not be extracted" >&2;'
    ' exit 1; }\n'
    'sync -f /w\n'
    'figures /w\n')
"""The pull job: blob DEVCELL_DIGEST into the new workspace volume at /w (emptied first, for
a job run again after a crash), its digest checked on the way."""


def where(registry: str) -> tuple[str, str, str]:
    """(scheme://host, host, repository) of `cluster.registry` (REGISTRY/REPOSITORY)."""
    ref = refs.parse(f"{registry}:x")
    if ref is None or ref.kind is not refs.Kind.OCI:
        raise BackendError(f"cluster.registry {names.printable(registry[:200])!r} is not "
                           "REGISTRY/REPOSITORY")
    found = oci.endpoint(ref.registry)
    return f"{found.scheme}://{found.host}", ref.registry, ref.repository


def _host_network(manager: Manager) -> list[dict[str, Any]]:
    return [{"Target": manager.network_id("host")}]


def push(manager: Manager, owner: str, *, registry: str, node: str, checkpoint_id: str,
         volume_mount: dict[str, Any], about: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's tree pushed from its node (a job there) into the registry, then named
    by an artifact the manager puts (tag: the checkpoint's id): what the checkpoint's record
    keeps as `pushed` (ref, digest of the layer, its size, the manifest's digest)."""
    url, host, repository = where(registry)
    what = f"pushing checkpoint {checkpoint_id} to {names.printable(registry)}"
    node_jobs.node_ready(manager, node, what)
    began = time.monotonic()
    out = node_jobs.run_placed(
        manager, owner, constraints=[f"node.id=={node}"], job=f"push:{checkpoint_id}",
        what=what, script=PUSH, caps=TRANSFER_CAPS_PUSH, expect="devcell-pushed",
        mounts=[volume_mount, TMP], networks=_host_network(manager), where=f"node {node}",
        env={"DEVCELL_REGISTRY": url, "DEVCELL_REPOSITORY": repository})[1]
    found = node_jobs.outputs(out, "devcell-pushed")
    layer, size = found.get("digest", ""), found.get("size", "")
    if not oci.DIGEST.match(layer) or not size.isdigit():
        raise BackendError(f"{what} on node {node}: its job named no digest ({out[-300:]!r})")
    config = json.dumps(dict(about, checkpoint=checkpoint_id, node=node, pushedAt=time.time()),
                        sort_keys=True).encode()
    client = oci.Client(oci.endpoint(host), repository, what, unreachable=RegistryUnreachable,
                        refused=RegistryUnreachable, push=True)
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    if not client.has_blob(config_digest):
        upload = client.upload()
        upload.write(config)
        upload.commit()
    manifest = {"schemaVersion": 2, "mediaType": oci.OCI_MANIFEST,
                "artifactType": ARTIFACT_TYPE,
                "config": {"mediaType": CONFIG_TYPE, "digest": config_digest,
                           "size": len(config)},
                "layers": [{"mediaType": LAYER_TYPE, "digest": layer, "size": int(size)}]}
    digest = client.put_manifest(checkpoint_id, json.dumps(manifest, sort_keys=True).encode(),
                                 oci.OCI_MANIFEST)
    return {"ref": f"{host}/{repository}:{checkpoint_id}", "manifest": digest,
            "layer": layer, "layerBytes": int(size), "from": node,
            "seconds": round(time.monotonic() - began, 2)}


def pull(manager: Manager, owner: str, *, registry: str, pushed: dict[str, Any], job: str,
         what: str, constraints: list[str], reservations: dict[str, Any],
         volume_mount: Callable[[], dict[str, Any]],
         on_placed: Callable[[str], None]) -> tuple[str, str]:
    """The pushed checkpoint's layer pulled into a new workspace volume on the node the swarm
    picks under `constraints` (with room for `reservations`): (that node, the job's output,
    which ends with the tree's figures)."""
    url, _, repository = where(registry)
    return node_jobs.run_placed(
        manager, owner, constraints=constraints, reservations=reservations, job=job,
        what=what, script=PULL, caps=TRANSFER_CAPS_PULL, expect="devcell-tree",
        mounts=[volume_mount(), TMP], networks=_host_network(manager),
        env={"DEVCELL_REGISTRY": url, "DEVCELL_REPOSITORY": repository,
             "DEVCELL_DIGEST": str(pushed["layer"])}, on_placed=on_placed)
