"""What removing a tree would free: each inode counted once, only if no link lies outside it.

Checkpoints of one cell may share unchanged files by hard links, so a checkpoint's own size
says little about what deleting it frees. An inode is freed when its last link goes: counted
here when every one of its links (st_nlink) was met inside the tree, once however many names
it has there. Blocks allocated (st_blocks), not apparent sizes, as `du` counts. The walk never
follows a link (treewalk), so a tree a cell shaped cannot make it count anything outside.
"""

from __future__ import annotations

import stat
from pathlib import Path

from devcell.backends.host import treewalk
from devcell.errors import BackendError

BLOCK = 512
"""st_blocks is counted in 512-byte units whatever the filesystem's block size."""


def exclusive_bytes(root: Path) -> int:
    """Bytes that removing `root` would free (0 when it does not exist)."""
    if not root.exists() and not root.is_symlink():
        return 0
    if not root.is_dir() or root.is_symlink():
        st = root.lstat()
        return st.st_blocks * BLOCK if st.st_nlink <= 1 else 0
    seen: dict[tuple[int, int], int] = {}
    sizes: dict[tuple[int, int], int] = {}
    total = 0
    try:
        for directory in treewalk.walk(root):
            total += directory.st.st_blocks * BLOCK  # a directory has no other name
            for _, st in directory.entries:
                if stat.S_ISDIR(st.st_mode):
                    continue  # counted when visited
                if st.st_nlink <= 1:
                    total += st.st_blocks * BLOCK
                    continue
                key = (st.st_dev, st.st_ino)
                seen[key] = seen.get(key, 0) + 1
                sizes[key] = st.st_blocks * BLOCK
                if seen[key] == st.st_nlink:
                    total += sizes[key]
    except (OSError, BackendError):
        return total  # what could be read; removal goes on regardless
    return total
