"""Read the house: import circles, imports that run back up (flows -> tasks -> infra is the only direction), source
files over the size limit, sub-packages per top folder. `python scripts/house.py [--json]`; exit 1 on any finding.

Imports are read with `ast` (no module is imported); an import inside a function counts like one at the top,
because a circle through a deferred import is still a circle a reader has to hold in mind.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("flows", "tasks", "infra")  # each may import only the ones after it
MAX_LINES = 700


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for top in LAYERS:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports (resolved to the longest known module prefix)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # `from pkg import sub` imports the submodule (and runs pkg/__init__, which is not an arrow a reader
            # follows); `from mod import name` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def read_house(root: Path = ROOT) -> dict:
    known = modules(root)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    upward = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                    if LAYERS.index(b.split(".")[0]) < LAYERS.index(a.split(".")[0]))
    sizes = {name: sum(1 for _ in path.open()) for name, path in known.items()}
    big = {name: n for name, n in sorted(sizes.items(), key=lambda kv: -kv[1]) if n > MAX_LINES}
    subpackages = {top: sorted(p.name for p in (root / top).iterdir() if p.is_dir() and (p / "__init__.py").is_file())
                   for top in LAYERS}
    return {"cycles": cycles(graph), "upward_imports": upward, "files_over_limit": big,
            "subpackages": subpackages, "modules": len(known)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    house = read_house()
    if args.json:
        print(json.dumps(house, indent=2))
    else:
        print(f"{house['modules']} modules")
        for c in house["cycles"]:
            print("import circle:", " <-> ".join(c))
        for u in house["upward_imports"]:
            print("import runs back up:", u)
        for name, n in house["files_over_limit"].items():
            print(f"over {MAX_LINES} lines: {name} ({n})")
        for top, subs in house["subpackages"].items():
            print(f"{top}/ sub-packages: {', '.join(subs) or '(none)'}")
    bad = house["cycles"] or house["upward_imports"] or house["files_over_limit"] or \
        any(len(s) < 2 for s in house["subpackages"].values())
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
