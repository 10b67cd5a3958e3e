"""The design documents describe the tree as it is: every module docs/layout.md names is there, every path and
dotted module docs/architecture.md and docs/layout.md name is there, and no module of runtime/, app/ or
commands/ grows past 400 lines (split where a reader would look for the parts, and name them in layout.md)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
MAX_LINES = 400
STILL_SPLITTING: set[str] = set()  # modules over the limit while a branch splits them (none now)
FOLDER = re.compile(r"(?:^|\s)((?:[a-z_]+/)+):\s")


def layout_entries(text: str) -> list[tuple[str, str]]:
    """(folder, name) for every module layout.md's tree names: each folder's entries are `name (what it is)`,
    separated by commas, several names joined by "and"; after a ";" come paths of documents."""
    lines = []
    for line in text.split("```", 2)[1].splitlines():  # a folder's first line: its layer's label, then it
        start = FOLDER.search(line) if line and not line[0].isspace() else None
        lines.append(line[start.start(1) :] if start else line)
    block = "\n".join(lines)
    entries: list[tuple[str, str]] = []
    marks = list(FOLDER.finditer(block))
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        body = block[mark.end() : following.start() if following else len(block)]
        depth, flat = 0, []
        for ch in body:
            depth += ch == "("
            flat.append(ch if depth == 0 else "")
            depth -= ch == ")"
        names, _, docs = "".join(flat).partition(";")
        for item in names.split(","):
            for name in item.split(" and "):
                if name.strip():
                    entries.append((mark.group(1), name.strip()))
        entries += [("", path.strip()) for path in docs.split(";") if path.strip()]
    return entries


def test_layout_names_only_modules_that_exist() -> None:
    entries = layout_entries((DOCS / "layout.md").read_text())
    assert len(entries) > 150  # the parser read the tree, not a few lines of it
    missing = []
    for folder, name in entries:
        if not ((REPO / folder / f"{name}.py").is_file() or (REPO / folder / name).exists()):
            missing.append(f"{folder}{name}")
    assert not missing, f"docs/layout.md names modules that are not there: {missing}"


def test_the_layout_parser_sees_a_module_that_is_gone() -> None:
    """The check has teeth: a made-up name in a copy of the tree is reported."""
    text = (DOCS / "layout.md").read_text().replace("answer_plan (", "answer_planner (", 1)
    assert ("runtime/engine/", "answer_planner") in layout_entries(text)


PATH = re.compile(r"(?<![\w./-])((?:runtime|commands|app|converters|installer|tests|docs|assets)/[\w./-]*[\w/])")
DOTTED = re.compile(r"(?<![\w./-])((?:runtime|commands|app|converters)(?:\.[A-Za-z_]\w*)+)")


def dotted_problem(dotted: str) -> str | None:
    """None when `dotted` is a module, or a module and a name in its text (runtime.engine.answer.Stats)."""
    parts = dotted.split(".")
    here = REPO
    for i, part in enumerate(parts):
        if (here / part).is_dir():
            here = here / part
            continue
        module = here / f"{part}.py"
        if module.is_file():
            rest = parts[i + 1 :]
            if rest and not re.search(rf"\b{re.escape(rest[0])}\b", module.read_text()):
                return f"{dotted}: no {rest[0]} in {module.relative_to(REPO)}"
            return None
        if i == len(parts) - 1 or here == REPO:  # a package's attribute, or not ours at all
            init = here / "__init__.py"
            if init.is_file() and re.search(rf"\b{re.escape(part)}\b", init.read_text()):
                return None
        return f"{dotted}: no module {part} in {here.relative_to(REPO)}"
    return None


@pytest.mark.parametrize("doc", ["architecture.md", "layout.md"])
def test_the_design_docs_name_only_paths_and_modules_that_exist(doc: str) -> None:
    text = (DOCS / doc).read_text()
    paths = {p.rstrip(".") for p in PATH.findall(text) if "*" not in p and "NAME" not in p}  # not patterns
    gone = sorted(p for p in paths if not (REPO / p).exists())
    dotted = {d.rstrip(".") for d in DOTTED.findall(text)}
    wrong = sorted(filter(None, (dotted_problem(d) for d in dotted)))
    assert len(paths) + len(dotted) > 10
    assert not gone and not wrong, f"docs/{doc} names what is not there: {gone + wrong}"


def test_no_module_is_over_400_lines() -> None:
    long = {}
    for package in ("runtime", "app", "commands"):
        for path in (REPO / package).rglob("*.py"):
            name = path.relative_to(REPO).as_posix()
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES and name not in STILL_SPLITTING:
                long[name] = lines
    assert not long, f"split these where a reader would look for the parts (at most {MAX_LINES} lines): {long}"
