"""``kar config``: every ``KAR_*`` setting with its effective value and where it came from."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from services.cli.console import emit_json, out, user_errors

EXAMPLES = """\
Examples:

  kar config

  kar config --json --only vlm
"""


def effective_settings() -> list[dict[str, Any]]:
    """One row per setting: ``name`` (KAR_*), ``value`` (effective, secrets masked), ``source`` and a ``note``.

    ``source`` is ``env``, ``.env`` (the working directory's) or ``default``; an unset value that a
    component resolves itself (τ, the search cache, the job database) shows what it resolves to."""
    from culturebase.settings import env_name, get_settings, setting_sources

    settings = get_settings()
    values = settings.public_dict()
    sources = setting_sources()
    resolved: dict[str, tuple[Any, str]] = {
        "search_cache_path": (str(settings.resolved_search_cache_path), "under KAR_DATA_DIR"),
        "crawl_jobs_db": (str(settings.resolved_crawl_jobs_db), "under KAR_DATA_DIR"),
    }
    from retrieval.calibration.peek import peek_calibration

    cal = peek_calibration(settings)
    if cal is not None:  # τ and the corpus floor come from the calibration record in use (docs/calibration.md)
        where = {
            "kb": f"calibration record of the KB, {cal.record.created_at:%Y-%m-%d}" if cal.record else "",
            "bundled": f"bundled calibration record of {cal.record.embedder.name}" if cal.record else "",
            "conservative": "conservative: not calibrated for this embedder; run `kar calibrate`",
        }[cal.source]
        resolved["grounding_tau"] = (cal.thresholds.tau, where)
        resolved["evidence_floor"] = (cal.thresholds.corpus_floor, where)
    rows = []
    for field, value in values.items():
        note = ""
        if value is None and field in resolved:
            value, note = resolved[field]
        rows.append({"name": env_name(field), "value": value, "source": sources[field], "note": note})
    return rows


def _shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "(empty)"
    return str(value)


def config_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print {KAR_NAME: {value, source}} as JSON on stdout.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the table of every setting (docs/settings.md) instead.")] = False,
    only: Annotated[
        str, typer.Option("--only", metavar="TEXT", help="Only settings whose name contains TEXT (e.g. vlm, search, qdrant).")
    ] = "",
    changed: Annotated[bool, typer.Option("--changed", help="Only settings set in the environment or .env.")] = False,
) -> None:
    """Print every KAR_* setting with its effective value and where it came from (env, .env or default).

    Values are read, highest first, from the environment, a .env file in the working directory, and
    the defaults. Secrets are masked."""
    from culturebase.settings import settings_table

    if markdown:
        typer.echo(settings_table())
        return
    with user_errors():
        rows = effective_settings()
    rows = [r for r in rows if only.lower() in r["name"].lower() and (not changed or r["source"] != "default")]
    if json_out:
        emit_json({r["name"]: {"value": r["value"], "source": r["source"], **({"note": r["note"]} if r["note"] else {})} for r in rows})
        return
    table = Table("setting", "value", "from", box=None, pad_edge=False)
    for r in rows:
        value = _shown(r["value"]) + (f"  ({r['note']})" if r["note"] else "")
        table.add_row(escape(r["name"]), escape(value), escape(r["source"]))
    out.print(table)
