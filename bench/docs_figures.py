"""Today's figures in the docs, generated from the benches' JSON in ``bench/results/``.

Each docs page that quotes figures holds one table between two markers::

    <!-- figures:NAME -->
    ...generated...
    <!-- /figures -->

This script rewrites those tables from ``bench/results/*.json`` (``TABLES`` below says which figures
each table shows, from which file, and which bench command printed that file).

    python bench/docs_figures.py           # rewrite the tables in docs/*.md
    python bench/docs_figures.py --check   # exit 1 naming each page whose table differs from the JSON
    python bench/docs_figures.py --run     # rerun the benches (BENCHES: long), then rewrite the tables
    python bench/docs_figures.py --run --only templates   # one bench

``--run`` writes each bench's stdout to its JSON file; ``calibration.json`` is rewritten only when named
with ``--only calibration`` (it takes the longest: three embedders).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs"

# The bench command that printed each results file (run from the repository root, HF_HUB_OFFLINE=1).
BENCHES: dict[str, str] = {
    "grounding_precision": "python bench/grounding_precision.py --sizes 200,5000 --work data/bench/grounding_precision",
    "templates": "python bench/templates.py --seed 23 --entities 5000 --queries-per-template 1 --cache data/bench_cache/templates",
    "evidence": "python bench/evidence.py --work data/bench/evidence",
    "sounds": "python bench/sounds.py --cache data/bench_cache/sounds",
    "diagnostics": "python bench/diagnostics.py --skip-cost",
    "calibration": "python bench/calibration.py --sizes 200,5000,40000 --evidence",
}
RUN_BY_DEFAULT = ("grounding_precision", "templates", "evidence", "sounds", "diagnostics")


@dataclass(frozen=True)
class Row:
    """One figure: its label, a path into the JSON (``/``-separated, ``{col}`` replaced per column) and a format."""

    label: str
    path: str
    fmt: str = "{}"
    first_column_only: bool = False  # one figure, not one per column: the other cells stay empty


@dataclass(frozen=True)
class Table:
    """One page's table of today's figures."""

    name: str  # the marker: <!-- figures:NAME -->
    page: str  # the page's file name in docs/
    source: str  # bench/results/SOURCE.json (a key of BENCHES)
    columns: tuple[tuple[str, str], ...]  # (header, the value of {col} in each row's path)
    rows: tuple[Row, ...]
    corner: str = "figure"


PCT = "{:.1%}"
HELD = "sizes/{col}/held-out/"
TABLES: tuple[Table, ...] = (
    Table(
        name="grounding",
        page="grounding.md",
        source="grounding_precision",
        corner="held-out split",
        columns=(("220 entities", "200"), ("5,000 entities", "5000")),
        rows=(
            Row("ordinary texts grounded (false grounding)", HELD + "negatives_grounded", PCT),
            Row("top-1 at τ, all positives", HELD + "top1", "{:.3f}"),
            Row("top-1 by rank alone", HELD + "top1_rank_only", "{:.3f}"),
            Row("alias", HELD + "top1_by_kind/alias", "{:.3f}"),
            Row("catchphrase, whole line", HELD + "top1_by_kind/catchphrase-line", "{:.3f}"),
            Row("OCR as rapidocr writes it", HELD + "top1_by_kind/ocr", "{:.3f}"),
            Row("visual description", HELD + "top1_by_kind/visual", "{:.3f}"),
            Row("cross-lingual description (at τ)", HELD + "top1_by_kind/cross-lingual-description", "{:.3f}"),
            Row("cross-lingual description (by rank)", HELD + "top1_rank_only_by_kind/cross-lingual-description", "{:.3f}"),
            Row("grounding p50 ms, sizes side by side", "latency_side_by_side/p50_ms/{col}", "{:.1f}"),
            Row("p50 over the 220-entity p50", "latency_side_by_side/p50_ratio_to_smallest/{col}", "{:.2f}×"),
        ),
    ),
    Table(
        name="templates",
        page="templates.md",
        source="templates",
        corner="query style",
        columns=(("top-1", "top1"), ("false claims", "false_claims"), ("top-1, hash only", "hash_only_top1")),
        rows=tuple(
            Row(style, f"per_style/{style}/{{col}}", "{:.3f}")
            for style in ("plain", "screenshot", "grid", "grid_narrow", "lookalike", "blank_background", "animated")
        )
        + (
            Row("screenshot, held-out layout families", "per_family/screenshot/held_out_families/{col}", "{:.3f}"),
            Row("images in the image index", "data/image_index_points", "{:,}", True),
            Row("descriptor index: codes / MB", "descriptor_index/descriptors|descriptor_index/memory_mb", "{:,} / {}", True),
            Row("route p50 / p95 ms (wall)", "latency_ms/route_p50|latency_ms/route_p95", "{} / {}", True),
            Row("index s per image (uncached)", "index/s_per_image_uncached", "{}", True),
        ),
    ),
    Table(
        name="evidence",
        page="evidence.md",
        source="evidence",
        corner="304 pages, 1,970 chunks; hybrid search",
        columns=(("held-out split", "held-out"), ("calibration split", "calibration")),
        rows=(
            Row("entity query: its page first (hit@1)", "real_size/splits/{col}/ranking/hybrid_sum/entity/hit@1", "{:.3f}"),
            Row("entity + source work: hit@1", "real_size/splits/{col}/ranking/hybrid_sum/entity_work/hit@1", "{:.3f}"),
            Row("written description: MRR@10", "real_size/splits/{col}/ranking/hybrid_sum/written/mrr@10", "{:.3f}"),
            Row("written description: MRR@10, dense search alone", "real_size/splits/{col}/ranking/dense_today/written/mrr@10", "{:.3f}"),
            Row("written description: MRR@10, bm25s", "real_size/splits/{col}/ranking/bm25s/written/mrr@10", "{:.3f}"),
            Row("right page above the floor: entity query", "real_size/splits/{col}/ranking/hybrid_sum/entity/right_page_above_floor", PCT),
            Row("right page above the floor: written description", "real_size/splits/{col}/ranking/hybrid_sum/written/right_page_above_floor", PCT),
            Row("ordinary captions given evidence (held-out: fresh; calibration: tuning)", "real_size/splits/{col}/ordinary_captions/hybrid/share", PCT),
            Row("other pages in KAR's evidence block", "real_size/splits/{col}/evidence_block_other_pages/hybrid_kar/share", PCT),
            Row("search p50 ms CPU: hybrid / one dense search", "real_size/ms_per_search_p50/cpu_ms_p50/hybrid|real_size/ms_per_search_p50/cpu_ms_p50/dense", "{} / {}", True),
            Row("with the query's embedding: hybrid over dense", "real_size/ms_per_search_p50/hybrid_over_dense_with_embedding", "{}×", True),
        ),
    ),
    Table(
        name="sounds",
        page="sounds.md",
        source="sounds",
        corner="landmarks, 1,200 sounds indexed",
        columns=(("held-out split", "held-out"), ("calibration split", "calibration")),
        rows=(
            Row("top-1, clips of 3 s or more", "methods/landmarks/{col}/top1_ge_3s", "{:.3f}"),
            Row("top-1, clips of 1–3 s", "methods/landmarks/{col}/top1_1_to_3s", "{:.3f}"),
            Row("top-1 under speech / under music", "methods/landmarks/{col}/top1_by_treatment/speech_mix|methods/landmarks/{col}/top1_by_treatment/music_mix", "{:.3f} / {:.3f}"),
            Row("top-1 sped ±3–5 %", "methods/landmarks/{col}/top1_by_treatment/speed", "{:.3f}"),
            Row("top-1 inside a video", "methods/landmarks/{col}/top1_by_treatment/video", "{:.3f}"),
            Row("wrong entity claimed", "methods/landmarks/{col}/wrong_claims_in_kb", "{:.3f}"),
            Row("false claims (absent sounds)", "methods/landmarks/{col}/false_claims", "{:.3f}"),
            Row("CPU ms p50 / p95, decode + match", "methods/landmarks/{col}/cpu_ms_per_query/p50|methods/landmarks/{col}/cpu_ms_per_query/p95", "{} / {}"),
            Row("index seconds, 1,200 sounds", "methods/landmarks/index_s", "{}", True),
            Row("Chromaprint (`fpcalc -raw`): top-1, 3 s or more", "methods/chromaprint/held-out/top1_ge_3s", "{:.3f}", True),
        ),
    ),
    Table(
        name="judging",
        page="judging.md",
        source="diagnostics",
        corner="sample benchmark (4 items)",
        columns=(("Vanilla", "vanilla"), ("Search-CoT", "search_cot"), ("KAR", "kar")),
        rows=(
            Row("gold entity in CultureBase", "sample/table/{col}/gold_in_kb", "{:.2f}"),
            Row("gold entity grounded", "sample/table/{col}/identity_grounded", "{:.2f}"),
            Row("extra entities per item", "sample/table/{col}/extra_entities", "{:.2f}"),
            Row("knowledge in the prompt (proxy)", "sample/table/{col}/knowledge_in_prompt", "{:.3f}"),
            Row("evidence off entity", "sample/table/{col}/evidence_off_entity", "{:.2f}"),
            Row("proxy vs hand labels: agreement / κ", "knowledge_labels/proxy_vs_hand/agreement|knowledge_labels/proxy_vs_hand/cohen_kappa", "{} / {}", True),
            Row("proxy, English units", "knowledge_labels/proxy_vs_hand/per_language/en/agreement|knowledge_labels/proxy_vs_hand/per_language/en/cohen_kappa", "{} / {}", True),
            Row("proxy, Chinese units", "knowledge_labels/proxy_vs_hand/per_language/zh/agreement|knowledge_labels/proxy_vs_hand/per_language/zh/cohen_kappa", "{} / {}", True),
            Row("proxy on paraphrases / translations: agreement", "knowledge_labels/proxy_vs_hand/per_kind/paraphrase/agreement|knowledge_labels/proxy_vs_hand/per_kind/translation/agreement", "{} / {}", True),
        ),
    ),
    Table(
        name="calibration",
        page="calibration.md",
        source="calibration",
        corner="bundled e5, grounding bench held-out",
        columns=(("220 entities", "200"), ("5,000 entities", "5000"), ("39,814 entities", "40000")),
        rows=(
            Row("fitted τ", "embedders/bundled/sizes/{col}/calibrate/fitted/tau", "{}"),
            Row("fitted min height", "embedders/bundled/sizes/{col}/calibrate/fitted/min_height", "{}"),
            Row("fitted min evidence", "embedders/bundled/sizes/{col}/calibrate/fitted/min_evidence", "{}"),
            Row("false grounding, shipped record", "embedders/bundled/sizes/{col}/grounding_bench_held_out/today/false_rate", PCT),
            Row("false grounding, fitted", "embedders/bundled/sizes/{col}/grounding_bench_held_out/fitted/false_rate", PCT),
            Row("false grounding, fitted: 95 % upper bound", "embedders/bundled/sizes/{col}/grounding_bench_held_out/fitted/false_rate_upper", PCT),
            Row("top-1, shipped record", "embedders/bundled/sizes/{col}/grounding_bench_held_out/today/top1", PCT),
            Row("top-1, fitted", "embedders/bundled/sizes/{col}/grounding_bench_held_out/fitted/top1", PCT),
            Row("top-1, oracle", "embedders/bundled/sizes/{col}/grounding_bench_held_out/oracle/top1", PCT),
            Row("`kar calibrate`'s own held-out probes: false grounding of the shipped record (upper bound)",
                "embedders/bundled/sizes/{col}/calibrate/held_out/before/false_rate|embedders/bundled/sizes/{col}/calibrate/held_out/before/false_rate_upper",
                "{:.1%} ({:.1%})"),
            Row("`kar calibrate`'s own held-out probes: false grounding, fitted (upper bound)",
                "embedders/bundled/sizes/{col}/calibrate/held_out/after/false_rate|embedders/bundled/sizes/{col}/calibrate/held_out/after/false_rate_upper",
                "{:.1%} ({:.1%})"),
            Row("`kar calibrate`: held-out figures of the shipped record reproduced (±tolerance)",
                "embedders/bundled/sizes/{col}/calibrate/reproduces/figures_within", "{}"),
            Row("`kar calibrate` seconds / peak MB", "embedders/bundled/sizes/{col}/calibrate/seconds|embedders/bundled/sizes/{col}/calibrate/peak_rss_mb", "{} / {}"),
            Row("evidence bench: corpus floors fitted (floor / ordinary)",
                "embedders/bundled/evidence/fitted/corpus_floor|embedders/bundled/evidence/fitted/corpus_ordinary_floor", "{} / {}", True),
            Row("evidence bench held-out: captions given evidence, shipped / fitted",
                "embedders/bundled/evidence/evidence_bench_held_out/today/captions_given_evidence_rate|embedders/bundled/evidence/evidence_bench_held_out/fitted/captions_given_evidence_rate",
                "{:.1%} / {:.1%}", True),
            Row("the shipped record's own KB (sample + 120 pages): values compared / reproduced",
                "embedders/bundled/evidence/reproduces/values/grounding/compared|embedders/bundled/evidence/reproduces/values/corpus/compared|"
                "embedders/bundled/evidence/reproduces/values_within", "grounding {}, corpus {} / {}", True),
            Row("evidence bench held-out: own page first, shipped / fitted",
                "embedders/bundled/evidence/evidence_bench_held_out/today/own_page_first|embedders/bundled/evidence/evidence_bench_held_out/fitted/own_page_first",
                "{:.1%} / {:.1%}", True),
        ),
    ),
)


def lookup(data: Any, path: str) -> Any:
    """The value at a ``/``-separated path of keys (list indexes as numbers)."""
    for key in path.split("/"):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def cell(data: Any, row: Row, col: str) -> str:
    """One formatted figure; ``|`` in a path gives several values for one format."""
    try:
        values = [lookup(data, part.replace("{col}", col)) for part in row.path.split("|")]
    except (KeyError, IndexError, TypeError):  # absent, or a skipped part (a string where figures were)
        return "—"
    if any(v is None for v in values):
        return "—"
    return row.fmt.format(*values)


def render(table: Table, data: Any) -> str:
    """The generated block between the markers (markers excluded); ``data`` None: the results file is missing."""
    if data is None:
        return (f"No figures yet: `bench/results/{table.source}.json` is missing. "
                f"Make it with `{BENCHES[table.source]} > bench/results/{table.source}.json`, "
                "then run `python bench/docs_figures.py`.")
    lines = [
        f"Generated by `python bench/docs_figures.py` from `bench/results/{table.source}.json`, "
        f"printed by `{BENCHES[table.source]}`.",
        "",
        "| " + " | ".join((table.corner,) + tuple(h for h, _ in table.columns)) + " |",
        "|" + "---|" * (len(table.columns) + 1),
    ]
    for row in table.rows:
        if row.first_column_only:
            cells = [cell(data, row, table.columns[0][1])] + [""] * (len(table.columns) - 1)
        else:
            cells = [cell(data, row, col) for _, col in table.columns]
        lines.append("| " + " | ".join([row.label] + cells) + " |")
    return "\n".join(lines)


def marker_re(name: str) -> re.Pattern[str]:
    """The block of one table in a page."""
    return re.compile(rf"(<!-- figures:{re.escape(name)} -->)(.*?)(<!-- /figures -->)", re.S)


def regenerate(text: str, table: Table, data: Any) -> str:
    """The page's text with the table rewritten; a page without the markers is an error."""
    pattern = marker_re(table.name)
    if not pattern.search(text):
        raise SystemExit(f"docs/{table.page}: no <!-- figures:{table.name} --> ... <!-- /figures --> block")
    return pattern.sub(lambda m: m.group(1) + "\n" + render(table, data) + "\n" + m.group(3), text, count=1)


