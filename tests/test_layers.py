"""The layer rules of DESIGN.md, checked by walking every import of ``src/noderun`` with ``ast``.

- no import cycles between noderun's modules (imports inside functions count: they run too);
- ``plan`` and ``topology`` are pure: no process, socket or file I/O modules, no ``open()``,
  no writes to ``os.environ``;
- ``runtime`` never reaches ``backends``, ``verbs`` or the cli, directly or through others;
- ``plan`` and ``topology`` never reach ``backends`` or ``runtime``;
- ``backends`` never reach ``verbs`` or the cli.

Imports under ``if TYPE_CHECKING:`` do not run and do not count. An import of ``noderun.x.y``
counts as one of that module, not of the packages above it (``noderun/__init__.py`` is the
public facade; it loads the runtime lazily). ``make lint`` runs this file as a script:

    python tests/test_layers.py [SRC]     (SRC: the folder holding ``noderun``; default src)
"""

from __future__ import annotations

import ast
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PURE = ("plan", "topology")
IO_MODULES = {"subprocess", "socket", "shutil", "urllib", "http", "requests", "psutil"}
ENVIRON_WRITES = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__"}
# layer -> layers it must never reach (the cli: noderun.cli, noderun.__main__)
NEVER_REACHES = {
    "runtime": ("backends", "verbs", "cli", "__main__"),
    "plan": ("backends", "runtime"),
    "topology": ("backends", "runtime"),
    "backends": ("verbs", "cli", "__main__"),
}


def modules(src: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``src/noderun``."""
    found = {}
    for path in sorted((src / "noderun").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test or ast.Pass()):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def imported(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of every import in the module, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def graph(mods: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {noderun module it imports: line}; ``from pkg import name`` is the submodule
    when ``pkg.name`` is one, else ``pkg``."""
    edges: dict[str, dict[str, int]] = {m: {} for m in mods}
    for name, path in mods.items():
        for target, line in imported(name, path):
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                edges[name].setdefault(target, line)
    return edges


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def reach_paths(edges: dict[str, dict[str, int]], start: str) -> dict[str, list[str]]:
    """Every module reachable from ``start``, with one import path to it."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop()
        for child in edges[node]:
            if child not in paths:
                paths[child] = [*paths[node], child]
                todo.append(child)
    return paths


def impurities(name: str, path: Path) -> Iterator[str]:
    """I/O imports, ``open()`` calls and ``os.environ`` writes in a pure module."""
    tree = ast.parse(path.read_text(), str(path))
    for target, line in imported(name, path):
        if target.split(".")[0] in IO_MODULES:
            yield f"{path.name}:{line} imports {target.split('.')[0]}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            call = ast.unparse(node.func)
            if call in ("open", "io.open", "os.open", "os.putenv", "os.unsetenv"):
                yield f"{path.name}:{node.lineno} calls {call}()"
            method = call.rpartition(".")
            if method[0] == "os.environ" and method[2] in ENVIRON_WRITES:
                yield f"{path.name}:{node.lineno} writes os.environ ({method[2]})"
        targets = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "os.environ":
                yield f"{path.name}:{node.lineno} writes os.environ[…]"


def problems(src: Path) -> list[str]:
    """Every broken rule, one line each; empty when the layers hold."""
    mods = modules(src)
    edges = graph(mods)
    found = [f"import cycle: {' -> '.join(c)}" for c in cycles(edges)]
    for name, path in mods.items():
        if layer(name) in PURE:
            found += [f"{name} is not pure: {what}" for what in impurities(name, path)]
        forbidden = NEVER_REACHES.get(layer(name), ())
        for reached, via in reach_paths(edges, name).items():
            if layer(reached) in forbidden and len(via) == 2:  # direct: named at its line
                line = edges[name][reached]
                found.append(
                    f"{name} (line {line}) imports {reached}: {layer(name)} must never "
                    f"reach {layer(reached)}"
                )
            elif layer(reached) in forbidden and not {layer(m) for m in via[1:-1]} & set(forbidden):
                found.append(
                    f"{name} reaches {reached} through {' -> '.join(via[1:-1])}: "
                    f"{layer(name)} must never reach {layer(reached)}"
                )
    return found


def test_the_layers_hold() -> None:
    assert problems(ROOT / "src") == []


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "noderun", src / "noderun", ignore=shutil.ignore_patterns("__pycache__")
    )
    return src


def test_a_runtime_module_importing_a_backend_fails(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    (src / "noderun" / "runtime" / "broken.py").write_text(
        "def later():\n    from noderun.backends import slurm\n    return slurm\n"
    )
    assert problems(src) == [
        "noderun.runtime.broken (line 2) imports noderun.backends.slurm: runtime must never "
        "reach backends"
    ]


def test_reaching_through_another_layer_and_impure_topology_fail(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    (src / "noderun" / "timeless.py").write_text("import noderun.verbs.run\n")
    (src / "noderun" / "topology" / "leaky.py").write_text(
        "import os\nimport subprocess\nfrom noderun import timeless\n"
        "os.environ['X'] = '1'\nos.environ.update(Y='2')\nopen('f')\n"
    )
    found = problems(src)
    assert "noderun.topology.leaky is not pure: leaky.py:2 imports subprocess" in found
    assert "noderun.topology.leaky is not pure: leaky.py:4 writes os.environ[…]" in found
    assert "noderun.topology.leaky is not pure: leaky.py:5 writes os.environ (update)" in found
    assert "noderun.topology.leaky is not pure: leaky.py:6 calls open()" in found
    assert any(
        line.startswith("noderun.topology.leaky reaches noderun.backends.")
        and "through noderun.timeless -> noderun.verbs.run" in line
        for line in found
    ), found


def test_an_import_cycle_fails(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    (src / "noderun" / "one.py").write_text("from noderun import two\n")
    (src / "noderun" / "two.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from noderun import errors\n"
        "def f():\n    from noderun import one\n"
    )
    assert problems(src) == ["import cycle: noderun.one -> noderun.two"]


def main(argv: list[str]) -> int:
    found = problems(Path(argv[0]) if argv else ROOT / "src")
    for line in found:
        print(f"layers: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
