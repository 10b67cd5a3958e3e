"""The Engine on the demo model: presets, multi-turn reuse, cancel, overflow, unicode, damaged tiers."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.decode.sampling import SamplingParams
from runtime.decode.text_stream import TextStream, split_stop
from runtime.engine.engine import ChatOptions, Engine, EngineSettings
from runtime.engine.prompt import fit_context
from runtime.engine.thread import reading_text
from runtime.errors import Cancelled, ContextTooLong, UserError
from runtime.models.cache import DEMO_NAME, ModelDir
from tests.conftest import copy_of_demo

LOW = "What is AI?"
HIGH = "Analyze the impact of climate change on global agriculture and suggest mitigation strategies."


@pytest.fixture(scope="module")
def root(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the demo cache for this module's Engines: the estimates their answers save stay here."""
    return copy_of_demo(demo_model, tmp_path_factory.mktemp("engine") / "cache")


@pytest.fixture(scope="module")
def engine(root: Path):
    e = Engine(DEMO_NAME, EngineSettings(n_ctx=2048), root=root)
    yield e
    e.close()


def collect(engine: Engine, messages, options=None, cancel=None):
    chunks = list(engine.stream_chat(messages, options or ChatOptions(max_tokens=48), cancel))
    return "".join(c.text for c in chunks), chunks


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_choice_follows_router_and_preset(engine: Engine) -> None:
    # The default before this machine is measured: fast (Q4_K_M's words, free drafts) at every level (#61).
    _, low = collect(engine, user(LOW), ChatOptions(max_tokens=4))
    assert low[-1].route.level == "low" and low[-1].choice.label == "Q4_K_M ← n-gram"
    assert low[-1].choice.preset == "fast"
    _, low = collect(engine, user(LOW), ChatOptions(preset="exact", max_tokens=4))
    assert low[-1].route.level == "low" and low[-1].choice.label == "F16 ← Q4_K_M"
    _, high = collect(engine, user(HIGH), ChatOptions(preset="exact", max_tokens=4))
    # F16-exact at every level: speculation changes only the speed, so a high level keeps its drafts.
    assert high[-1].route.level == "high" and high[-1].choice.label == "F16 ← Q4_K_M" and high[-1].choice.ngram
    _, lookup = collect(engine, user(HIGH), ChatOptions(preset="exact", max_tokens=4, draft="ngram"))
    assert lookup[-1].choice.label == "F16 ← n-gram"
    _, balanced = collect(engine, user(HIGH), ChatOptions(preset="balanced", max_tokens=4))
    assert balanced[-1].choice.label == "Q8_0 ← Q4_K_M" and balanced[-1].choice.ngram
    # Under the default, a pinned draft tier asks for a parent it can draft for: exact's.
    _, drafted = collect(engine, user(HIGH), ChatOptions(max_tokens=4, draft="q4_k_m"))
    assert drafted[-1].choice.label == "F16 ← Q4_K_M" and "needs a more precise parent" in drafted[-1].choice.why
    _, paper = collect(engine, user(LOW), ChatOptions(max_tokens=4, preset="paper"))
    assert paper[-1].choice.label == "Q8_0 ← Q4_K_M"
    _, pinned = collect(engine, user(HIGH), ChatOptions(preset="exact", max_tokens=4, level="low", no_spec=True))
    assert pinned[-1].choice.label == "F16" and "pinned" in pinned[-1].choice.why
    assert pinned[-1].route.level == "low" and "router judged it high" in pinned[-1].route.reason


def test_stream_then_stats(engine: Engine) -> None:
    text, chunks = collect(engine, user("Name three primary colors."), ChatOptions(max_tokens=48, draft="q4_k_m", k=3))
    assert len(chunks) >= 3 and chunks[-1].done and not any(c.done for c in chunks[:-1])
    stats = chunks[-1].stats
    assert stats.tokens > 0 and text.strip()
    assert stats.stop_reason in ("eos", "max_tokens")
    assert stats.drafted > 0 and 0 <= stats.acceptance <= 1


def test_draft_characters_match_the_accepted_draft_tokens(engine: Engine) -> None:
    """Per-character draft flags (the window highlights them) cover exactly the accepted draft tokens' text."""
    parent = engine.backend("f16")
    options = ChatOptions(max_tokens=40, draft="q4_k_m", k=3)  # a fixed k: the draft runs every cycle
    _, chunks = collect(engine, user("Name three primary colors."), options)
    assert all(len(c.draft_chars) == len(c.text) for c in chunks)
    flagged = sum(sum(c.draft_chars) for c in chunks)
    pairs = [(t, f) for c in chunks for t, f in zip(c.tokens, c.from_draft, strict=True)]
    draft_text = b"".join(parent.token_bytes(t) for t, f in pairs if f)
    assert chunks[-1].stats.accepted > 0 and flagged == len(draft_text.decode("utf-8", errors="replace"))


