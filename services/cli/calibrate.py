"""``kar calibrate``: fit the calibration record (τ, margins, corpus floors) of the knowledge base and its embedder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from services.cli.console import ExitCode, console, emit_json, fail, out, progress_bar, user_errors
from services.cli.options import JsonOption, KbOption

EXAMPLES = """\
Examples:

  kar calibrate

  kar calibrate --target-false-rate 0.005 --labels my_labels.jsonl --json

  KAR_EMBEDDER=remote kar calibrate --kb data/culturebase --dry-run
"""


def calibrate_command(
    target_false_rate: Annotated[
        float, typer.Option("--target-false-rate", min=0.0001, max=0.5, help="False grounding (and captions given evidence) the fit must hold, as an upper 95 % bound (fixed-sequence test).")
    ] = 0.01,
    labels: Annotated[
        Optional[Path], typer.Option("--labels", help="JSONL of {\"text\": ..., \"entity\": id | name | null}: your own labelled texts, added to the probes.", show_default=False)
    ] = None,
    corpus: Annotated[
        Optional[bool], typer.Option("--corpus/--no-corpus", help="Fit the corpus search floors too (default: when the KB holds crawled pages).", show_default=False)
    ] = None,
    max_entities: Annotated[int, typer.Option("--max-entities", min=20, max=100000, help="Entities drawn (by hash of their id) for positives.")] = 400,
    max_pages: Annotated[int, typer.Option("--max-pages", min=10, max=100000, help="Corpus pages drawn (by hash of their URL) for positives.")] = 300,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Fit and report, store nothing.")] = False,
    json_out: JsonOption = False,
    kb: KbOption = None,
) -> None:
    """Fit the thresholds that read the embedder's score scale (τ, the height and evidence margins, the corpus
    floors) for this knowledge base, from its own entities, packaged ordinary captions and your labels; print
    the values before and after and the held-out figures; store the record with the knowledge base."""
    from culturebase.settings import get_settings
    from retrieval.calibration.job import CalibrateOptions, CalibrationTooSmallError, calibrate
    from retrieval.calibration.probes import LabelsFileError
    from retrieval.knowledge_base import KnowledgeBase

    settings = get_settings()
    if kb is not None:
        settings = settings.model_copy(update={"kb_path": kb})
    opts = CalibrateOptions(target_false_rate, labels, corpus, max_entities, max_pages, dry_run)
    with user_errors():
        try:
            with KnowledgeBase.open(settings, create=False) as base, progress_bar() as bar:
                tasks: dict[str, Any] = {}

                def progress(stage: str, done: int, total: int) -> None:
                    if stage not in tasks:
                        tasks[stage] = bar.add_task(stage, total=total)
                    bar.update(tasks[stage], completed=done)

                report = calibrate(base, opts, progress)
        except (LabelsFileError, CalibrationTooSmallError) as exc:
            raise fail(str(exc), ExitCode.USAGE) from None
    if json_out:
        emit_json(report)
        return
    print_report(report)


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:.1%}"


def print_report(r: dict[str, Any]) -> None:
    """The thresholds before and after, then the held-out figures, then the warnings."""
    table = Table(title=escape(f"calibration of {r['embedder']} ({r['dim']}-d) at {r['kb_entities']:,} entities"), title_justify="left")
    for col in ("value", f"before ({r['before']['source']})", "after"):
        table.add_column(escape(col))
    for name, c in r["changes"].items():
        table.add_row(escape(name), f"{c['before']:g}", f"{c['after']:g}")
    out.print(table)
    g = r["grounding"]["held_out"]
    fig = Table(title=escape(f"held-out figures (target false rate {r['target_false_rate']:g}, upper bound at 95 %)"), title_justify="left")
    for col in ("figure", "before", "after"):
        fig.add_column(col)
    fig.add_row("false grounding (upper)", f"{_pct(g['before']['false_rate'])} ({_pct(g['before']['false_rate_upper'])})",
                f"{_pct(g['after']['false_rate'])} ({_pct(g['after']['false_rate_upper'])})")
    fig.add_row("top-1", _pct(g["before"]["top1"]), _pct(g["after"]["top1"]) + f"  (best any rule reaches: {_pct(g['oracle']['top1'])})")
    fig.add_row("negatives / positives", f"{g['after']['negatives']} / {g['after']['positives']}", "")
    if r.get("corpus"):
        c = r["corpus"]["held_out"]
        fig.add_row("captions given evidence (upper)", f"{_pct(c['before']['captions_given_evidence_rate'])} ({_pct(c['before']['captions_given_evidence_upper'])})",
                    f"{_pct(c['after']['captions_given_evidence_rate'])} ({_pct(c['after']['captions_given_evidence_upper'])})")
        fig.add_row("own page first", _pct(c["before"]["own_page_first"]), _pct(c["after"]["own_page_first"]))
    out.print(fig)
    t = r["grounding"].get("test")
    if t:
        out.print(f"fixed-sequence test (Learn then Test): {t['certified']} of {t['rules']} rules, strictest first, certified at a "
                  f"false rate ≤ {t['rate']:g} with {t['confidence']:.0%} confidence; the best top-1 of them is kept",
                  markup=False, highlight=False, soft_wrap=True)
    rep = r.get("reproduces")
    if rep:
        print_reproduces(rep, r["before"]["source"])
    for w in r["warnings"]:
        console.print(f"warning: {w}", markup=False, highlight=False, soft_wrap=True)
    said = "not stored (--dry-run)" if not r["stored"] else "stored with the knowledge base"
    out.print(f"{said}; {r['seconds']} s, peak memory {r['peak_rss_mb']} MB", markup=False, highlight=False)


def print_reproduces(rep: dict[str, Any], source: str) -> None:
    """Whether the refit reproduces the record in use: its figures, then its values where they are comparable."""
    verdict = "reproduces" if rep["within"] else "does NOT reproduce"
    out.print(f"the refit {verdict} the {source} record within the tolerance below", markup=False, highlight=False, soft_wrap=True)
    figures = ", ".join(f"{k} {v['record']:.3f} → {v['refit']:.3f} (±{rep['tolerance'][k]:g})" for k, v in rep["checks"].items())
    said = "within" if rep["figures_within"] else "NOT within"
    out.print(f"  held-out figures, the record's rule → the refit's ({said}): {figures}", markup=False, highlight=False, soft_wrap=True)
    for part, v in rep["values"].items():
        if not v["compared"]:
            out.print(f"  {part} values: not compared: {v['why']}", markup=False, highlight=False, soft_wrap=True)
            continue
        values = ", ".join(f"{k} {c['record']:g} → {c['refit']:g} (±{rep['value_tolerance'][k]:g}{'' if c['within'] else ' NOT within'})"
                           for k, c in v["checks"].items())
        out.print(f"  {part} values (same probes, same size): {values}", markup=False, highlight=False, soft_wrap=True)
