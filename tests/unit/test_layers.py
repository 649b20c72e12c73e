"""The package's layers, checked on the source: a module imports only its own layer and the
ones below it (lazy imports inside functions included), no module imports another's private
names, and imports form no cycle. Layers, lowest first: dsan.api; dsan.core;
dsan.features; dsan.model; dsan.policies; dsan.sim; dsan.train and dsan.explain; then the
components that use the library (sidecar, deviceplugin) and the ``dsan`` command."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"dsan.api": 0, "dsan.core": 1, "dsan.features": 2, "dsan.model": 3,
          "dsan.policies": 4, "dsan.sim": 5, "dsan.train": 6, "dsan.explain": 6,
          "deviceplugin": 7, "sidecar": 7, "dsan.cli": 8, "dsan.__main__": 8}
#: Imports allowed across the rule, each with its reason.
ALLOWED = {
    # the command line dispatches to every component's own parser, lazily
    ("dsan.cli", "sidecar.cli"), ("dsan.cli", "deviceplugin.cli"),
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in ("dsan", "sidecar", "deviceplugin"):
        for p in (ROOT / pkg).rglob("*.py"):
            if "gen" in p.relative_to(ROOT).parts:
                continue
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _layer(mod: str) -> int | None:
    best = None
    for prefix, layer in LAYERS.items():
        if (mod == prefix or mod.startswith(prefix + ".")) and (
                best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


def _imports(path: Path) -> list[tuple[str, list[str], bool]]:
    """(module, names, at module level) of every import of our packages in ``path``."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [a.name for a in node.names]
            out.append((node.module, names, id(node) in top))
        elif isinstance(node, ast.Import):
            out += [(a.name, [], id(node) in top) for a in node.names]
    return [(m, n, t) for m, n, t in out if m.split(".")[0] in ("dsan", "sidecar", "deviceplugin")]


def test_no_module_imports_a_layer_above_its_own() -> None:
    bad = []
    for mod, path in MODULES.items():
        mine = _layer(mod)
        if mine is None:
            continue
        for target, _, _ in _imports(path):
            theirs = _layer(target)
            if theirs is not None and theirs > mine and (mod, target) not in ALLOWED:
                bad.append(f"{mod} imports {target}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_private_name_is_imported_from_another_module() -> None:
    bad = [f"{mod} imports {n} from {target}"
           for mod, path in MODULES.items()
           for target, names, _ in _imports(path)
           for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad, "\n".join(bad)


def test_imports_form_no_cycle() -> None:
    """Lazy imports and type-checking ones count too: a cycle hidden inside a function is
    still two modules that cannot be understood (or moved) one without the other."""
    graph: dict[str, set[str]] = {}
    for mod, path in MODULES.items():
        deps = set()
        for target, names, _ in _imports(path):
            # ``from pkg import mod`` imports a submodule when one of that name exists
            deps |= {f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES}
            if target in MODULES:
                deps.add(target)
        graph[mod] = {d for d in deps if d != mod and not mod.startswith(d + ".")}
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        seen[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if seen.get(d) == 1:
                return [*stack[stack.index(d):], d]
            if d not in seen and (cycle := visit(d)) is not None:
                return cycle
        seen[m] = 2
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in seen and (cycle := visit(m)) is not None:
            raise AssertionError("import cycle: " + " -> ".join(cycle))
