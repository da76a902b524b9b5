"""What every report shares: one JSON conversion (numpy scalars to Python, NaN → null,
±inf → "inf"/"-inf" with its sign) so no report writes the invalid token ``NaN``, and one
markdown-table-to-HTML rendering for report.html."""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np


_PLAIN = (str, int, bool, type(None))


class PlainRows(list):
    """Rows that are strict JSON already (dicts of str, int, bool, None, finite floats and lists of those):
    :func:`jsonable` keeps them as they are instead of walking thousands of rows (the per-item diagnostics
    rows, which :mod:`eval.diagnostics` builds of nothing else)."""

    __slots__ = ()


def jsonable(value: Any) -> Any:
    """A value safe for strict JSON, recursively (:class:`PlainRows` as they are)."""
    kind = type(value)
    if kind in _PLAIN:  # most leaves of a report with per-item rows: one type test, not five
        return value
    if kind is PlainRows:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): jsonable(v) for k, v in value.items()}
    if kind is list:
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    return value


def dumps_indented(value: Any) -> str:
    """``value`` (already :func:`jsonable`) as indented JSON text, by orjson (the stdlib encoder's
    indented mode is pure Python: seconds for a report with per-item rows)."""
    import orjson

    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode("utf-8")


def markdown_table_html(markdown: str) -> str:
    """A markdown block as HTML: its lines as paragraphs, its table (header row first, rule rows dropped) as a table."""
    paras: list[str] = []
    rows: list[str] = []
    for line in markdown.splitlines():
        if not line.startswith("|"):
            if line.strip():
                paras.append(f"<p>{html.escape(line)}</p>")
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(c and set(c) <= {"-"} for c in cells):
            continue
        tag = "th" if not rows else "td"
        rows.append("<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>")
    return "".join(paras) + ("<table>" + "".join(rows) + "</table>" if rows else "")
