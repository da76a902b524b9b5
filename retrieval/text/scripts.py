"""Which script a page is written in: the corpus groups its pages by script for their backgrounds."""

from __future__ import annotations

import re
from typing import Any

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
_ALNUM = re.compile(r"[^\W_]")
CJK_SHARE = 0.3
"""A page whose letters are more than this share Chinese/Japanese characters is ``cjk``."""


def script_group(payload: dict[str, Any]) -> str:
    """``cjk`` for a page written mostly in Chinese/Japanese characters, else ``latin`` (a query's cosines to
    pages in the other script sit lower: each group gets its own background when it has enough pages).
    Chunks stored since the hybrid search carry it (``script``); older ones are read here."""
    if payload.get("script") in ("cjk", "latin"):
        return str(payload["script"])
    sample = f"{payload.get('title') or ''} {str(payload.get('text') or '')[:200]}"
    letters = len(_ALNUM.findall(sample))
    return "cjk" if letters and len(_CJK.findall(sample)) / letters > CJK_SHARE else "latin"
