"""The router: a prompt's complexity level (low / medium / high) from cheap, deterministic features.

Features: length (model tokens when a tokenizer is given, else words); syntactic complexity (textstat's
Flesch-Kincaid grade level, words per sentence, conjunctions and subordinators); entity density
(capitalised non-initial words, acronyms, numbers, dates and quoted names per word). No model, no download.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import textstat

LEVELS = ("low", "medium", "high")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d[\d.,:/-]*")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s|$)|\n\s*\n")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n\s*\n")
_CONJUNCTIONS = frozenset(["and", "or", "but", "nor", "yet", "so"])
_SUBORDINATORS = frozenset(
    [
        "because",
        "although",
        "though",
        "while",
        "whereas",
        "since",
        "unless",
        "until",
        "if",
        "whether",
        "when",
        "whenever",
        "where",
        "wherever",
        "after",
        "before",
        "once",
        "that",
        "which",
        "who",
        "whom",
        "whose",
        "how",
        "why",
        "than",
    ]
)
_MONTHS = "january february march april may june july august september october november december"
_DATE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b|\b(?:" + "|".join(_MONTHS.split()) + r")\b", re.IGNORECASE
)
_QUOTED = re.compile(r"\"[^\"\n]{1,60}\"|“[^”\n]{1,60}”")
_SAMPLE_CHARS = 2000
# Prompts that ask for a one-token-ish answer ("Answer with the letter", "yes or no", "in one word"). The
# level says how hard the prompt is; this says how long the answer will be, which is what decides whether a
# draft's catch-up can repay itself (cost_model's horizon).
_SHORT_ANSWER = re.compile(
    r"\b(?:answer|reply|respond)(?:\s+\w+){0,2}?\s+(?:with|in|using)\s+(?:only\s+|just\s+)?(?:the|a|one|a single)?\s*"
    r"(?:letter|number|digit|word|option|choice|name)s?\b"
    r"|\b(?:yes or no|true or false)\b|\bin (?:one|a single) (?:word|number)\b|\bone[- ]word answer\b"
    r"|\bjust (?:the|a) (?:letter|number|word|name|answer)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RouterSettings:
    """Weights (summing to 1) and the thresholds between levels, on a 0-1 score."""

    medium_at: float = 0.2
    high_at: float = 0.4
    weights: dict[str, float] = field(
        default_factory=lambda: {
            "length": 0.30,
            "grade": 0.30,
            "words_per_sentence": 0.15,
            "clauses": 0.15,
            "entities": 0.10,
        }
    )
    length_scale: float = 40.0  # words (or tokens) at which length saturates
    grade_scale: float = 16.0
    wps_scale: float = 25.0
    clause_scale: float = 3.0


@dataclass(frozen=True)
class Route:
    level: str
    score: float
    features: dict[str, float]
    reason: str
    short_answer: bool = False  # the prompt asks for a letter, a number, a word or yes/no

    def as_dict(self) -> dict[str, object]:
        return {
            "level": self.level,
            "score": self.score,
            "features": self.features,
            "reason": self.reason,
            "short_answer": self.short_answer,
        }


def warm_up() -> None:
    """textstat loads its dictionaries on first use (about 0.6 s); do it at start-up, not on a prompt."""
    textstat.flesch_kincaid_grade("Warm up the readability dictionaries once.")


def features(text: str, count_tokens: Callable[[str], int] | None = None) -> dict[str, float]:
    """Raw feature values. Length covers the whole text; the rest are rates, measured on a bounded
    sample (the first 2,000 characters) and scaled to the whole, so routing stays under a millisecond."""
    n_words = len(text.split())
    sample = text[:_SAMPLE_CHARS]
    words = _WORD.findall(sample)
    scale = n_words / len(words) if words else 0.0
    lower = [w.lower() for w in words]
    sentences = max(1, len(_SENTENCE_END.findall(sample.strip())))
    entities = len(_DATE.findall(sample)) + len(_QUOTED.findall(sample))
    for sentence in _SENTENCE_SPLIT.split(sample):
        for i, w in enumerate(_WORD.findall(sentence)):
            # Numbers, acronyms, and capitalised words that do not merely start a sentence.
            if w[0].isdigit() or (len(w) > 1 and w.isupper()) or (i > 0 and w[0].isupper()):
                entities += 1
    grade = float(textstat.flesch_kincaid_grade(sample)) if words else 0.0
    return {
        "length": float(count_tokens(text) if count_tokens else n_words),
        "words": float(n_words),
        "grade": round(max(grade, 0.0), 2),
        "words_per_sentence": round(len(words) / sentences, 2),
        "conjunctions": round(scale * sum(w in _CONJUNCTIONS for w in lower), 2),
        "subordinators": round(scale * sum(w in _SUBORDINATORS for w in lower), 2),
        # Shrunk towards zero for short prompts, where one acronym would otherwise dominate.
        "entity_density": round(entities / (len(words) + 5), 4),
    }


def route(text: str, settings: RouterSettings | None = None, count_tokens: Callable[[str], int] | None = None) -> Route:
    """Score `text` and name its level; deterministic for a given text and settings."""
    s = settings or RouterSettings()
    f = features(text, count_tokens)
    parts = {
        "length": min(1.0, f["length"] / s.length_scale),
        "grade": min(1.0, f["grade"] / s.grade_scale),
        "words_per_sentence": min(1.0, f["words_per_sentence"] / s.wps_scale),
        "clauses": min(1.0, (f["conjunctions"] + f["subordinators"]) / s.clause_scale),
        "entities": min(1.0, 4.0 * f["entity_density"]),
    }
    score = round(sum(s.weights[k] * v for k, v in parts.items()), 4)
    level = "high" if score >= s.high_at else "medium" if score >= s.medium_at else "low"
    short = bool(_SHORT_ANSWER.search(text[-_SAMPLE_CHARS:]))  # such an instruction usually ends the prompt
    return Route(level, score, f, _reason(level, f, parts, count_tokens is not None, short), short)


def _reason(level: str, f: dict[str, float], parts: dict[str, float], tokens: bool, short: bool) -> str:
    unit = "tokens" if tokens else "words"
    size = "short" if parts["length"] < 0.5 else "long" if parts["length"] >= 0.9 else "medium-length"
    syntax = "simple" if parts["grade"] < 0.5 else "complex" if parts["grade"] >= 0.75 else "moderate"
    clauses = int(f["conjunctions"] + f["subordinators"])
    extra = f", {clauses} linked clause{'s' if clauses != 1 else ''}" if clauses else ""
    dense = ", many names and numbers" if parts["entities"] >= 0.5 else ""
    return (
        f"{level.capitalize()}: {size} prompt ({int(f['length'])} {unit}) with {syntax} wording "
        f"(grade {f['grade']:.1f}{extra}){dense}{'; asks for a short answer' if short else ''}."
    )
