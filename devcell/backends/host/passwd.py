"""A cell's user named as its image names it (`spec.user: vscode`, `node:staff`), turned into
the numeric ids the host needs to hand the workspace over (the image's /etc/passwd and
/etc/group, read by the caller in bounded amounts: the image is not trusted to be small)."""

from __future__ import annotations

MAX_BYTES = 1 << 20


def _table(text: str, fields: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= fields and parts[0] and parts[0] not in out:
            out[parts[0]] = parts
    return out


def ids(user: str, passwd: str | None, group: str | None) -> tuple[int, int] | None:
    """(uid, gid) of `USER[:GROUP]` (names or numbers); None when a name is not found. A user
    given as a number without a group keeps its number as its group, as docker does when
    /etc/passwd lacks it."""
    name, _, group_name = user.partition(":")
    users = _table(passwd or "", 4)
    if name.isdigit():
        uid = int(name)
        entry = next((row for row in users.values() if row[2] == name), None)
        gid = int(entry[3]) if entry and entry[3].isdigit() else uid
    elif name in users and users[name][2].isdigit() and users[name][3].isdigit():
        uid, gid = int(users[name][2]), int(users[name][3])
    else:
        return None
    if group_name:
        if group_name.isdigit():
            gid = int(group_name)
        else:
            groups = _table(group or "", 3)
            if group_name not in groups or not groups[group_name][2].isdigit():
                return None
            gid = int(groups[group_name][2])
    return uid, gid
