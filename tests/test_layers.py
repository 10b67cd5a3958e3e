"""Imports flow one way, folder by folder: surfaces → chat → engine → plan → decode → models and machine → the
shared base, with the converters beside decode; between top-level packages, commands, app and installer sit
above runtime and converters, which never import them back. Checked by walking every import statement: those
inside functions, and those under `if TYPE_CHECKING:` too (a cycle of types is still a cycle to read)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("app", "installer", "commands", "runtime", "converters")
# Each folder is one layer and may import only the layers listed for it (and itself); a new folder must be
# placed here. runtime/'s own top-level modules (errors, atomic, child) are the shared base; commands/ is the
# command line, one module per command, and commands/bench/ the biggest command; commands/common.py, what
# the commands share, stands apart so that the folder check below keeps it under every command (bench too).
# The order follows one answer downwards: surfaces → chat (one turn) → engine → plan → decode → models, machine.
FOLDERS = {
    "app": "surface", "installer": "surface", "runtime.api": "surface",
    "commands": "surface", "commands.bench": "surface", "commands.common": "surface",
    "runtime.chat": "chat",
    "runtime.engine": "engine",
    "runtime.documents": "documents",
    "runtime.mcp": "mcp",
    "runtime.plan": "plan",
    "converters": "converters",
    "runtime.decode": "decode",
    "runtime.models": "models",
    "runtime.machine": "machine",
    "runtime": "base",
}
BELOW = {
    "base": set(),
    "machine": {"base"},
    "models": {"base"},
    "decode": {"base", "machine", "models"},
    "converters": {"base", "machine", "models"},
    "plan": {"base", "machine", "models", "decode"},
    "documents": {"base"},
    "mcp": {"base"},
    "engine": {"base", "machine", "models", "decode", "plan", "documents", "mcp"},
    "chat": {"base", "machine", "models", "decode", "plan", "documents", "mcp", "engine"},
}
MAY_IMPORT = {name: below | {name} for name, below in BELOW.items()}


def layer(module: str) -> str:
    """The layer of the innermost listed folder holding `module` (runtime.plan.router: plan)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in FOLDERS:
            return FOLDERS[".".join(parts[:n])]
    raise AssertionError(f"{module} is in no folder of tests/test_layers.py's FOLDERS")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """Our modules that `path` imports, at run time or for type checkers."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            # the longest known module the name starts with: `from runtime import router` is runtime.plan.router
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def graph() -> dict[str, set[str]]:
    found = modules()
    return {m: imports(p, set(found)) - {m} for m, p in found.items()}


def test_nothing_below_a_surface_imports_upwards() -> None:
    wrong = [
        f"{m} ({layer(m)}) imports {d} ({layer(d)})"
        for m, deps in sorted(graph().items())
        if layer(m) != "surface"
        for d in sorted(deps)
        if layer(d) not in MAY_IMPORT[layer(m)]
    ]
    assert not wrong, "\n".join(wrong)


def test_no_module_is_in_an_import_cycle() -> None:
    """No cycle of any kind, surfaces included: a module's imports can be read from the top down."""
    g = graph()
    cycles = []
    for start in g:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for d in g.get(node, ()):
                if d == start:
                    cycles.append(" → ".join([*path, start]))
                elif d not in seen:
                    seen.add(d)
                    stack.append((d, [*path, d]))
    assert not cycles, "\n".join(sorted(set(cycles)))


def test_the_walker_sees_imports_inside_functions() -> None:
    """The check itself can fail: a function-level import is an import."""
    g = graph()
    assert "converters.convert" in g["commands.convert"]  # its main imports it inside the function
    assert layer("commands.main") == "surface" and layer("commands.bench.run") == "surface"
    assert layer("runtime.engine.engine") == "engine"


def test_every_folder_has_a_layer() -> None:
    """A new package or top-level module must be placed in a layer, not fall into one by accident."""
    found = modules()
    runtime_top = {m for m, p in found.items() if m.startswith("runtime.") and p.parent.name == "runtime"
                   and p.name != "__init__.py"}
    base = {"runtime.errors", "runtime.atomic", "runtime.child", "runtime.paths", "runtime.terminal_text",
            "runtime.schema_limits"}
    assert runtime_top <= base, "runtime/'s top level is the base"
    packages = {m for m, p in found.items() if p.name == "__init__.py" and m.count(".") == 1}
    unplaced = sorted(packages - set(FOLDERS))
    assert not unplaced, f"place these folders in FOLDERS: {unplaced}"


def test_folders_import_one_way() -> None:
    """Between folders there is no cycle, surfaces included (the CLI imports the API, never back)."""
    g = graph()
    folders = sorted(FOLDERS, key=len, reverse=True)
    folder = {m: next(f for f in folders if m == f or m.startswith(f + ".")) for m in g}
    edges = {(folder[m], folder[d]) for m, deps in g.items() for d in deps if folder[m] != folder[d]}
    back = sorted(f"{a} → {b}" for a, b in edges if (b, a) in edges)
    assert not back, "\n".join(back)


# Between top-level packages: the surfaces (commands, app, installer) import runtime and converters; the
# converters use runtime's lower layers (FOLDERS); nothing imports a surface package back, and runtime never
# imports the converters (the command line, above both, joins them).
NEVER = {
    "runtime": {"converters", "commands", "app", "installer"},
    "converters": {"commands", "app", "installer"},
    # The window and the command line are two front ends of one turn (runtime.chat): neither imports the other.
    "app": {"commands"},
    "commands": {"app"},
}


def test_packages_import_one_way() -> None:
    wrong = [
        f"{m} imports {d}"
        for m, deps in sorted(graph().items())
        for d in sorted(deps)
        if d.split(".")[0] in NEVER.get(m.split(".")[0], set())
    ]
    assert not wrong, "\n".join(wrong)
