"""A pure-Python rendering of deploy/k8s's kustomizations, for tests that have no kustomize.

It does the subset our kustomizations use, in kustomize's order: a folder's ``resources``
(manifest files, or folders with a kustomization of their own), then its ``components`` (each
adds its resources and patches what was gathered so far), then its own ``patches``. A patch is
an RFC 6902 JSON patch, inline (``patch``) or in a file (``path``), applied to every object its
``target`` names by kind and name (and group and version when given). ``namespace``, ``labels``
and ``images`` are not applied: the tests read what the manifests themselves say.

Stricter than kustomize where kustomize is silent: a patch whose target matches nothing, a path
that does not exist and an object listed twice are errors. Whatever else a kustomization says
(a strategic-merge patch, a generator, a target by label) is refused by its schema
(k8s_schemas.py), so a kustomization that outgrows this rendering fails its tests instead of
being rendered wrong.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from tests.unit.deploy.k8s_schemas import COMPONENT, JSON_PATCH_OP, KUSTOMIZATION

Manifest = dict[str, Any]

KINDS = {"Kustomization": KUSTOMIZATION, "Component": COMPONENT}


def documents(path: Path) -> list[Manifest]:
    """The YAML documents of ``path``, empty ones left out."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def object_key(document: Manifest) -> str:
    """``Kind/name``: how the tests name an object."""
    return f"{document['kind']}/{document['metadata']['name']}"


def kustomization(folder: Path) -> Manifest:
    loaded: Manifest = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return loaded


def patch_files(root: Path) -> set[Path]:
    """The files below ``root`` that a kustomization or component names as a patch (JSON
    patches, not manifests)."""
    return {
        (path.parent / patch["path"]).resolve()
        for path in root.rglob("kustomization.yaml")
        for patch in kustomization(path.parent).get("patches", [])
        if "path" in patch
    }


def render(folder: Path) -> dict[str, Manifest]:
    """The objects ``kubectl kustomize folder`` makes (less namespace, labels and images), by
    ``Kind/name``, in the order they are listed."""
    return _accumulate(folder, {}, "Kustomization")


def _accumulate(folder: Path, gathered: dict[str, Manifest], kind: str) -> dict[str, Manifest]:
    spec = kustomization(folder)
    # The schema admits only what is rendered here (and namespace, labels, images).
    Draft202012Validator(KINDS[kind]).validate(spec)
    objects = dict(gathered)
    for resource in spec.get("resources", []):
        path = folder / resource
        found = render(path).values() if path.is_dir() else documents(path)
        for document in found:
            key = object_key(document)
            if key in objects:
                raise ValueError(f"{folder}: {key} is listed twice")
            objects[key] = document
    for component in spec.get("components", []):
        objects = _accumulate(folder / component, objects, "Component")
    for patch in spec.get("patches", []):
        text = patch["patch"] if "patch" in patch else (folder / patch["path"]).read_text()
        operations = yaml.safe_load(text)
        if not isinstance(operations, list):
            raise ValueError(f"{folder}: only JSON patches (a list of operations) are rendered")
        for operation in operations:
            Draft202012Validator(JSON_PATCH_OP).validate(operation)
        targets = [key for key, document in objects.items() if _matches(patch["target"], document)]
        if not targets:
            raise ValueError(f"{folder}: patch target {patch['target']} matches nothing")
        for key in targets:
            objects[key] = json_patch(objects[key], operations)
    return objects


def _matches(target: Manifest, document: Manifest) -> bool:
    group, _, version = document["apiVersion"].rpartition("/")
    found = {
        "kind": document["kind"],
        "name": document["metadata"]["name"],
        "group": group,
        "version": version,
    }
    return all(found[field] == value for field, value in target.items())


def json_patch(document: Manifest, operations: list[Manifest]) -> Manifest:
    """RFC 6902 add / remove / replace on a copy of ``document``: object members, and list
    items by index (``-`` appends). A path whose parent, or whose member for remove and
    replace, does not exist is an error, as in kustomize."""
    patched = copy.deepcopy(document)
    for operation in operations:
        op, path = operation["op"], operation["path"]
        *parents, leaf = [
            part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")
        ]
        try:
            node = patched
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if isinstance(node, list):
                index = len(node) if leaf == "-" and op == "add" else int(leaf)
                if op == "add" and index <= len(node):
                    node.insert(index, operation["value"])
                elif op == "remove":
                    del node[index]
                elif op == "replace":
                    node[index] = operation["value"]
                else:
                    raise IndexError(index)
            elif op == "add":
                node[leaf] = operation["value"]
            elif op == "remove":
                del node[leaf]
            elif leaf in node:
                node[leaf] = operation["value"]
            else:
                raise KeyError(leaf)
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"{op} {path}: no such place ({error!r})") from None
    return patched
