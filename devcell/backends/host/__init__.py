"""Host tools every backend may use, knowing no backend: trees, copies, children, ids.

    treewalk.py     walk a tree a cell shaped: no link followed, no recursion, one descriptor
    treecopy.py, filecopy.py  copy such a tree (cp children, or in process for small changes)
    temporaries.py  half-built trees a killed process left, found by owner and removed
    census.py, usage.py  bytes of several trees, each inode counted once, as `du` does
    children.py     child processes run with bounded output and a timeout
    proctree.py     a process and its descendants killed, found through /proc
    ids.py          safe ids for paths and the state directory's ownership label

Modules here import only `backends.base` among the backends (a contract checks it).
"""
