"""The one loop every judge runs: ask → parse → validate → re-ask with the problem quoted.

A judge gives :func:`ask_valid` its messages and a ``parse`` function that returns the
validated verdict or raises :class:`ValueError` (pydantic's ``ValidationError`` and
``json.JSONDecodeError`` are ValueErrors) naming what is wrong.  An invalid reply is re-asked
``max_retries`` times with the reason; after that, or when the call itself fails, the result
is *unscored* with its error, never a silent 0 or 1 (as inspect_ai's model-graded scorers).
Every prompt template of ``eval/prompts`` (judges and task instructions) uses one placeholder
syntax, ``{{name}}`` (:func:`fill`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from agents.vlm.base import ChatMessage, SamplingParams, TokenUsage, VisionLanguageModel, VLMError
from culturebase.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True)
class JudgeParams:
    """The judges' ask/parse/re-ask loop (every judge: checklist, rubric, reference rubric, knowledge in prompt)."""

    #: re-asks when a reply cannot be parsed: the default of ``KAR_JUDGE_MAX_PARSE_RETRIES`` (set by hand; no bench chose it)
    max_parse_retries: int = Settings.model_fields["judge_max_parse_retries"].default


PARAMS = JudgeParams()
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.I)


_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def fill(template: str, **values: Any) -> str:
    """``{{name}}`` placeholders replaced by the values in one pass (a value is never re-read as a
    placeholder; an unknown placeholder and any other brace are left as written)."""
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), template)


def json_object(text: str | None) -> dict[str, Any]:
    """The JSON object in a reply (code fences and text around it allowed); ValueError otherwise."""
    body = _FENCE.sub("", (text or "").strip())
    match = re.search(r"\{.*\}", body, re.DOTALL)
    if not match:
        raise ValueError("no JSON object in the reply")
    value = json.loads(match.group(0))
    if not isinstance(value, dict):
        raise ValueError("the reply's JSON is not an object")
    return value


@dataclass
class Asked(Generic[T]):
    """What one judged item came to: the verdict, or why there is none."""

    value: T | None
    calls: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    error: str | None = None
    failure: Literal["call", "parse"] | None = None
    raw: str | None = None


def default_repair(problem: str) -> str:
    return f"Your reply could not be used: {problem}. Reply again with the JSON object only, every value within its range."


async def ask_valid(
    vlm: VisionLanguageModel,
    messages: Sequence[ChatMessage],
    parse: Callable[[str], T],
    *,
    max_retries: int = PARAMS.max_parse_retries,
    sampling: SamplingParams | None = None,
    repair: Callable[[str], str] = default_repair,
) -> Asked[T]:
    """Ask until ``parse`` accepts the reply (at most ``max_retries`` re-asks); never raises for the judge's faults."""
    sampling = sampling or SamplingParams(temperature=0.0, json_mode=True)
    history = list(messages)
    out: Asked[T] = Asked(None)
    problem = "no reply"
    for _ in range(max_retries + 1):
        try:
            result = await vlm.chat(history, sampling)
        except VLMError as exc:
            out.error, out.failure = f"judge call failed: {exc}", "call"
            return out
        out.calls += 1
        out.usage.add(result.usage)
        out.raw = result.text
        try:
            out.value = parse(result.text or "")
            return out
        except ValueError as exc:
            problem = brief(exc)
            history = [*history, ChatMessage("assistant", result.text or ""), ChatMessage("user", repair(problem))]
    out.error, out.failure = f"unparseable after {out.calls} replies: {problem}", "parse"
    return out


def brief(exc: Exception) -> str:
    """A one-line reason (pydantic errors as ``field: message``)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors())
        except Exception:  # not a pydantic error after all
            pass
    return str(exc)
