"""The Discover catalogue: the shipped file, its validation, the fit check, and downloading a catalogue model
(offline: the one-line error, and the HF cache reused when it holds the files)."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import itertools
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.constants
import pytest

from converters import sources
from converters.convert import convert
from converters.hf_to_gguf import ARCHITECTURES
from converters.quantize import QUANT_TYPES, expected_bytes
from runtime.errors import Cancelled, UserError
from runtime.models.cache import list_models
from runtime.plan import catalog

GOOD = {
    "repo": "org/model-1B-Instruct",
    "params": 1_000_000_000,
    "architecture": "LlamaForCausalLM",
    "shape": {"n_layer": 16, "n_embd": 2048, "n_head_kv": 8, "head_dim": 64, "n_vocab": 128256},
    "licence": "Apache-2.0",
    "description": "A model for tests.",
    "revision": "0123456789abcdef0123456789abcdef01234567",
}


def write(path: Path, models: list[object], schema: int = 1) -> Path:
    path.write_text(json.dumps({"schema": schema, "models": models}))
    return path


def go_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF_HUB_OFFLINE=1 and an empty HF_HOME; huggingface_hub reads both at import, so its constants follow."""
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(home / "hub"))
    return home / "hub"


@pytest.fixture
def hf_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return go_offline(tmp_path, monkeypatch)


