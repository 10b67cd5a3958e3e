"""The router: a prompt's complexity level (low / medium / high) from cheap, deterministic features.

Features: what the prompt asks for (task intent, from a small verb and pattern table: INTENTS); length (model
tokens when a tokenizer is given, else words); syntactic complexity (textstat's Flesch-Kincaid grade level,
shrunk towards a neutral grade on short prompts, words per sentence, conjunctions and subordinators); entity
density (capitalised non-initial words, acronyms, numbers, dates and quoted names per word). No model, no
download.
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
# draft's catch-up can repay itself (the controller's horizon).
_SHORT_ANSWER = re.compile(
    r"\b(?:answer|reply|respond)(?:\s+\w+){0,2}?\s+(?:with|in|using)\s+(?:only\s+|just\s+)?(?:the|a|one|a single)?\s*"
    r"(?:letter|number|digit|word|option|choice|name)s?\b"
    r"|\b(?:yes or no|true or false)\b|\bin (?:one|a single) (?:word|number)\b|\bone[- ]word answer\b"
    r"|\bjust (?:the|a) (?:letter|number|word|name|answer)\b",
    re.IGNORECASE,
)


# What the prompt asks for: (level, intent, pattern), most demanding first; the first match names the
# intent. Comparing, evaluating, analysing, designing or proposing is high work; explaining, describing,
# summarising or writing a poem or story is medium; defining, listing, naming, translating, spelling,
# converting or a what-is / who-is question is low. Syllable counts alone cannot see this.
_VERB_START = r"^\W*(?:please\s+|can you\s+|could you\s+)?"
INTENTS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (level, name, re.compile(pattern, re.IGNORECASE))
    for level, name, pattern in (
        ("high", "to compare", r"\b(?:compare|contrast)\b|\bdifferences? between\b|\bpros and cons\b|\btrade-?offs?\b"),
        ("high", "to evaluate", r"\b(?:evaluate|assess|critique|critically)\b"),
        ("high", "to analyse", r"\banaly[sz]e\b"),
        ("high", "to design", r"\b(?:design|architect|devise)\b|\bdevelop (?:a|an)\b"),
        ("high", "to propose", r"\b(?:propose|argue|justify)\b|\bsuggest (?:\w+ )?(?:strategies|solutions|ways)\b"),
        ("low", "to spell", r"\bhow do you spell\b|\b(?:synonym|antonym)s? (?:for|of)\b"),
        ("medium", "to explain", rf"{_VERB_START}explain\b|{_VERB_START}(?:how|why) (?:does|do|did|is|are|can)\b"),
        ("medium", "to describe", _VERB_START + r"(?:describe|outline|discuss)\b"),
        ("medium", "to summarise", r"\bsummari[sz]e\b|\bsummary of\b"),
        ("medium", "to write", _VERB_START + r"write\b"),
        ("low", "to define", _VERB_START + r"define\b|\bwhat does [\w\s]{1,20} (?:mean|stand for)\b"),
        ("low", "to list", _VERB_START + r"(?:list|name|give me|enumerate)\b"),
        ("low", "to translate", _VERB_START + r"translate\b"),
        ("low", "to convert", _VERB_START + r"convert\b"),
        ("low", "a factual question", _VERB_START + r"(?:what|who|when|where|which)\b"),
        ("low", "a yes-or-no question", _VERB_START + r"(?:is|are|was|were|does|do|can) \w+"),
    )
)
INTENT_VALUE = {"low": 0.0, "medium": 0.5, "high": 1.0}


@dataclass(frozen=True)
class RouterSettings:
    """Weights (summing to 1) and the thresholds between levels, on a 0-1 score."""

    medium_at: float = 0.2
    high_at: float = 0.4
    weights: dict[str, float] = field(
        default_factory=lambda: {
            "intent": 0.40,  # what the prompt asks for (INTENTS); without one, the others share its weight
            "length": 0.20,
            "grade": 0.15,
            "words_per_sentence": 0.09,
            "clauses": 0.09,
            "entities": 0.07,
        }
    )
    length_scale: float = 40.0  # words (or tokens) at which length saturates
    grade_scale: float = 16.0
    # Readability formulas swing on a few words ("Define entrepreneurship." grades 14.7): the grade is
    # shrunk towards a neutral one, fully at one word and hardly at all past a few sentences.
    grade_neutral: float = 6.0
    grade_prior_words: float = 8.0
    wps_scale: float = 25.0
    clause_scale: float = 3.0


@dataclass(frozen=True)
class Route:
    level: str
    score: float
    features: dict[str, float]
    reason: str
    short_answer: bool = False  # the prompt asks for a letter, a number, a word or yes/no
    intent: str | None = None  # what the prompt asks for ("to compare"), from INTENTS

    def as_dict(self) -> dict[str, object]:
        return {
            "level": self.level,
            "score": self.score,
            "features": self.features,
            "reason": self.reason,
            "short_answer": self.short_answer,
            "intent": self.intent,
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
    level = intent(text)[0]
    return {
        "intent": INTENT_VALUE[level] if level else -1.0,  # -1: no intent recognised
        "length": float(count_tokens(text) if count_tokens else n_words),
        "words": float(n_words),
        "grade": round(max(grade, 0.0), 2),
        "words_per_sentence": round(len(words) / sentences, 2),
        "conjunctions": round(scale * sum(w in _CONJUNCTIONS for w in lower), 2),
        "subordinators": round(scale * sum(w in _SUBORDINATORS for w in lower), 2),
        # Shrunk towards zero for short prompts, where one acronym would otherwise dominate.
        "entity_density": round(entities / (len(words) + 5), 4),
    }


def intent(text: str) -> tuple[str | None, str | None]:
    """(level, intent) of the first INTENTS pattern the prompt's opening matches, else (None, None)."""
    head = text[:300]  # what is asked is said first; a long pasted text after it must not change it
    for level, name, pattern in INTENTS:
        if pattern.search(head):
            return level, name
    return None, None


