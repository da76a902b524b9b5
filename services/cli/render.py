"""Human output helpers: seconds with units, mappings as tables, route notes said once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["mapping_table", "print_joins", "seconds", "skipped_routes", "timings_line", "STANDING_SKIP"]

#: a route that never runs with this KB's embedder: said once by `kar kb stats`, not under every query
STANDING_SKIP = "the embedder has no sparse lexical weights"


def seconds(value: float | None) -> str:
    """``0.84 s``, ``12 ms``, ``1 min 05 s``."""
    if value is None:
        return "-"
    v = float(value)
    if v < 1:
        return f"{v * 1000:.0f} ms"
    if v < 60:
        return f"{v:.2f} s"
    minutes, rest = divmod(v, 60)
    return f"{int(minutes)} min {rest:02.0f} s"


def timings_line(timings: Mapping[str, float]) -> str:
    """``ocr 1.20 s · ground 85 ms · total 1.40 s`` (total last; stages that took no time, i.e. did not run, left out)."""
    parts = [f"{k} {seconds(v)}" for k, v in timings.items() if k != "total" and v]
    if "total" in timings:
        parts.append(f"total {seconds(timings['total'])}")
    return " · ".join(parts)


def skipped_routes(routes: Mapping[str, str] | None) -> dict[str, str]:
    """Grounding routes that did not run for this query (a route the embedder can never run is left out)."""
    return {
        r: why
        for r, why in (routes or {}).items()
        if why != "ran" and not why.startswith("ran ") and STANDING_SKIP not in why
    }


def mapping_table(title: str, data: Mapping[str, Any], key: str = "name", value: str = "count") -> Table:
    """A two-column table of a mapping (``by_language: {'en': 88}`` becomes rows ``en | 88``)."""
    table = Table(title=escape(title), title_justify="left", box=None, pad_edge=False)
    table.add_column(escape(key))
    table.add_column(escape(value), justify="right")
    for k, v in data.items():
        table.add_row(escape(str(k)), escape(f"{v:,}" if isinstance(v, int) else str(v)))
    return table


def print_joins(console: Any, joins: Any, limit: int = 20) -> None:
    """Joins counted by rule, then each join, record kept apart and split (``kar kb import``, ``kar crawl``)."""
    data = joins if isinstance(joins, dict) else joins.to_dict()
    by_rule = ", ".join(f"{n} by {rule}" for rule, n in sorted(data.get("merged_by_rule", {}).items())) or "none"
    console.print(
        f"joined: {data.get('merged', 0)} ({by_rule}); kept apart: {data.get('kept_apart', 0)}; split: {data.get('split', 0)}",
        highlight=False, markup=False,
    )
    events = data.get("events") or data.get("joins") or []
    for e in events[:limit]:
        verb = {"merge": "joined into", "kept_apart": "kept apart from", "split": "taken out of"}.get(e["kind"], e["kind"])
        console.print(
            f"  {e['name']} ({e.get('source') or e['id']}) {verb} {e['into_name']} ({e.get('into_source') or e['into_id']}): {e['rule']}",
            highlight=False, soft_wrap=True, markup=False,
        )
    if len(events) > limit:
        console.print(f"  ... and {len(events) - limit} more (--json or --report lists them)", highlight=False, markup=False)


def fits(console: Console, table: Table) -> bool:
    """Whether ``table`` fits ``console``'s width without rich cutting a word with ``…`` (its narrowest layout,
    every column as wide as its longest word, fits)."""
    unbounded = console.options.update(max_width=10**6)  # rich clamps a measurement to the width it is given
    return Measurement.get(console, unbounded, table).minimum <= console.width


def _plain(cell: Any) -> str:
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return str(cell)


def stacked(table: Table) -> Group:
    """``table`` as one block per row, one ``header: value`` line per cell: what a terminal too narrow for its
    columns shows instead of cells cut with ``…`` (each line wraps at the terminal's width, nothing is cut)."""
    headers = [_plain(c.header) for c in table.columns]
    columns = [list(c.cells) for c in table.columns]
    lines: list[Text] = []
    if table.title:
        lines.append(Text(_plain(table.title), style="italic"))
    for row in range(table.row_count):
        cells = [_plain(col[row]) if row < len(col) else "" for col in columns]
        first = True
        for header, value in zip(headers, cells):
            if not value.strip():
                continue
            lines.append(Text(("" if first else "  ") + (f"{header}: " if header.strip() else "") + value))
            first = False
        lines.append(Text(""))
    return Group(*lines)
