"""Did the item's knowledge reach the reasoning prompt?  Decided per knowledge unit.

Two deciders, and every figure says which one made it:

* ``judge``: a judge model reads the units and the material the prompt carried (KB entries and
  web evidence) and says, per unit, whether the material states it (``eval/prompts/
  knowledge_in_prompt.md``; the judges' ask/parse/re-ask loop of :mod:`eval.judges.base`; verdicts
  cached in SQLite by model, prompt hash, item and material).  A reply that never parses leaves
  the item's units undecided (``None``), never 0 or 1.
* ``proxy``: lexical containment, no model: a unit counts as stated when at least
  :attr:`~eval.diagnostics.params.DiagnosticsParams.proxy_threshold` of its tokens (words; character bigrams for CJK) occur in the material.
  It cannot see a paraphrase or a translation, so it is a proxy and is labelled so wherever shown;
  ``bench/diagnostics.py`` measures its agreement with the judge.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agents.vlm.base import ChatMessage, SamplingParams, VisionLanguageModel
from eval.diagnostics.gold import fold
from eval.diagnostics.params import PARAMS
from eval.judges.base import PARAMS as JUDGE_PARAMS, ask_valid, fill, json_object

PROMPT = Path(__file__).resolve().parent.parent / "prompts" / "knowledge_in_prompt.md"
PROXY = "proxy"
JUDGE = "judge"
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_WORD = re.compile(r"[^\W_]{2,}")
STOPWORDS = frozenset(
    "the and for with from that this are was were its his her their has have had not but into onto than then also "
    "of to in on at by an as is be or it".split()
)


_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+|[^\W_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]{2,}")


def _key(text: str | None) -> str:
    return fold(text or "")


def tokens(text: str) -> set[str]:
    """Words (≥ 2 letters, stopwords left out) and CJK character bigrams (a lone CJK character as itself)."""
    out: set[str] = set()
    for run in _TOKEN.findall(_key(text)):
        if _CJK_RUN.match(run):
            out.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
        elif run not in STOPWORDS:
            out.add(run)
    return out


class Material:
    """A prompt's material (or one part of it), normalised once, asked whether it holds a token (a CJK bigram
    as a substring, a word as a whole word).  Each token is looked for once: knowledge units share words,
    and a part shared by several prompts (the same CultureBase entry, the same evidence block) is one
    :class:`Material` answering all of them."""

    __slots__ = ("key", "_held")

    def __init__(self, text: str) -> None:
        self.key = _key(text)
        self._held: dict[str, bool] = {}

    def has(self, token: str) -> bool:
        held = self._held.get(token)
        if held is None:
            held = self._held[token] = self._find(token)
        return held

    def _find(self, token: str) -> bool:
        key = self.key
        if _CJK_RUN.match(token):
            return token in key
        start = key.find(token)
        while start != -1:  # a whole word: no letter or digit on either side
            end = start + len(token)
            if (start == 0 or not key[start - 1].isalnum()) and (end == len(key) or not key[end].isalnum()):
                return True
            start = key.find(token, start + 1)
        return False


class Materials:
    """A prompt's material as its parts, joined by line breaks (a KAR prompt: each CultureBase entry, then the
    evidence block).  No word and no CJK bigram runs across a line break, so the material holds a token
    exactly when one of its parts does: each part is searched (and normalised) once, however many prompts
    carry it."""

    __slots__ = ("parts",)

    def __init__(self, parts: Sequence[Material]) -> None:
        self.parts = parts

    def has(self, token: str) -> bool:
        for part in self.parts:
            if part.has(token):
                return True
        return False


@lru_cache(maxsize=65536)
def unit_tokens(unit: str) -> tuple[str, ...]:
    """A knowledge unit's tokens (cached: every condition asks about the same units)."""
    return tuple(sorted(tokens(unit)))


def containment(unit: str, material: Material | Materials) -> float:
    """Share of the unit's tokens found in the material (0 for a unit with no token)."""
    found = unit_tokens(unit)
    return sum(material.has(t) for t in found) / len(found) if found else 0.0