def route(text: str, settings: RouterSettings | None = None, count_tokens: Callable[[str], int] | None = None) -> Route:
    """Score `text` and name its level; deterministic for a given text and settings."""
    s = settings or RouterSettings()
    f = features(text, count_tokens)
    prior = s.grade_prior_words
    grade = (f["words"] * f["grade"] + prior * s.grade_neutral) / (f["words"] + prior)
    parts = {
        "intent": f["intent"],
        "length": min(1.0, f["length"] / s.length_scale),
        "grade": min(1.0, grade / s.grade_scale),
        "words_per_sentence": min(1.0, f["words_per_sentence"] / s.wps_scale),
        "clauses": min(1.0, (f["conjunctions"] + f["subordinators"]) / s.clause_scale),
        "entities": min(1.0, 4.0 * f["entity_density"]),
    }
    used = {k: v for k, v in parts.items() if v >= 0}  # no intent recognised: the other features decide
    total = sum(s.weights[k] for k in used)
    score = round(sum(s.weights[k] * v for k, v in used.items()) / total, 4)
    level = "high" if score >= s.high_at else "medium" if score >= s.medium_at else "low"
    short = bool(_SHORT_ANSWER.search(text[-_SAMPLE_CHARS:]))  # such an instruction usually ends the prompt
    asks = intent(text)[1]
    return Route(level, score, f, _reason(level, f, parts, grade, count_tokens is not None, short, asks), short, asks)


def _reason(
    level: str, f: dict[str, float], parts: dict[str, float], grade: float, tokens: bool, short: bool, asks: str | None
) -> str:
    unit = "tokens" if tokens else "words"
    size = "short" if parts["length"] < 0.5 else "long" if parts["length"] >= 0.9 else "medium-length"
    syntax = "simple" if parts["grade"] < 0.5 else "complex" if parts["grade"] >= 0.75 else "moderate"
    clauses = int(f["conjunctions"] + f["subordinators"])
    extra = f", {clauses} linked clause{'s' if clauses != 1 else ''}" if clauses else ""
    dense = ", many names and numbers" if parts["entities"] >= 0.5 else ""
    task = f"asks {asks}; " if asks else ""
    return (
        f"{level.capitalize()}: {task}{size} prompt ({int(f['length'])} {unit}) with {syntax} wording "
        f"(grade {grade:.1f}{extra}){dense}{'; asks for a short answer' if short else ''}."
    )