def cache_snapshot(hub: Path, repo: str, files: Path) -> Path:
    """Lay `files` out as huggingface_hub's cache holds a downloaded repo (refs/main → snapshots/<commit>)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = hub / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    shutil.copytree(files, repo_dir / "snapshots" / commit)
    return repo_dir / "snapshots" / commit


COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub(http.server.ThreadingHTTPServer):
    """The few Hub endpoints `snapshot_download` uses (revision, tree, resolve), serving one repo from a folder
    over localhost, so a real download (huggingface_hub's own HTTP code, our progress bar) runs offline.
    Weights are sent in `piece`-byte writes `delay` seconds apart, so a test can cancel mid-file."""

    def __init__(
        self, repo: str, files: Path, piece: int = 1 << 20, delay: float = 0.0, sizes: dict[str, int] | None = None,
        hashes: dict[str, str] | None = None,
    ) -> None:
        self.repo, self.piece, self.delay, self.sizes = repo, piece, delay, sizes or {}
        self.hashes = hashes or {}  # sha256 the Hub claims for an LFS file, instead of the true one
        self.files = {p.name: p.read_bytes() for p in sorted(files.iterdir()) if p.is_file()}
        self.served = 0  # bytes of file bodies written
        super().__init__(("127.0.0.1", 0), _HubHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def total(self) -> int:
        return sum(len(b) for b in self.files.values())


class _HubHandler(http.server.BaseHTTPRequestHandler):
    server: FakeHub

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _file(self, body: bool) -> None:
        prefix = f"/{self.server.repo}/resolve/{COMMIT}/"
        name = self.path.split("?")[0].removeprefix(prefix)
        data = self.server.files.get(name) if self.path.startswith(prefix) else None
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not body:
            return
        try:
            for i in range(0, len(data), self.server.piece):
                self.wfile.write(data[i : i + self.server.piece])
                self.server.served += len(data[i : i + self.server.piece])
                time.sleep(self.server.delay)
        except (BrokenPipeError, ConnectionResetError):  # the client cancelled
            pass

    def do_HEAD(self) -> None:
        self._file(body=False)

    def do_GET(self) -> None:
        api = f"/api/models/{self.server.repo}"
        path = self.path.split("?")[0]
        if path in (api, f"{api}/revision/main"):
            # With files_metadata (`?blobs=true`) the Hub adds each file's size; `sizes` overrides what is claimed.
            files = self.server.files.items()
            # and, for LFS files (the weights), their sha256 (`hashes` overrides what is claimed).
            siblings = [{"rfilename": n, "size": self.server.sizes.get(n, len(b))} | (
                {"lfs": {"size": len(b), "pointerSize": 134,
                         "sha256": self.server.hashes.get(n, hashlib.sha256(b).hexdigest())}}
                if n.endswith(".safetensors") else {}) for n, b in files]
            self._json({"id": self.server.repo, "sha": COMMIT, "siblings": siblings})
        elif path == f"{api}/tree/{COMMIT}":
            self._json(
                [
                    {"type": "file", "path": n, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                    for n, b in self.server.files.items()
                ]
            )
        else:
            self._file(body=True)


@contextlib.contextmanager
def serve_hub(monkeypatch: pytest.MonkeyPatch, hub_cache: Path, hub: FakeHub) -> Iterator[FakeHub]:
    """Point huggingface_hub at `hub` (online) with its cache in `hub_cache`, for the test's duration."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    template = hub.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 1 << 20)  # progress every megabyte
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    thread = threading.Thread(target=hub.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.shutdown()
        hub.server_close()
        thread.join()


def test_the_shipped_catalogue_holds_real_supported_models() -> None:
    entries = catalog.load_catalog()
    assert 10 <= len(entries) <= 16
    assert tuple(ARCHITECTURES) == catalog.SUPPORTED_ARCHITECTURES  # the converter's list, not a copy that drifts
    for e in entries:
        assert e.architecture in ARCHITECTURES and e.repo.count("/") == 1 and e.licence and e.description
        # instruct models only (Qwen3 and SmolLM3 ship one chat model each, with no "Instruct" in its name)
        assert ("instruct" in e.repo.lower() or e.repo.endswith("-it")
                or e.repo.startswith(("Qwen/Qwen3-", "HuggingFaceTB/SmolLM3-")))
    repos = {e.repo for e in entries}
    assert {"Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "HuggingFaceTB/SmolLM3-3B",
            "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "google/gemma-3-1b-it",
            "google/gemma-3-4b-it", "microsoft/Phi-4-mini-instruct"} <= repos
    assert len({e.repo for e in entries}) == len(entries)
    gated = {e.repo for e in entries if e.gated}
    assert gated == {e.repo for e in entries if e.repo.startswith(("meta-llama/", "google/gemma-"))}
    # every download is pinned to a commit, or the entry says why not (its files are checked by their hashes)
    assert all(len(e.revision) == 40 or (not e.revision and "sha256" in e.unpinned) for e in entries)
    assert [e.params for e in entries] == sorted(e.params for e in entries)
    assert catalog.pinned_revision(entries[0].repo) == entries[0].revision
    assert catalog.pinned_revision("someone/else") is None


def test_tier_sizes_are_the_converters_estimate_from_the_parameter_count() -> None:
    assert catalog.BITS_PER_WEIGHT["q8_0"] == QUANT_TYPES["q8_0"].bits_per_weight
    assert catalog.BITS_PER_WEIGHT["q4_k_m"] == QUANT_TYPES["q4_k_m"].bits_per_weight
    for e in catalog.load_catalog():
        f16 = e.params * 2
        assert e.tier_bytes == {
            "f16": f16,
            "q8_0": expected_bytes(f16, QUANT_TYPES["q8_0"]),
            "q4_k_m": expected_bytes(f16, QUANT_TYPES["q4_k_m"]),
        }
        assert e.download_bytes == max(e.params, e.download_params) * 2
    seven = next(e for e in catalog.load_catalog() if e.repo == "Qwen/Qwen2.5-7B-Instruct")
    assert 15.2e9 < seven.tier_bytes["f16"] < 15.3e9 and 4.6e9 < seven.tier_bytes["q4_k_m"] < 4.7e9
    # Gemma 3 4B downloads its vision tower too; the tiers hold its text model only.
    gemma = next(e for e in catalog.load_catalog() if e.repo == "google/gemma-3-4b-it")
    assert gemma.download_bytes > gemma.tier_bytes["f16"] + 0.8e9


def test_fit_marks_what_this_computer_cannot_hold() -> None:
    seven = next(e for e in catalog.load_catalog() if e.repo == "Qwen/Qwen2.5-7B-Instruct")
    roomy = catalog.fit(seven, ram_bytes=64 * 10**9)
    assert roomy.fits_all and roomy.line.startswith("fits")
    eight = catalog.fit(seven, ram_bytes=8 * 10**9)
    assert eight.tiers == ("q4_k_m",)
    assert eight.line == (
        f"F16 needs {eight.needs['f16'] / 1e9:.1f} GB, this computer has 8.0 GB: only Q4_K_M would fit"
    )
    small = catalog.fit(seven, ram_bytes=2 * 10**9)
    assert small.fits_none and small.line.startswith("too big for this computer: even Q4_K_M needs")
    # The needs are the placement plan's: at exactly F16's need everything fits, a megabyte less and F16 does not.
    need = roomy.needs["f16"]
    assert catalog.fit(seven, ram_bytes=need).fits_all
    assert catalog.fit(seven, ram_bytes=need - 10**6).tiers == ("q8_0", "q4_k_m")
    assert roomy.needs["f16"] > seven.tier_bytes["f16"]  # KV cache, compute buffer and margin come on top


def test_fits_means_the_plan_a_chat_loads_fits() -> None:
    """#63: "fits" sized the F16 tier alone; a chat loads F16 with its Q4_K_M draft (and their KV caches)."""
    model = next(e for e in catalog.load_catalog() if e.repo == "Qwen/Qwen2.5-1.5B-Instruct")
    roomy = catalog.fit(model, ram_bytes=64 * 10**9)
    assert roomy.plan_need >= roomy.needs["f16"] + model.tier_bytes["q4_k_m"]  # the draft's file comes on top
    assert roomy.fits_plan and roomy.line.startswith("fits: F16 with its draft needs")
    exact = catalog.fit(model, ram_bytes=roomy.plan_need)
    assert exact.fits_plan
    short = catalog.fit(model, ram_bytes=roomy.plan_need - 10**6)
    assert short.fits_all and not short.fits_plan and "without the draft's speed-up" in short.line
    assert catalog.better_model(roomy.plan_need - 10**6) != model  # the demo's offer is a model that fits whole


def test_fit_reads_this_computers_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    class Memory:
        total = 4 * 10**9

    monkeypatch.setattr(catalog.psutil, "virtual_memory", lambda: Memory())
    seven = next(e for e in catalog.load_catalog() if e.repo == "Qwen/Qwen2.5-7B-Instruct")
    assert catalog.fit(seven).fits_none and "this computer has 4.0 GB" in catalog.fit(seven).line


@pytest.mark.parametrize(
    ("models", "needle"),
    [
        ([GOOD, {**GOOD, "repo": "org/b", "params": "1B"}], "entry 2 (org/b): 'params' must be a whole number"),
        ([GOOD, {**GOOD, "repo": "org/b", "architecture": "GPT2LMHeadModel"}], "entry 2 (org/b): architecture"),
        ([{k: v for k, v in GOOD.items() if k != "licence"}], "entry 1 (org/model-1B-Instruct): 'licence' is missing"),
        ([{**GOOD, "repo": "not a repo"}], "entry 1 (not a repo): 'repo' 'not a repo' is not a Hugging Face repo id"),
        ([GOOD, GOOD], "entry 2 (org/model-1B-Instruct): org/model-1B-Instruct is listed twice"),
        ([{**GOOD, "shape": {**GOOD["shape"], "n_layer": 0}}], "entry 1 (org/model-1B-Instruct): 'shape.n_layer'"),
        ([{**GOOD, "description": "two\nlines"}], "'description' must be one non-empty line"),
        ([42], "entry 1: must be an object"),
        ([{**GOOD, "revision": "main"}], "entry 1 (org/model-1B-Instruct): 'revision' 'main' is not a 40-character"),
        ([{k: v for k, v in GOOD.items() if k != "revision"}], "'revision' is missing"),
        ([{**{k: v for k, v in GOOD.items() if k != "revision"}, "unpinned": " "}], "'revision' is missing"),
    ],
)
def test_a_malformed_catalogue_is_one_line_naming_the_file_and_entry(
    tmp_path: Path, models: list[object], needle: str
) -> None:
    path = write(tmp_path / "catalog.json", models)
    with pytest.raises(UserError) as e:
        catalog.load_catalog(path)
    assert str(e.value).startswith(f"{path}: ") and needle in str(e.value) and "\n" not in str(e.value)


def test_an_entry_without_a_commit_says_why(tmp_path: Path) -> None:
    raw = {k: v for k, v in GOOD.items() if k != "revision"} | {"unpinned": "written offline"}
    (entry,) = catalog.load_catalog(write(tmp_path / "catalog.json", [raw]))
    assert entry.revision == "" and entry.unpinned == "written offline"
    assert catalog.pinned_revision(entry.repo, tmp_path / "catalog.json") is None  # a download takes main


def test_a_catalogue_that_is_not_json_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text('{"schema": 1,\n "models": [,]}')
    with pytest.raises(UserError, match=r"catalog\.json: not valid JSON \(line 2, column 13"):
        catalog.load_catalog(path)
    with pytest.raises(UserError, match="cannot read the model catalogue"):
        catalog.load_catalog(tmp_path / "missing.json")
    with pytest.raises(UserError, match="schema 2 is not 1"):
        catalog.load_catalog(write(path, [GOOD], schema=2))


def test_eta_text() -> None:
    assert catalog.eta_text(0, 3_090_000_000, 0) == "0 MB of 3.09 GB"
    assert catalog.eta_text(1_000_000_000, 3_000_000_000, 50) == "1.00 GB of 3.00 GB, 1 min 40 s left"
    assert catalog.eta_text(900_000_000, 1_000_000_000, 9) == "900 MB of 1.00 GB, 1 s left"
    assert catalog.eta_text(5_000_000, 0, 1) == "5 MB"


def test_offline_download_is_one_line_and_leaves_nothing(hf_offline: Path, isolated_cache: Path) -> None:
    repo = catalog.load_catalog()[0].repo
    seen: list[tuple[int, int]] = []
    with pytest.raises(UserError) as e:
        sources.download(repo, lambda done, total: seen.append((done, total)), threading.Event())
    line = str(e.value)
    assert line.startswith(f"{repo} is not in the Hugging Face cache and cannot be downloaded (offline")
    assert "\n" not in line and not seen
    with pytest.raises(UserError, match="is not in the Hugging Face cache"):
        convert(repo)  # the conversion's own resolve says the same
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())


@pytest.mark.slow
def test_the_hf_cache_is_reused_offline(hf_offline: Path, isolated_cache: Path, micro_hf: Path) -> None:
    snapshot = cache_snapshot(hf_offline, "test-org/Micro-Instruct", micro_hf)
    assert sources.download("test-org/Micro-Instruct", lambda *a: None, threading.Event()) == snapshot
    manifest = convert("test-org/Micro-Instruct")
    assert manifest["complete"] and manifest["source"]["kind"] == "hf_repo"
    assert manifest["source"]["ref"] == "test-org/Micro-Instruct" and set(manifest["tiers"]) == set(catalog.TIERS)
    assert [m.name for m in list_models(isolated_cache) if m.complete] == ["micro-instruct"]


def test_a_cancelled_download_raises_cancelled(hf_offline: Path, isolated_cache: Path, micro_hf: Path) -> None:
    cache_snapshot(hf_offline, "test-org/Micro-Instruct", micro_hf)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        sources.download("test-org/Micro-Instruct", None, cancel)
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())