def proxy_decide(units: Sequence[str], material: str | Material | Materials) -> list[bool]:
    """Per unit: stated in the material (its text, or its parts already normalised) by lexical containment
    (≥ ``PARAMS.proxy_threshold``).  Empty material states nothing."""
    if isinstance(material, str):
        if not material.strip():
            return [False] * len(units)
        material = Material(material)
    elif isinstance(material, Materials) and not material.parts:
        return [False] * len(units)
    held: dict[str, bool] = {}  # units share tokens: each is asked once
    decided = []
    for unit in units:
        found = unit_tokens(unit)
        n, count, missed, stated = len(found), 0, 0, False
        for token in found:  # until the share is decided either way (what is left cannot change it)
            has = held.get(token)
            if has is None:
                has = held[token] = material.has(token)
            if has:
                count += 1
                if count / n >= PARAMS.proxy_threshold:
                    stated = True
                    break
            else:
                missed += 1
                if (n - missed) / n < PARAMS.proxy_threshold:
                    break
        decided.append(stated)
    return decided


class UnitVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")
    index: int
    stated: bool
    reason: str = ""


class UnitVerdicts(BaseModel):
    model_config = ConfigDict(extra="ignore")
    units: list[UnitVerdict]


def parse_reply(text: str, n: int) -> list[bool]:
    """Per-unit verdicts of a reply (every index 1..n exactly once); ValueError naming what is wrong."""
    verdicts = UnitVerdicts.model_validate(json_object(text)).units
    by_index = {v.index: v.stated for v in verdicts}
    missing = [i for i in range(1, n + 1) if i not in by_index]
    extra = sorted(set(by_index) - set(range(1, n + 1)))
    if missing or extra or len(verdicts) != len(by_index):
        raise ValueError(f"expected one verdict for each unit 1..{n}; missing {missing or 'none'}, unknown {extra or 'none'}"
                         + ("; an index repeated" if len(verdicts) != len(by_index) else ""))
    return [by_index[i] for i in range(1, n + 1)]


@dataclass
class KnowledgeJudge:
    """The judge deciding, per knowledge unit, whether the prompt's material states it (cached)."""

    vlm: VisionLanguageModel
    max_retries: int = JUDGE_PARAMS.max_parse_retries
    cache: Any = None  # an eval.judges.checklist.JudgeCache (or None: no cache)
    calls: int = 0
    cache_hits: int = 0

    @cached_property
    def template(self) -> str:
        return PROMPT.read_text("utf-8")

    @cached_property
    def prompt_sha(self) -> str:
        return hashlib.sha256(self.template.encode()).hexdigest()[:16]

    @property
    def model_id(self) -> str:
        return str(getattr(self.vlm, "model_id", "judge"))

    def prompt(self, units: Sequence[str], material: str) -> str:
        numbered = "\n".join(f"{i}. {u}" for i, u in enumerate(units, 1))
        return fill(self.template, units=numbered, material=material)

    async def decide(self, item_id: str, units: Sequence[str], material: str) -> tuple[list[bool] | None, str | None]:
        """``(per-unit verdicts, None)`` or ``(None, why undecided)``; empty material states nothing (no call)."""
        if not units:
            return [], None
        if not material.strip():
            return [False] * len(units), None
        key = None
        if self.cache is not None:
            digest = hashlib.sha256(json.dumps([list(units), material], ensure_ascii=False).encode()).hexdigest()
            key = self.cache.key(self.model_id, self.prompt_sha, item_id, digest)
            hit = self.cache.get(key)
            if hit is not None and len(hit.get("stated", [])) == len(units):
                self.cache_hits += 1
                return [bool(s) for s in hit["stated"]], None
        messages = [ChatMessage("user", self.prompt(units, material))]
        asked = await ask_valid(self.vlm, messages, lambda text: parse_reply(text, len(units)), max_retries=self.max_retries,
                                sampling=SamplingParams(temperature=0.0, json_mode=True))
        self.calls += asked.calls
        if asked.value is None:
            return None, asked.error
        if key is not None:
            self.cache.put(key, {"stated": asked.value})
        return asked.value, None


async def judge_many(judge: KnowledgeJudge, jobs: Sequence[tuple[str, Sequence[str], str]],
                     concurrency: int = 4) -> list[tuple[list[bool] | None, str | None]]:
    """``judge.decide`` over ``(item_id, units, material)`` jobs, ``concurrency`` at a time, order kept;
    a call that raises is recorded as undecided with its error."""
    limiter = asyncio.Semaphore(max(1, concurrency))

    async def one(job: tuple[str, Sequence[str], str]) -> tuple[list[bool] | None, str | None]:
        async with limiter:
            try:
                return await judge.decide(*job)
            except Exception as exc:  # recorded, not lost
                return None, f"{type(exc).__name__}: {exc}"

    return list(await asyncio.gather(*(one(job) for job in jobs)))
