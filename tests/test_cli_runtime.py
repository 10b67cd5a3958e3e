"""`specquant chat | route | info` as a user runs them: JSON shapes, exit codes, the REPL."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error, run_cli, run_cli_here


def test_chat_json(demo_cache: Path) -> None:
    result = run_cli("chat", "--prompt", "Name three primary colors.", "--json", "--max-tokens", "32")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["text"].strip()
    assert set(out["route"]) == {"level", "score", "features", "reason", "short_answer", "intent"}
    assert out["route"]["level"] in ("low", "medium", "high")
    # The default before this machine is measured: fast, Q4_K_M's own words with free drafts (#61).
    assert (out["parent"], out["draft"], out["ngram"], out["preset"]) == ("q4_k_m", None, True, "fast")
    assert out["preset_words"] == "Fast: the Q4_K_M model's words (its speed not measured on this computer yet)"
    assert out["placement"]["mode"] == "cpu" and out["placement"]["threads"] >= 1
    for key in ("tokens", "tok_per_s", "ttft_s", "drafted", "accepted", "acceptance", "draft_s", "verify_s"):
        assert key in out["stats"], key
    assert out["stats"]["tokens"] > 0
    stats = out["stats"]  # what speculation bought, against the parent's measured plain step
    assert {"plain_step_s", "plain_s", "elapsed_s", "speedup", "saved_s", "spec_off"} <= set(stats)
    if stats["speedup"] is not None:
        assert stats["speedup"] == pytest.approx(stats["plain_s"] / stats["elapsed_s"], rel=2e-3)


@pytest.mark.slow
def test_chat_flags_pin_the_pair(demo_cache: Path) -> None:
    out = json.loads(
        run_cli(
            "chat", "--prompt", "Hi", "--json", "--parent", "q8_0", "--draft", "q4_k_m", "--k", "2", "--max-tokens", "8"
        ).stdout
    )
    assert (out["parent"], out["draft"], out["preset"]) == ("q8_0", "q4_k_m", None)
    out = json.loads(run_cli("chat", "--prompt", "Hi", "--json", "--preset", "exact", "--max-tokens", "8").stdout)
    assert (out["parent"], out["draft"], out["preset"]) == ("f16", "q4_k_m", "exact")  # exact: one flag away
    out = json.loads(run_cli("chat", "--prompt", "Hi", "--json", "--no-spec", "--max-tokens", "8").stdout)
    assert out["draft"] is None and out["stats"]["drafted"] == 0


@pytest.mark.slow
def test_chat_prompt_from_stdin(demo_cache: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "commands", "chat", "--prompt-file", "-", "--json", "--max-tokens", "8"],
        input="What is AI?",
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["route"]["level"] == "low"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--temp", "-1"], "temperature -1.0 must be >= 0"),
        (["--top-p", "2"], "top-p 2.0"),
        (["--seed", "-1"], "seed -1 must be 0 to 2^64 - 1"),
        (["--seed", str(2**64)], f"seed {2**64} must be"),
        (["--k", "0"], "--k 0"),
        (["--max-tokens", "0"], "max tokens 0"),
        (["--model", "nope"], "no model 'nope'"),
        (["--parent", "q2_k"], "invalid choice: 'q2_k'"),
        (["--draft", "f16"], "draft f16 is not cheaper than parent f16"),
        (["--prompt-file", "/no/such/file"], "cannot read prompt file /no/such/file"),
    ],
)
def test_chat_bad_input_is_one_line(demo_cache: Path, args: list[str], needle: str) -> None:
    """In this process (a child each would start an interpreter ten times); `route` below refuses in a child."""
    argv = ["chat", *args] if "--prompt-file" in args else ["chat", "--prompt", "hi", *args]
    assert_one_line_error(run_cli_here(*argv), needle)


def test_repl_streams_and_keeps_the_conversation(demo_cache: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "commands", "chat", "--max-tokens", "16"],
        input="Hello\nWhat did I say?\n/reset\nHello\n/quit\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("> ") >= 3
    stats = [line for line in proc.stderr.splitlines() if "tok/s" in line]
    assert len(stats) == 3
    # Turn two was answered on top of turn one: its prompt's KV cache (question and answer) was kept.
    assert "reused" not in stats[0]
    reused = re.search(r"(\d+) prompt tokens reused", stats[1])
    assert reused and int(reused.group(1)) > 10, stats[1]
    # After /reset the conversation is gone: only the shared system prompt and "Hello" can be reused.
    third = re.search(r"(\d+) prompt tokens reused", stats[2])
    assert third is None or int(third.group(1)) < int(reused.group(1)), stats[2]


def test_ctrl_c_in_the_repl_stops_the_answer_and_the_chat_goes_on(demo_cache: Path) -> None:
    """Ctrl-C closes the answer's JobReader, which cancels its job; the next turn runs on the same engine."""
    # 600 tokens: seconds of story still to come when Ctrl-C is sent at its first word, and a bound on the
    # answer to "Hello", which some CPUs' greedy demo runs on to the limit (4,000 took 64 s on CI's EPYC).
    proc = subprocess.Popen(
        [sys.executable, "-m", "commands", "chat", "--max-tokens", "600"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[str] = []
    started = threading.Event()

    def read() -> None:  # the answer is streaming once text follows the prompt
        assert proc.stdout is not None
        while ch := proc.stdout.read(1):
            seen.append(ch)
            if "".join(seen).partition("> ")[2].strip():
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.stdin.write("Write a very long story about a dragon who learns to read.\n")
    proc.stdin.flush()
    assert started.wait(120), "".join(seen)
    proc.send_signal(signal.SIGINT)
    proc.stdin.write("Hello\n/quit\n")
    proc.stdin.flush()
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0
    reader.join(10)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert "[stopped]" in "".join(seen)
    assert "Traceback" not in stderr
    assert len([line for line in stderr.splitlines() if "tok/s" in line]) == 1, stderr  # "Hello" was answered


def test_route_without_a_model(tmp_path: Path) -> None:
    out = json.loads(run_cli("route", "What is AI?", "--json").stdout)
    assert out["level"] == "low" and set(out) == {"level", "score", "features", "reason", "short_answer", "intent"}
    f = tmp_path / "p.txt"
    f.write_text("Analyze the impact of climate change on global agriculture and suggest mitigation strategies.")
    # In this process (run_cli_here): the same command's other input; the children above and below are kept.
    assert json.loads(run_cli_here("route", "--prompt-file", str(f), "--json").stdout)["level"] == "high"
    assert_one_line_error(run_cli("route"), "give the text to route")


def test_info_json(demo_cache: Path) -> None:
    result = run_cli("info", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["model"] == "smollm2-135m-instruct"
    assert [t["tier"] for t in out["tiers"]] == ["f16", "q8_0", "q4_k_m"]
    assert out["hardware"]["physical_cores"] >= 1
    assert set(out["placement"]) == {"low", "medium", "high"}
    assert "cpu-only" in out["placement"]["low"]["reason"]


def test_a_reader_that_goes_away_ends_the_command_quietly(demo_cache) -> None:
    """`specquant info --json | head -1`: no BrokenPipeError traceback, SIGPIPE's exit status."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    proc = subprocess.Popen(
        [sys.executable, "-m", "commands", "info", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=dict(os.environ),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err
