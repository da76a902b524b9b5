"""Answer extraction for multiple-choice and fixed-label classification replies.

Robust to the usual shapes: ``(B)``, ``B.``, ``B``, ``答案是B``, ``Answer: b``, ``the answer is
option C``, the option's own text, a label word anywhere (``Stance: Deny``).  Anything else is
*unparseable*: scored wrong and counted apart (``Parsed.status``), never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eval.tasks.base import LETTERS

LABEL_SYNONYMS: dict[str, tuple[str, ...]] = {
    "CEM": ("context explains meme", "context explains the meme"),
    "MEC": ("meme enhances context", "meme enhances the context"),
}
_MARKER = r"(?:final answer|correct answer|correct option|answer|option|choice|选项|答案|选择)"
_EXPLICIT = re.compile(
    r"(?i:" + _MARKER + r")\s*(?i:is|should be|would be|[:：]|是|为|应该是|应为)?\s*(?i:option\s*)?[\(\[（【]?\s*"
    # an upper-case letter, or a lower-case one standing alone ("Answer: b", not "answer is a dog")
    r"([A-Z](?![A-Za-z])|[a-z](?=\s*(?:$|[.。)\]）】,，;:!])))"
)
_ALONE = re.compile(r"^\s*[\(\[（【]?\s*([A-Za-z])\s*[\)\]）】]?\s*[.．。:：、,，]?\s*$")
_LEADING = re.compile(r"^\s*(?:\*\*)?[\(\[（【]?([A-Z])(?:[\)\]）】]|[.．。:：、])(?:\*\*)?(?:\s|$)")
_PAREN = re.compile(r"[\(（]([A-Z])[\)）]")
_LABEL_MARKER = r"(?:final answer|answer|label|class|classification|category|stance|affect|relation(?:ship)?|答案|标签|类别)"


@dataclass(frozen=True)
class Parsed:
    """What a reply says: the answer (a letter or label) or None, and how it was read."""

    answer: str | None
    status: str  # "ok" | "unparseable" | "out_of_range" | "ambiguous" | "missing"
    how: str = ""


def _letters(n_options: int) -> str:
    return LETTERS[:n_options]


def parse_choice(response: str | None, options: list[str]) -> Parsed:
    """The letter a reply picks among ``options`` (A, B, …)."""
    if response is None:
        return Parsed(None, "missing")
    text = response.strip()
    if not text:
        return Parsed(None, "unparseable", "empty reply")
    valid = _letters(len(options))

    def pick(letter: str, how: str) -> Parsed:
        letter = letter.upper()
        if letter not in valid:
            return Parsed(None, "out_of_range", f"{how}: {letter} is not one of {valid[0]}-{valid[-1]}")
        return Parsed(letter, "ok", how)

    explicit = [m.strip() for m in _EXPLICIT.findall(text)]
    if explicit:
        return pick(explicit[-1], "explicit")  # the last stated answer wins (replies often reason first)
    alone = _ALONE.match(text)
    if alone:
        return pick(alone.group(1), "letter")
    leading = _LEADING.match(text)
    if leading:
        return pick(leading.group(1), "leading letter")
    parens = sorted(set(_PAREN.findall(text)))
    if len(parens) == 1:
        return pick(parens[0], "parenthesised letter")
    lowered = text.lower()
    hits = [i for i, option in enumerate(options) if option.strip() and option.strip().lower() in lowered]
    # an option contained in another matched option's text is not a separate hit
    hits = [i for i in hits if not any(j != i and options[i].strip().lower() in options[j].strip().lower() for j in hits)]
    if len(hits) == 1:
        return Parsed(valid[hits[0]], "ok", "option text")
    if len(hits) > 1 or len(parens) > 1:
        return Parsed(None, "ambiguous", "several options named")
    return Parsed(None, "unparseable", "no option letter or option text found")


def _label_patterns(labels: tuple[str, ...]) -> dict[str, re.Pattern[str]]:
    out = {}
    for label in labels:
        words = (label, *LABEL_SYNONYMS.get(label, ()))
        out[label] = re.compile(r"(?<![A-Za-z])(?:" + "|".join(re.escape(w) for w in words) + r")(?![A-Za-z])", re.IGNORECASE)
    return out


def parse_label(response: str | None, labels: tuple[str, ...]) -> Parsed:
    """The label of ``labels`` a reply gives (case-insensitive, whole words; synonyms for CEM/MEC)."""
    if response is None:
        return Parsed(None, "missing")
    text = response.strip()
    if not text:
        return Parsed(None, "unparseable", "empty reply")
    patterns = _label_patterns(labels)
    marker = re.compile(_LABEL_MARKER + r"\s*(?:is|[:：]|是|为)\s*\**\s*(.{0,60})", re.IGNORECASE)
    for tail in reversed(marker.findall(text)):
        found = [label for label, pattern in patterns.items() if pattern.match(tail.strip(" *\"'`"))]
        if len(found) == 1:
            return Parsed(found[0], "ok", "explicit")
    positions = {label: m.start() for label, pattern in patterns.items() if (m := pattern.search(text))}
    if len(positions) == 1:
        return Parsed(next(iter(positions)), "ok", "label word")
    if len(positions) > 1:
        return Parsed(None, "ambiguous", f"several labels named: {', '.join(sorted(positions))}")
    return Parsed(None, "unparseable", f"none of {', '.join(labels)} found")
