"""What code a node would run, and which paths it sees: facts for ``noderun doctor``.

Seed 001's checklist ("same code on both nodes, model and dataset at the same paths") as
probe facts. The script is hashed whole; an installed package is hashed through pip's
``RECORD`` (one line per file with that file's sha256, so it changes when any file does),
or, for an editable or RECORD-less install, through its ``.py`` files. Nothing is
imported: torch's import costs seconds on every node, its RECORD a millisecond.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("noderun", "torch")


def file_digest(path: str) -> dict[str, Any]:
    """``{"path", "sha256", "error"}`` of one file (``sha256`` None when it cannot be read)."""
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as err:
        return {"path": path, "sha256": None, "error": err.strerror or str(err)}
    return {"path": path, "sha256": digest, "error": None}


def _editable(dist: metadata.Distribution) -> bool:
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return bool(isinstance(url, dict) and (url.get("dir_info") or {}).get("editable"))


def _tree_digest(folder: Path) -> str:
    """The sha256 of every ``.py`` file below ``folder``: relative names and contents."""
    total = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        total.update(str(path.relative_to(folder)).encode() + b"\0")
        total.update(hashlib.sha256(path.read_bytes()).digest())
    return total.hexdigest()


def package_digest(name: str) -> dict[str, Any]:
    """Version, location and a content hash of an installed package, without importing it."""
    out: dict[str, Any] = {"name": name, "version": None, "location": None, "sha256": None}
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        return {**out, "error": "not installed"}
    folder = Path(spec.origin).parent
    out["location"] = str(folder)
    try:
        dist = metadata.distribution(name)
        out["version"] = dist.version
        record = None if _editable(dist) else dist.read_text("RECORD")
    except metadata.PackageNotFoundError:
        record = None
    try:
        if record:
            out["sha256"], out["basis"] = hashlib.sha256(record.encode()).hexdigest(), "RECORD"
        else:
            out["sha256"], out["basis"] = _tree_digest(folder), "files"
    except OSError as err:
        return {**out, "error": err.strerror or str(err)}
    return {**out, "error": None}


def code_facts(script: str | None) -> dict[str, Any]:
    """The script's hash (when given) and each of ``PACKAGES``' hash."""
    return {
        "script": file_digest(script) if script else None,
        "packages": {name: package_digest(name) for name in PACKAGES},
    }


def path_facts(paths: Sequence[str]) -> list[dict[str, Any]]:
    """Whether each path is visible here, and as what (``dir``, ``file``)."""
    out = []
    for path in paths:
        kind = "dir" if os.path.isdir(path) else "file" if os.path.exists(path) else None
        out.append({"path": path, "exists": kind is not None, "kind": kind})
    return out
