"""Shared fixtures: the demo model, a converted demo cache, micro models and a CLI runner."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from converters.convert import convert
from converters.sources import demo_gguf as find_demo_gguf
from runtime.models.cache import DEMO_NAME, TIERS, ModelDir
from tests.micro_model import MicroSpec, write_micro_gguf

REPO = Path(__file__).resolve().parents[1]
# Without a display Qt aborts the whole process (rc 134) instead of failing a test: render offscreen.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Tests in files other people own that write a demo tier in place (through `demo_cache`): each gets its own
# copy of the tiers named, as `@pytest.mark.demo_copy(...)` would give it (see `demo_cache`).
WRITES_DEMO_TIERS = {"tests/test_app.py::test_damaged_model_shows_a_banner_and_the_app_stays_usable": ("f16",)}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "demo_copy(*tiers): `demo_cache` gives this test its own copy of the demo tiers named (all without names), "
        "not hard links to the session's: for a test that writes a tier in place",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tiers = WRITES_DEMO_TIERS.get(item.nodeid.split("[")[0])
        if tiers is not None:
            item.add_marker(pytest.mark.demo_copy(*tiers))


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty model cache, data folder (chats, documents) and config folder (presets,
    MCP servers): the user's are never read or touched."""
    root = tmp_path / "cache"
    monkeypatch.setenv("SPECQUANT_CACHE_DIR", str(root))
    monkeypatch.setenv("SPECQUANT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPECQUANT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECQUANT_PROMPT_STATES_DIR", str(tmp_path / "prompt-states"))
    return root


@pytest.fixture(autouse=True)
def isolated_logging() -> Iterator[None]:
    """A test that runs a command in-process (commands.main.main) points the root logger at the stderr that
    pytest captured for it; later tests must not log into that closed stream, nor read its lines as theirs."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def demo_gguf() -> Path:
    return find_demo_gguf()


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelDir]:
    """The demo model converted once per test run into a session cache (three verified tiers). Read it, or
    copy it (`demo_cache`, `copy_of_demo`) to answer with it: answers save estimates in the model's folder."""
    root = tmp_path_factory.mktemp("demo-cache")
    convert("demo", root=root)
    # The machine's costs, measured once here as the first answer on a machine would: every copy starts
    # from the same probe (tests never read estimates that another test's answers wrote).
    from runtime.engine.engine import Engine

    engine = Engine(DEMO_NAME, root=root)
    try:
        engine.costs("f16", ["q8_0", "q4_k_m"])
    finally:
        engine.close()
    model = ModelDir(root, DEMO_NAME)
    # What each tier keeps of F16's words, measured once as `specquant convert` does: `info` reads it.
    from runtime.plan import quality

    quality.load_or_measure(model)
    saved = {p.name: p.read_bytes() for p in model.path.glob("*.json")}  # the manifest and the costs
    tiers = tier_stamps(model)
    yield model
    # A tripwire: what a test's answers save here (controller.json, calibration.json, new costs) would be
    # read by every later test that copies the demo.
    now = {p.name: p.read_bytes() for p in model.path.glob("*.json")}
    changed = sorted(name for name in saved.keys() | now.keys() if saved.get(name) != now.get(name))
    assert not changed, f"a test wrote {changed} into the shared demo cache: answer in a copy (demo_cache)"
    assert tier_stamps(model) == tiers, "a test wrote a tier in place through a hard link (use demo_copy)"


def tier_stamps(model: ModelDir) -> dict[str, tuple[int, int]]:
    """Each tier file's size and modification time: a write in place changes them, through any hard link."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(model.path.glob("*.gguf"))}


@pytest.fixture
def demo_cache(demo_model: ModelDir, isolated_cache: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The user's cache holds the converted demo model (a copy, so tests cannot disturb each other; its tiers
    hard links unless the test is marked `demo_copy`)."""
    mark = request.node.get_closest_marker("demo_copy")
    own = (mark.args or TIERS) if mark is not None else ()
    before = tier_stamps(demo_model)
    yield copy_of_demo(demo_model, isolated_cache, own)
    assert tier_stamps(demo_model) == before, (
        f"{request.node.nodeid} wrote a demo tier in place through a hard link into the session's demo: "
        "mark it @pytest.mark.demo_copy(tier)"
    )