@pytest.mark.slow
def test_a_download_reports_its_bytes_and_then_converts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path, micro_hf: Path
) -> None:
    with serve_hub(monkeypatch, tmp_path / "hub", FakeHub("test-org/Micro-Instruct", micro_hf)) as hub:
        seen: list[tuple[int, int]] = []
        path = sources.download("test-org/Micro-Instruct", lambda done, total: seen.append((done, total)))
        assert sorted(p.name for p in path.iterdir()) == sorted(hub.files)
        assert seen[-1] == (hub.total, hub.total) and len(seen) > 3  # every megabyte, to the last byte
        assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))
        manifest = convert("test-org/Micro-Instruct")
    assert manifest["complete"] and manifest["source"]["kind"] == "hf_repo"


def test_cancel_stops_a_download_midway_and_leaves_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path, micro_hf: Path
) -> None:
    slow = FakeHub("test-org/Micro-Instruct", micro_hf, piece=256 * 1024, delay=0.05)
    with serve_hub(monkeypatch, tmp_path / "hub", slow) as hub:
        cancel = threading.Event()

        def on_bytes(done: int, total: int) -> None:
            if done >= 2 << 20:
                cancel.set()

        with pytest.raises(Cancelled):
            sources.download("test-org/Micro-Instruct", on_bytes, cancel)
        assert hub.served < hub.total  # stopped within the file, not after it
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())


