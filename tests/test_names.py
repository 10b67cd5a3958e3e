"""One name, one meaning (#62): no public top-level class or function name is defined in two modules of the
packages, so a reader (or a grep) that meets a name knows which thing it is.

Names with a leading underscore are private to their module by convention and are not counted. The allow-list
holds only the names that are the same protocol on purpose, each with the folder its definitions must stay in.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "app", "commands", "converters", "installer")

# name -> (the folder every definition must be under, why the same name is right there)
ALLOWED: dict[str, tuple[str, str]] = {
    "main": ("", "each entry point's `main(argv) -> int`, the protocol of `python -m` and the console scripts"),
    "build_parser": ("", "each entry point's argparse parser, next to its `main`"),
    "add_arguments": ("commands/", "each subcommand module's hook that commands.main calls to fill its parser"),
    "build": ("runtime/decode/drafts/", "each draft kind's builder, registered with drafts.register(kind, build)"),
    "package": ("installer/", "each platform module's packager (linux, macos, windows), picked by installer.build"),
}


def top_level_names(root: Path) -> dict[str, list[str]]:
    """Public top-level class and function names -> the modules (paths from `root`) that define them."""
    found: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
                is_def = isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                if is_def and not node.name.startswith("_"):
                    found[node.name].append(path.relative_to(root).as_posix())
    return found


def clashes(root: Path) -> dict[str, list[str]]:
    """The names defined in two modules or more that the allow-list does not cover."""
    out = {}
    for name, modules in top_level_names(root).items():
        if len(modules) < 2:
            continue
        folder = ALLOWED.get(name, (None, ""))[0]
        if folder is None or not all(m.startswith(folder) for m in modules):
            out[name] = modules
    return out


def test_each_public_top_level_name_is_defined_once() -> None:
    found = clashes(ROOT)
    assert not found, "defined in two modules (rename one, or keep one definition): " + "; ".join(
        f"{name} in {', '.join(modules)}" for name, modules in sorted(found.items())
    )


def test_the_check_sees_a_clash_and_the_allow_list_stays_used(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "runtime" / "a.py").write_text("class Progress:\n    pass\n\n\ndef _helper():\n    pass\n")
    (tmp_path / "app" / "b.py").write_text("def Progress():\n    pass\n\n\ndef _helper():\n    pass\n")
    (tmp_path / "app" / "c.py").write_text("def add_arguments():\n    pass\n")
    (tmp_path / "commands" / "d.py").write_text("def add_arguments():\n    pass\n")
    # private helpers never clash; add_arguments outside commands/ does
    expected = {"Progress": ["runtime/a.py", "app/b.py"], "add_arguments": ["app/c.py", "commands/d.py"]}
    assert clashes(tmp_path) == expected
    names = top_level_names(ROOT)
    for name in ALLOWED:  # an entry nobody needs any more goes
        assert len(names.get(name, [])) >= 2, f"{name} is defined once: drop it from ALLOWED"