def copy_of_demo(demo_model: ModelDir, root: Path, own: Collection[str] = ()) -> Path:
    """`root` as a cache holding a copy of the demo model: what answers write there stays there. Its tiers are
    hard links to the session's (about 0.5 GB a copy, once per test): answers only read a tier, and the cache
    replaces one by renaming a new file onto it, which leaves the session's as it was. `own` names the tiers
    that are copied instead, for a test that damages one in place; the manifest, the costs and anything else
    are always copied (tests and answers write those in place)."""
    target = root / demo_model.name
    target.mkdir(parents=True)
    for src in sorted(demo_model.path.iterdir()):
        if src.is_dir():
            shutil.copytree(src, target / src.name)
            continue
        if src.suffix == ".gguf" and src.stem not in own:
            try:
                os.link(src, target / src.name)
                continue
            except OSError:  # a file system without hard links: a copy
                pass
        shutil.copy2(src, target / src.name)
    return root


@contextlib.contextmanager
def engine_on_copy(demo_model: ModelDir, folder: Path, settings: Any = None) -> Iterator[Any]:
    """An Engine (default settings unless given) on `folder`'s private copy of the demo cache (`copy_of_demo`):
    what its answers save stays there. For a module's own engine fixture."""
    from runtime.engine.engine import Engine, EngineSettings

    engine = Engine(DEMO_NAME, settings or EngineSettings(), root=copy_of_demo(demo_model, folder / "cache"))
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="session")
def api_server(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One `specquant serve` on its own copy of the demo, shared by the structured-output and tool-call tests
    (a server takes about 20 s to start on 2 cores)."""
    from tests.test_server import Served

    # F16's words (`--preset exact`): these tests compare answers to the same prompt across requests, and F16's
    # batched verify gives a single step's tokens, while the default's Q4_K_M parent can round a near-tie
    # differently when a repeat drafts (docs/benchmarks.md, 2026-12-07). The default is tested by test_presets.
    # `--ctx 4096`: a chat trimmed to the context is read whole, and serve's planned context (8,192 on the demo,
    # tests/test_context_plan.py) would double that read on a busy CPU without testing anything more here.
    server = Served(copy_of_demo(demo_model, tmp_path_factory.mktemp("api") / "cache"), "--preset", "exact",
                    "--ctx", "4096")
    yield server
    assert server.stop() == 0, server.stderr()


@pytest.fixture(scope="session")
def micro_gguf(tmp_path_factory: pytest.TempPathFactory, demo_gguf: Path) -> Path:
    """A tiny random llama F16 GGUF (hidden 256, so Q4_K really applies) with the demo tokenizer."""
    return write_micro_gguf(tmp_path_factory.mktemp("micro") / "micro-f16.gguf", demo_gguf, MicroSpec())


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600, memory: int | None = None
) -> subprocess.CompletedProcess[str]:
    """`specquant ARGS` in a child process, as a user would run it; with `memory`, allowed that many bytes of
    address space (where the OS can limit it)."""
    full_env = dict(os.environ)
    full_env.update(env or {})

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [sys.executable, "-m", "commands", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=timeout,
        preexec_fn=limit if memory is not None and sys.platform != "win32" else None,
    )


def run_cli_here(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`specquant ARGS` in this process (`env` set for the call): the same exit code, stdout and stderr as
    `run_cli`, without a child's interpreter start (about 1.5 s each on 2 cores). For batteries of bad-input
    cases, whose file keeps `run_cli` for the command as a user runs it; an escaping exception fails the test as
    a traceback would. `isolated_logging` undoes the command's logging set-up."""
    import contextlib
    import io
    from unittest import mock

    from commands import main as cli

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as e:  # argparse's own refusals exit
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return subprocess.CompletedProcess([sys.executable, "-m", "commands", *args], code, out.getvalue(), err.getvalue())


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, exactly one stderr line naming the problem, and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="session")
def micro_hf(tmp_path_factory: pytest.TempPathFactory, micro_gguf: Path) -> Iterator[Path]:
    """The micro model as a Hugging Face checkpoint (config, tokenizer, safetensors), written once per run:
    read it, or copy it to change it (a hard link to its weights shares their bytes: never write through one)."""
    from tests.hf_export import export_to_hf

    out = export_to_hf(micro_gguf, tmp_path_factory.mktemp("micro-hf") / "micro")
    stamps = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(out.iterdir())}
    yield out
    now = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(out.iterdir())}
    assert now == stamps, "a test changed the session's micro checkpoint (micro_hf): change a copy"


@pytest.fixture(scope="session")
def micro_model(tmp_path_factory: pytest.TempPathFactory, micro_gguf: Path) -> ModelDir:
    """The micro model's three tiers: its f16 and q4_k_m disagree often, so rejections really happen."""
    root = tmp_path_factory.mktemp("micro-cache")
    manifest = convert(str(micro_gguf), name="micro", root=root)
    return ModelDir(root, manifest["name"])