def test_multi_turn_reuses_the_prefix(engine: Engine) -> None:
    # Greedy: a sampled answer now and then re-tokenizes differently from the tokens that were drawn (then
    # only the part before the difference can be reused), so the test would pass or fail by chance.
    greedy = ChatOptions(max_tokens=48, sampling=SamplingParams())
    first_text, first = collect(engine, user("My name is Ada. Say hello."), greedy)
    history = [
        *user("My name is Ada. Say hello."),
        {"role": "assistant", "content": first_text},
        *user("What is my name?"),
    ]
    _, second = collect(engine, history, greedy)
    s = second[-1].stats
    assert s.reused_tokens >= first[-1].stats.prompt_tokens
    assert s.prompt_tokens - s.reused_tokens < s.prompt_tokens / 2  # far fewer tokens decoded on turn two


def test_cancel_mid_answer_then_next_turn_is_normal(engine: Engine) -> None:
    cancel = threading.Event()
    chunks = []
    for chunk in engine.stream_chat(user("Tell me a long story about dragons."), ChatOptions(max_tokens=200), cancel):
        chunks.append(chunk)
        if len(chunks) == 2:
            cancel.set()
    assert chunks[-1].done and chunks[-1].stats.stop_reason == "cancelled"
    assert chunks[-1].stats.tokens < 200
    seeded = ChatOptions(max_tokens=24, no_spec=True, sampling_overrides=(("seed", 0),))
    again, _ = collect(engine, user("Name three primary colors."), seeded)
    fresh = Engine(DEMO_NAME, EngineSettings(n_ctx=2048), root=engine.model.root)
    want, _ = collect(fresh, user("Name three primary colors."), seeded)
    fresh.close()
    assert again == want


def test_cancel_during_a_long_prefill(engine: Engine) -> None:
    """Stop pressed while llama.cpp computes the prompt: its abort hook ends the decode there. The Stop comes
    from inside the prefill itself (once its first batch is in the cache and the next is being computed), not
    from a timer, so the test does not depend on how fast this machine prefills."""
    long_prompt = "Summarize this: " + "The quick brown fox jumps over the lazy dog. " * 150
    cancel = threading.Event()
    parent = engine.backend("f16")
    calls = []
    real = parent._llama_cpp

    class PressStopDuringTheSecondBatch:
        def __getattr__(self, name: str):
            return getattr(real, name)

        def llama_decode(self, ctx, batch):
            calls.append(parent.n_past)
            if len(calls) == 2:  # the first batch of the prompt is in the cache; this one is being computed
                cancel.set()
            return real.llama_decode(ctx, batch)

    parent._llama_cpp = PressStopDuringTheSecondBatch()
    try:
        _, chunks = collect(engine, user(long_prompt), ChatOptions(preset="exact", max_tokens=8, no_spec=True), cancel)
    finally:
        parent._llama_cpp = real
    assert len(calls) == 2 and calls[1] > calls[0] and cancel.is_set()  # one batch in, none after the Stop
    assert chunks[-1].stats.stop_reason == "cancelled" and chunks[-1].stats.tokens == 0
    # Stopped inside the prefill (llama.cpp's abort hook), not after it: the prompt is not all cached.
    assert parent.n_past < chunks[-1].stats.prompt_tokens - 1
    text, after = collect(engine, user("Say yes."), ChatOptions(max_tokens=8))
    assert after[-1].stats.tokens > 0 and text.strip()


def test_context_overflow_drops_oldest_turns_but_keeps_system(root: Path) -> None:
    small = Engine(DEMO_NAME, EngineSettings(n_ctx=512), root=root)
    try:
        filler = "This is a long earlier message about many unrelated things. " * 12
        messages = [{"role": "system", "content": "You are terse."}]
        for i in range(6):
            messages += [{"role": "user", "content": f"{i}: {filler}"}, {"role": "assistant", "content": "Noted."}]
        messages += user("Reply with OK.")
        _, chunks = collect(small, messages, ChatOptions(max_tokens=16))
        assert chunks[-1].stats.dropped_turns > 0
        assert chunks[-1].stats.prompt_tokens + 16 <= 512
        with pytest.raises(ContextTooLong, match="allow dropping its oldest turns"):  # the API's default
            collect(small, messages, ChatOptions(max_tokens=16, trim=False))
        with pytest.raises(UserError, match="the context holds 512"):
            collect(small, user("word " * 1000), ChatOptions(max_tokens=16))
    finally:
        small.close()


