"""Imports flow one way: surfaces → runtime's core and the converters → the shared base. Checked by walking
every import statement (those inside functions too; `if TYPE_CHECKING:` blocks are for type checkers only)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("app", "installer", "runtime", "converters")
# What people and programs use: they may import anything.
SURFACES = (
    "app", "installer", "runtime.cli", "runtime.bench", "runtime.server", "runtime.api_schema", "runtime.api_guard"
)
# The shared base: the cache layout (and the catalogue's file), atomic writes, the errors, and the machine (its
# cores, ggml's devices and CPU kernels, llama.cpp's log), which the converter needs as much as the runtime does.
BASE = ("runtime", "runtime.errors", "runtime.cache", "runtime.atomic", "runtime.hardware", "runtime.ggml_lib",
        "runtime.cpu_variant", "runtime.llama_log")
MAY_IMPORT = {"base": {"base"}, "converters": {"base", "converters"}, "core": {"base", "core"}}


def layer(module: str) -> str:
    if any(module == s or module.startswith(s + ".") for s in SURFACES):
        return "surface"
    if module in BASE:
        return "base"
    return "converters" if module.split(".")[0] == "converters" else "core"


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """Our modules that `path` imports, at run time."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in itertools.chain.from_iterable(ast.walk(b) for b in node.body))
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            # the longest known module the name starts with: `from runtime import router` is runtime.router
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


def test_runtime_and_converters_have_no_import_cycles() -> None:
    g = {m: {d for d in deps if layer(d) != "surface"} for m, deps in graph().items() if layer(m) != "surface"}
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
    assert "converters.convert" in g["runtime.cli"]  # cmd_convert imports it inside the function
    assert layer("runtime.cli") == "surface" and layer("runtime.engine") == "core"
