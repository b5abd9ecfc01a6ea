"""`devcell df` through a server (cli/remote.py): what the server's state directory takes, by
type, measured there (GET /api/v1/df), read back into df's own report and printed by cmd_df,
so the output is the same bytes as on the server's machine."""

from __future__ import annotations

import argparse
from typing import Any

from devcell.api import df
from devcell.cli import cmd_df
from devcell.client import not_api

ITEM_FIELDS = ("type", "name", "backend", "owner", "active", "sizeBytes", "logicalBytes",
               "detail")


def run_df(args: argparse.Namespace) -> int:
    doc = args.remote.df(verbose=args.verbose >= 1)
    try:
        report = _report(doc)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise not_api(args.remote.url, "a df that is not one") from None
    return cmd_df.print_report(args, report)


def _figure(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        raise ValueError("not a size")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not text")
    return value


def _report(doc: dict[str, Any]) -> df.Report:
    rows = tuple(df.Row(_text(r["type"]), _figure(r["total"]), _figure(r["active"]),
                        _figure(r["sizeBytes"]), _figure(r["reclaimableBytes"]))
                 for r in doc["types"])
    items = []
    for i in doc.get("items") or []:
        if not isinstance(i.get("active"), bool):
            raise ValueError("active is not a boolean")
        logical = i.get("logicalBytes")
        measured = {k: v for k, v in i.items() if k not in ITEM_FIELDS}
        if not all(v is None or (isinstance(v, (int, float, str)) and not isinstance(v, bool))
                   for v in measured.values()):
            raise ValueError("a measured figure is not a number or text")
        items.append(df.Item(_text(i["type"]), _text(i["name"]), _text(i["backend"]),
                             _text(i["owner"]), i["active"], _figure(i["sizeBytes"]),
                             None if logical is None else _figure(logical),
                             _text(i.get("detail", "")), measured))
    problems = doc.get("problems") or []
    return df.Report(rows, tuple(items), tuple(_text(p) for p in problems))