def test_a_downloaded_file_that_does_not_match_the_hubs_sha256_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path, micro_hf: Path
) -> None:
    wrong = {"model.safetensors": "0" * 64}  # the Hub publishes another file than the one that arrives
    hub = FakeHub("test-org/Micro-Instruct", micro_hf, hashes=wrong)
    with serve_hub(monkeypatch, tmp_path / "hub", hub), pytest.raises(UserError) as e:
        sources.download("test-org/Micro-Instruct")
    line = str(e.value)
    assert line.startswith("test-org/Micro-Instruct: model.safetensors has sha256 ") and "0" * 64 in line
    assert "\n" not in line
    with serve_hub(monkeypatch, tmp_path / "hub2", FakeHub("test-org/Micro-Instruct", micro_hf)):
        assert (sources.download("test-org/Micro-Instruct") / "model.safetensors").is_file()  # the true hash


def test_the_download_space_check_decides_from_sizes_and_the_folders_free_space(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    catalog.check_download_space({"model.safetensors": 1000, "config.json": 10}, tmp_path, "org/small")
    catalog.check_download_space({}, tmp_path, "org/cached")  # all in the HF cache already: nothing to check
    # A folder that does not exist yet (a first download) is judged by the volume it will be made on.
    catalog.check_download_space({"a.safetensors": 1000}, tmp_path / "hub" / "not-yet", "org/small")
    with pytest.raises(UserError) as e:
        catalog.check_download_space({"a.safetensors": free, "b.safetensors": 1}, tmp_path / "hub", "org/huge")
    line = str(e.value)
    assert line.startswith("not enough disk space to download org/huge: its 2 files need ") and "\n" not in line
    assert f"in {tmp_path / 'hub'}" in line and line.endswith(" free")
    # The margin counts: exactly the free space is not enough.
    with pytest.raises(UserError, match="not enough disk space"):
        catalog.check_download_space({"a.safetensors": free - catalog.DOWNLOAD_MARGIN + 1}, tmp_path, "org/edge")


def test_a_download_larger_than_the_free_space_is_refused_before_its_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path, micro_hf: Path
) -> None:
    claimed = {"model.safetensors": shutil.disk_usage(tmp_path).free * 2}  # what the Hub's metadata says
    with serve_hub(monkeypatch, tmp_path / "hub", FakeHub("test-org/Micro-Instruct", micro_hf, sizes=claimed)) as hub:
        with pytest.raises(UserError, match="not enough disk space to download test-org/Micro-Instruct"):
            sources.download("test-org/Micro-Instruct", lambda *a: None)
        assert hub.served == 0
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())
