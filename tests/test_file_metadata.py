"""A GGUF's metadata without its weights (runtime.decode.llama_backend.file_metadata): what `specquant info`,
the window's thinking switch and the API's token counts read the chat template from."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from runtime.decode.llama_backend import LlamaBackend, LoadOptions, file_metadata
from runtime.errors import ModelError, UserError
from runtime.models.cache import ModelDir


def test_the_metadata_is_the_loaded_models_and_the_template_gguf_reads(demo_model: ModelDir) -> None:
    path = demo_model.tier_path("q4_k_m")
    read = file_metadata(path)
    backend = LlamaBackend(path, LoadOptions(n_ctx=256, n_threads=1))
    try:
        assert read == backend.metadata()
    finally:
        backend.close()
    template = gguf.GGUFReader(path).fields["tokenizer.chat_template"].contents()
    assert read["tokenizer.chat_template"] == template and "{%" in template


def test_a_damaged_or_missing_file_is_one_line_naming_it(demo_model: ModelDir, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(demo_model.tier_path("q4_k_m").read_bytes()[:1000])
    with pytest.raises(ModelError, match=r"cut\.gguf") as e:
        file_metadata(cut)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match=r"gone\.gguf"):
        file_metadata(tmp_path / "gone.gguf")