def expected_pages() -> dict[str, tuple[str, str]]:
    """{page: (text now, text with every table regenerated)}."""
    cache: dict[str, Any] = {}
    pages: dict[str, tuple[str, str]] = {}
    for table in TABLES:
        if table.source not in cache:
            path = RESULTS / f"{table.source}.json"
            cache[table.source] = json.loads(path.read_text("utf-8")) if path.exists() else None
        now, new = pages.get(table.page, (None, None))
        if now is None:
            now = new = (DOCS / table.page).read_text("utf-8")
        pages[table.page] = (now, regenerate(new, table, cache[table.source]))
    return pages


def run_benches(names: list[str]) -> None:
    """Rerun the named benches, each writing its JSON into bench/results/."""
    for name in names:
        out = RESULTS / f"{name}.json"
        print(f"running {BENCHES[name]} > {out.relative_to(ROOT)}", file=sys.stderr)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        with open(out.with_suffix(".json.tmp"), "w", encoding="utf-8") as fh:
            command = BENCHES[name].replace("python ", f"{sys.executable} ", 1)
            subprocess.run(command, shell=True, cwd=ROOT, env=env, stdout=fh, check=True)
        out.with_suffix(".json.tmp").replace(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a page's table differs from the JSON")
    ap.add_argument("--run", action="store_true", help="rerun the benches first (long)")
    ap.add_argument("--only", default="", help="comma-separated benches for --run (default: all but calibration)")
    args = ap.parse_args()
    if args.run:
        run_benches([n for n in args.only.split(",") if n] or list(RUN_BY_DEFAULT))
    stale = []
    for page, (now, new) in expected_pages().items():
        if now == new:
            continue
        if args.check:
            stale.append(page)
        else:
            (DOCS / page).write_text(new, "utf-8")
            print(f"docs/{page}: tables rewritten", file=sys.stderr)
    for page in stale:
        print(f"docs/{page}: a figures table differs from bench/results (run `python bench/docs_figures.py`)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