class CountingEngine(Engine):
    """The real Engine, counting how often it renders a whole chat."""

    renders = 0

    def render(self, parent, messages, tools=None):  # type: ignore[no-untyped-def]
        self.renders += 1
        return super().render(parent, messages, tools)


def test_a_flood_of_turns_is_fitted_in_a_few_renders_dropping_only_what_it_must(root: Path) -> None:
    small = CountingEngine(DEMO_NAME, EngineSettings(n_ctx=512), root=root)
    try:
        parent = small.backend("f16")
        messages = [{"role": "system", "content": "You are terse."}]
        for i in range(500):
            messages += [{"role": "user", "content": f"Turn {i}: tell me more."}]
            messages += [{"role": "assistant", "content": "Ok."}]
        messages += user("Reply with OK.")
        tokens, dropped = fit_context(small.render, parent, messages, 64)
        assert small.renders <= 4  # linear: not one render per dropped turn (the old loop made ~1000)
        assert len(tokens) <= 512 - 64
        # The fewest turns: keeping one more would not fit.
        assert len(Engine.render(small, parent, messages[:1] + messages[dropped:])) > 512 - 64
        stop = threading.Event()
        stop.set()
        with pytest.raises(Cancelled):
            fit_context(small.render, parent, messages, 64, stop)
    finally:
        small.close()


def test_without_a_seed_each_answer_samples_anew_and_a_seed_repeats_plain_decoding(engine: Engine) -> None:
    poem = user("Write a poem about the sea.")
    sampled = ChatOptions(max_tokens=24, no_spec=True, sampling_overrides=(("temperature", 1.0),))
    assert collect(engine, poem, sampled)[0] != collect(engine, poem, sampled)[0]  # Regenerate samples anew
    seeded = replace(sampled, sampling_overrides=(("temperature", 1.0), ("seed", 2**64 - 1)))
    texts = []
    for _ in range(2):
        engine.reset_caches()  # the same prefill each time: a reused prefix may round differently
        texts.append(collect(engine, poem, seeded)[0])
    assert texts[0] == texts[1]
    for bad in (-1, 2**64):
        with pytest.raises(UserError, match="seed"):
            ChatOptions(sampling_overrides=(("seed", bad),))


def test_unicode_is_never_split(engine: Engine) -> None:
    prompt = "Repeat exactly: 日本語のテキスト 👍🏽 Grüße ✨"
    # The demo's byte-level vocabulary spells these characters in pieces; streamed a token at a time, no piece
    # is ever shown as a half character.
    backend = engine.backend("q4_k_m")
    tokens = backend.tokenize(prompt, special=False)
    halves = [t for t in tokens if "\ufffd" in backend.token_bytes(t).decode("utf-8", errors="replace")]
    assert len(halves) >= 4  # the characters really are split across tokens
    stream = TextStream(backend.token_bytes)
    pieces = [stream.add([t], [False])[0] for t in tokens]
    assert all("\ufffd" not in piece for piece in pieces) and "".join(pieces) + stream.finish()[0] == prompt
    # A sampled byte-level model may itself emit invalid UTF-8, and which bytes it draws depends on the CPU's
    # rounding: so the test compares the stream with the whole answer decoded at once. A character split between
    # two chunks would show as two U+FFFD in the stream where the whole decode has the character.
    seeded = (("seed", 0),)
    both = (ChatOptions(max_tokens=40, sampling_overrides=seeded), ChatOptions(max_tokens=40, no_spec=True))
    for options in (both[0], replace(both[1], sampling_overrides=seeded)):
        text, chunks = collect(engine, user(prompt), options)
        tokens = [t for c in chunks for t in c.tokens]
        parent = engine.backend(chunks[-1].choice.parent)
        whole = parent.detokenize(tokens)
        assert text == whole


def test_stop_strings_are_held_back_and_cut() -> None:
    assert split_stop("hello wor", ["world"]) == ("hello ", "wor", False)
    assert split_stop("hello world!", ["world"]) == ("hello ", "", True)
    assert split_stop("plain", []) == ("plain", "", False)


