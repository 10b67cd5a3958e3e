"""Shared fixtures: the demo model, a converted demo cache, micro models and a CLI runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from converters.convert import convert
from converters.sources import demo_gguf as find_demo_gguf
from runtime.models.cache import DEMO_NAME, ModelDir
from tests.micro_model import MicroSpec, write_micro_gguf

REPO = Path(__file__).resolve().parents[1]
# Without a display Qt aborts the whole process (rc 134) instead of failing a test: render offscreen.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty model cache; the user's is never touched."""
    root = tmp_path / "cache"
    monkeypatch.setenv("SPECQUANT_CACHE_DIR", str(root))
    return root


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
    saved = {p.name: p.read_bytes() for p in model.path.glob("*.json")}  # the manifest and the costs
    yield model
    # A tripwire: what a test's answers save here (controller.json, calibration.json, new costs) would be
    # read by every later test that copies the demo.
    now = {p.name: p.read_bytes() for p in model.path.glob("*.json")}
    changed = sorted(name for name in saved.keys() | now.keys() if saved.get(name) != now.get(name))
    assert not changed, f"a test wrote {changed} into the shared demo cache: answer in a copy (demo_cache)"


@pytest.fixture
def demo_cache(demo_model: ModelDir, isolated_cache: Path) -> Path:
    """The user's cache holds the converted demo model (a copy, so tests cannot disturb each other)."""
    return copy_of_demo(demo_model, isolated_cache)


def copy_of_demo(demo_model: ModelDir, root: Path) -> Path:
    """`root` as a cache holding a copy of the demo model: what answers write there stays there."""
    shutil.copytree(demo_model.path, root / demo_model.name)
    return root


@pytest.fixture(scope="session")
def api_server(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One `specquant serve` on its own copy of the demo, shared by the structured-output and tool-call tests
    (a server takes about 20 s to start on 2 cores)."""
    from tests.test_server import Served

    server = Served(copy_of_demo(demo_model, tmp_path_factory.mktemp("api") / "cache"))
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
        [sys.executable, "-m", "runtime.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=timeout,
        preexec_fn=limit if memory is not None and sys.platform != "win32" else None,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, exactly one stderr line naming the problem, and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="session")
def micro_model(tmp_path_factory: pytest.TempPathFactory, micro_gguf: Path) -> ModelDir:
    """The micro model's three tiers: its f16 and q4_k_m disagree often, so rejections really happen."""
    root = tmp_path_factory.mktemp("micro-cache")
    manifest = convert(str(micro_gguf), name="micro", root=root)
    return ModelDir(root, manifest["name"])
