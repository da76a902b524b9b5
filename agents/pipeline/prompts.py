"""Prompt files (``agents/prompts/*.md``): loading, language variants, hashes, rendering.

``load_prompt("reason", "zh")`` reads ``reason.zh.md`` when it exists, else ``reason.en.md``,
else ``reason.md``.  Every prompt carries the first 12 hex digits of the SHA-256 of its
file text; traces and run manifests record them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"


@dataclass(frozen=True)
class Prompt:
    name: str
    language: str
    text: str
    sha: str

    @property
    def key(self) -> str:
        return f"{self.name}.{self.language}" if self.language else self.name

    def render(self, **values: Any) -> str:
        return self.text.format(**values)


def prompt_language(language: str | None) -> str:
    """``zh`` for Chinese (zh, zh-cn, zh-hans, ...), ``en`` otherwise."""
    return "zh" if (language or "").lower().startswith("zh") else "en"


@lru_cache(maxsize=64)
def load_prompt(name: str, language: str | None = None) -> Prompt:
    lang = prompt_language(language)
    for suffix, tag in ((f".{lang}.md", lang), (".en.md", "en"), (".md", "")):
        path = PROMPT_DIR / f"{name}{suffix}"
        if path.exists():
            text = path.read_text("utf-8")
            return Prompt(name, tag, text, hashlib.sha256(text.encode("utf-8")).hexdigest()[:12])
    raise FileNotFoundError(f"prompt {name!r} not found in {PROMPT_DIR}")


def all_prompt_hashes() -> dict[str, str]:
    """Hash of every prompt file (for run manifests)."""
    out = {}
    for path in sorted(PROMPT_DIR.glob("*.md")):
        out[path.stem] = hashlib.sha256(path.read_text("utf-8").encode("utf-8")).hexdigest()[:12]
    return out