def test_damaged_tier_is_a_clear_error(demo_model: ModelDir, tmp_path: Path) -> None:
    copy_of_demo(demo_model, tmp_path, own=("q4_k_m",))  # its own q4_k_m, cut short in place
    with open(tmp_path / DEMO_NAME / "q4_k_m.gguf", "r+b") as f:
        f.truncate(1000)
    # Refused when the model is opened, before anything is unloaded to make room for it (#59), in one line.
    with pytest.raises(UserError, match=r"q4_k_m\.gguf is missing or damaged: run `specquant convert`"):
        Engine(DEMO_NAME, root=tmp_path)


def test_unknown_model_is_a_clear_error(root: Path) -> None:
    with pytest.raises(UserError, match="no model 'nope'"):
        Engine("nope", root=root)


def test_a_prompt_prefix_is_reused_only_under_the_same_cache_key(engine: Engine) -> None:
    """How fast an answer starts must not tell one party what another asked (ChatOptions.cache_key)."""
    greedy = ChatOptions(max_tokens=4, sampling=SamplingParams())
    ask = user("Tell me about the moon and its phases.")
    collect(engine, ask, replace(greedy, cache_key="window"))
    _, other = collect(engine, ask, replace(greedy, cache_key="api"))
    assert other[-1].stats.reused_tokens == 0
    _, same = collect(engine, ask, replace(greedy, cache_key="api"))
    assert same[-1].stats.reused_tokens == same[-1].stats.prompt_tokens - 1


def test_a_finished_answers_cancel_does_not_abort_a_later_cost_probe(engine: Engine) -> None:
    """The false 503s: the server sets a request's cancel event as the request ends; a cost probe that decodes
    before the next answer must not be aborted by it."""
    cancel = threading.Event()
    collect(engine, user("Say hi."), ChatOptions(max_tokens=4, sampling=SamplingParams()), cancel)
    cancel.set()
    costs, cached = engine.costs("f16", ["q8_0"], refresh=True)
    assert not cached and costs.c["q8_0"] > 0


def test_costs_measured_under_load_are_measured_again_at_most_once_in_a_while(engine: Engine) -> None:
    """An answer that ran much faster than the costs said marks them stale; under a load that comes and goes
    every answer would do so, and each re-measurement costs seconds: once per REMEASURE_S at most."""
    engine.measurements._measured_at.clear()
    engine.measurements.mark_stale("f16")
    assert engine.costs("f16")[1] is False  # measured again
    engine.measurements.mark_stale("f16")
    assert engine.costs("f16")[1] is True  # just measured: kept


def test_the_wait_before_the_first_token_names_the_tokens_to_read_and_learns_the_speed(engine: Engine) -> None:
    """`on_reading` gets the prompt's tokens that are not cached; an answer that read enough of them teaches
    the engine its reading speed, which the next wait's estimate uses (the window's "Reading … (about 40 s)")."""
    engine.reset_caches()
    engine.read_rate = None
    told: list[tuple[int, float | None]] = []
    long = user("Summarise this: " + " ".join(f"item {i} is on shelf {i % 7}." for i in range(60)))
    chunks = list(engine.stream_chat(long, ChatOptions(max_tokens=4), on_reading=lambda n, r: told.append((n, r))))
    s = chunks[-1].stats
    assert told == [(s.prompt_tokens - s.reused_tokens, None)] and s.prompt_tokens - s.reused_tokens >= 128
    assert engine.read_rate == pytest.approx((s.prompt_tokens - s.reused_tokens) / s.ttft_s)
    told.clear()
    follow = [*long, {"role": "assistant", "content": chunks_text(chunks)}, {"role": "user", "content": "Thanks."}]
    chunks = list(engine.stream_chat(follow, ChatOptions(max_tokens=4), on_reading=lambda n, r: told.append((n, r))))
    s = chunks[-1].stats
    assert told[0][0] == s.prompt_tokens - s.reused_tokens < 128  # the conversation so far was cached
    assert told[0][1] is not None and told[0][1] > 0
    assert reading_text(3412, 85.0, True) == "Reading 3,412 tokens of your documents and the conversation (about 40 s)…"
    assert reading_text(40, 85.0, False) == "Reading 40 tokens of the conversation…"  # under 2 s: no estimate
    assert reading_text(3412, None, False) == "Reading 3,412 tokens of the conversation…"


def chunks_text(chunks: list) -> str:
    return "".join(c.text for c in chunks)
