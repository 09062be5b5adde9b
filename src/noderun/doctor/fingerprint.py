"""What code a node would run, and which paths it sees: facts for ``noderun doctor``.

Seed 001's checklist ("same code on both nodes, model and dataset at the same paths") as
probe facts. The script is hashed whole. A package is hashed through the files inside its own
folder (``torch/...``, ``noderun/...``): their relative paths and sha256, taken from pip's
``RECORD`` where it lists them (a wheel install: a millisecond, where hashing torch's files
would take seconds) or read from disk (an editable install), in one format, so an editable and
a wheel install of the same code agree. What pip writes per venv is left out: the console
scripts in ``bin/`` (their first line names the venv's interpreter), ``RECORD`` itself,
``direct_url.json``, and the bytecode pip compiles at install time. Nothing is imported.
"""

from __future__ import annotations

import base64
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


def _skipped(relative: str) -> bool:
    """Files that are not the package's code: bytecode, written per install or per run."""
    return "__pycache__/" in relative or relative.endswith((".pyc", ".pyo"))


def _record_hash(data: bytes) -> str:
    """A file's hash as pip's RECORD writes it."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _combine(entries: dict[str, str]) -> str:
    total = hashlib.sha256()
    for relative in sorted(entries):
        total.update(f"{relative}\0{entries[relative]}\n".encode())
    return total.hexdigest()


def _tree_digest(folder: Path) -> str:
    """Every file below ``folder`` (but bytecode): relative names and contents."""
    entries = {}
    for path in folder.rglob("*"):
        relative = path.relative_to(folder.parent).as_posix()
        if path.is_file() and not _skipped(relative):
            entries[relative] = _record_hash(path.read_bytes())
    return _combine(entries)


def _record_digest(record: str, top: str) -> str | None:
    """The package folder's files as RECORD lists them; None if RECORD lists none of them
    (an editable install) or lists one without its hash."""
    entries = {}
    for line in record.splitlines():
        relative, _, rest = line.partition(",")
        if not relative.startswith(top + "/") or _skipped(relative):
            continue
        file_hash = rest.partition(",")[0]
        if not file_hash:
            return None
        entries[relative] = file_hash
    return _combine(entries) if entries else None


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
        digest = _record_digest(record, folder.name) if record else None
        if digest:
            out["sha256"], out["basis"] = digest, "RECORD"
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
