"""Snapshot archives: one self-describing, checksummed tar stream a snapshot exports to.

    format.py   the manifest, names and limits an archive holds
    write.py    a checkpoint's tree written as an archive (no link followed)
    read.py     an archive read back, untrusted: bounded, no member outside its tree

Both backends that keep files use these; they know no backend.
"""
