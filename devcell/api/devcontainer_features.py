"""devcontainer.json `features` and `overrideFeatureInstallOrder` as spec.features.

Each entry becomes `{ref, options}`: an OCI reference as written; a deprecated bare id
(`"go"`) as the devcontainers/features one it stands for (`ghcr.io/devcontainers/features/go`),
as the reference CLI reads it, said in a note; a local folder (`./my-feature`, relative to
devcontainer.json) relative to the manifest's directory; an https tarball URL as written.
A string value is the `version` option (the specification's shorthand); numbers become
strings (an option is a string or a boolean). overrideFeatureInstallOrder becomes the list's
order: the features it names first, in its order, then the others as devcontainer.json lists
them (DevCell installs in list order among the features whose installsAfter/dependsOn are
met, as the specification's override does). Nothing is fetched here: a remote feature is
fetched, checked and its options validated when the cell's image is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from devcell.api.devcontainer_converter import Converter as _Converter
from devcell.manifests import feature_refs

DEVCONTAINERS = "ghcr.io/devcontainers/features"
HANDLED = {"features", "overrideFeatureInstallOrder"}


def convert(c: _Converter) -> None:
    """c.data's features into c.spec["features"], problems into c.r."""
    features = c.data.get("features")
    if features is None or features == {}:
        if "overrideFeatureInstallOrder" in c.data:
            c.note("overrideFeatureInstallOrder", "no features to order")
        return
    if not isinstance(features, dict):
        c.r.refuse("expected an object of feature references to their options", "features")
        return
    entries: list[tuple[str, dict[str, Any], str]] = []
    for key, value in features.items():
        ref = _ref(c, str(key))
        options = _options(c, str(key), value)
        if ref is not None and options is not None:
            entries.append((ref, options, str(key)))
    order = c.data.get("overrideFeatureInstallOrder")
    if order is not None:
        if not isinstance(order, list) or not all(isinstance(o, str) for o in order):
            c.r.refuse("expected a list of feature ids", "overrideFeatureInstallOrder")
        else:
            entries = _ordered(entries, [_resource(c, o) for o in order], c)
    c.spec["features"] = [{"ref": ref, **({"options": options} if options else {})}
                          for ref, options, _ in entries]
    c.origins["spec.features"] = ("features",)
    for i, (_, _, key) in enumerate(entries):
        c.origins[f"spec.features[{i}]"] = ("features", key)


def _ref(c: _Converter, key: str) -> str | None:
    filled = c._filled(key, "features", key)
    if filled is None:
        return None
    if feature_refs.is_local(filled):
        here = c.r.path.resolve().parent
        folder = (here / filled).resolve()
        relative = os.path.relpath(folder, Path(c.out_dir).resolve())
        return relative if relative.startswith("../") else "./" + relative
    if "/" not in filled and ":" not in filled.split("@")[0].rsplit(":", 1)[0]:
        bare, _, version = filled.partition(":")
        ref = f"{DEVCONTAINERS}/{bare}" + (f":{version}" if version else "")
        c.notes.append(f"features.{key}: a bare feature id, read as {ref} (as the "
                       "devcontainer CLI reads the deprecated form)")
        filled = ref
    try:
        feature_refs.parse(filled)
    except ValueError as exc:
        c.r.refuse(str(exc), "features", key, shown=f"features.{key}")
        return None
    return filled


def _resource(c: _Converter, text: str) -> str:
    ref = _ref_quiet(c, text)
    try:
        return feature_refs.parse(ref).resource
    except ValueError:
        return ref


def _ref_quiet(c: _Converter, text: str) -> str:
    if feature_refs.is_local(text):
        folder = (c.r.path.resolve().parent / text).resolve()
        return str(folder)
    if "/" not in text:
        return f"{DEVCONTAINERS}/{text.partition(':')[0]}"
    return text


def _ordered(entries: list[tuple[str, dict[str, Any], str]], first: list[str],
             c: _Converter) -> list[tuple[str, dict[str, Any], str]]:
    """`entries` with those `first` names (as resources) first, in its order; a stable sort,
    so the rest keep devcontainer.json's order."""
    def rank(entry: tuple[str, dict[str, Any], str]) -> int:
        mine = _resource(c, entry[2])
        return first.index(mine) if mine in first else len(first)

    return sorted(entries, key=rank)


def _options(c: _Converter, key: str, value: Any) -> dict[str, Any] | None:
    if value is None or value is True or value == {}:
        return {}
    if isinstance(value, str):
        filled = c._filled(value, "features", key)
        return None if filled is None else {"version": filled}
    if not isinstance(value, dict):
        c.r.refuse("expected an object of options (or a version string)", "features", key,
                   shown=f"features.{key}")
        return None
    options: dict[str, Any] = {}
    for name, option in value.items():
        if isinstance(option, bool):
            options[str(name)] = option
        elif isinstance(option, (int, float)):
            options[str(name)] = str(option)
        elif isinstance(option, str):
            filled = c._filled(option, "features", key, str(name))
            if filled is None:
                return None
            options[str(name)] = filled
        else:
            c.r.refuse("an option is a string or true/false", "features", key, str(name),
                       shown=f"features.{key}.{name}")
            return None
    return options
