"""The tag an image DevCell builds is given, apart from the build itself (container/build.py,
which imports the docker SDK): naming the image a cell's build wants, answered by the digest
cache when nothing changed, then costs no SDK import, and a no-op re-apply of a built cell
stays as cheap as one of any other cell (issue 31 item 6)."""

from __future__ import annotations

REPOSITORY = "devcell-build"
"""Images DevCell builds are tagged devcell-build/<state>/<cell>:<digest> (tag_for)."""


def tag_for(owner: str, cell_name: str, build_digest: str) -> str:
    """devcell-build/<state directory's hash>/<cell>:<digest>: per state directory, so one
    never runs (or prunes) an image another state directory's cell built."""
    return f"{REPOSITORY}/{owner[:12]}/{cell_name}:{build_digest[:32]}"
