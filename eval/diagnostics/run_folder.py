"""Diagnostics of one run folder (``kar run`` or an API ablation job): its traces against its benchmark,
joined with the judged files found in the folder's ``judged/{condition}.json`` (when there are any)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.diagnostics.diagnose import diagnose, judge_knowledge
from eval.diagnostics.gold import KBNames
from eval.diagnostics.kb import open_kb_names
from eval.diagnostics.joined import join_all
from eval.diagnostics.traces import read_manifest, read_traces

NO_GOLD = "{benchmark} items name no gold identity entities, so there is nothing to diagnose retrieval against"


def diagnose_run(dataset: Path, run_dir: Path, conditions: list[str], kb: KBNames, baseline: str = "vanilla") -> dict[str, Any]:
    """Per condition with a trace file: the diagnostics (proxy for knowledge), plus ``joined`` against
    ``baseline`` when both have a judged file in ``run_dir/judged/``; ``{"skipped": why}`` for a
    benchmark-family file or a folder without traces."""
    from eval.metrics.vikr import vikr_matrix
    from eval.records import load_judged
    from eval.tasks import is_bench_file, load

    if dataset.is_file() and is_bench_file(dataset):
        return {"skipped": NO_GOLD.format(benchmark=load(dataset, check_media=False).benchmark)}
    from eval.tasks.memebench import load_benchmark

    items = load_benchmark(dataset, check_images=False)
    files = {c: run_dir / "traces" / f"{c}.jsonl" for c in conditions}
    files = {c: p for c, p in files.items() if p.is_file()}
    if not files:
        return {"skipped": "no traces yet"}
    diagnostics = diagnose(items, {c: read_traces(p) for c, p in files.items()}, kb, {c: read_manifest(p) for c, p in files.items()})
    judged = {c: run_dir / "judged" / f"{c}.json" for c in files}
    matrices = {c: vikr_matrix(items, load_judged(p)) for c, p in judged.items() if p.is_file()}
    paired = {c: {"baseline": baseline} for c in matrices if c != baseline}
    join_all(diagnostics, matrices, paired)
    for entry in diagnostics.values():
        entry.setdefault("joined", None)
    return diagnostics


CACHED_NOTE = "read from the cache of an earlier report over the same traces, benchmark and CultureBase"


def _read_back(settings: Any, key: str) -> tuple[dict[str, Any], list[str]] | None:
    from eval.diagnostics import cache

    hit = cache.load(settings, key)
    return None if hit is None else (hit[0], [*hit[1], CACHED_NOTE])


def cached_diagnostics(items: Sequence[Any], files: Mapping[str, Path], settings: Any) -> tuple[dict[str, Any], list[str]] | None:
    """The proxy diagnostics of these inputs when an earlier report kept them (with the note saying so), else None:
    a caller that would start a worker process to compute them asks this first."""
    from eval.diagnostics import cache

    key = cache.cache_key(items, files, settings)
    return None if key is None else _read_back(settings, key)


def diagnose_files(items: Sequence[Any], files: Mapping[str, Path], settings: Any, judge: Any = None,
                   run: Callable[[Any], Any] | None = None, use_cache: bool = True) -> tuple[dict[str, Any], list[str]]:
    """Diagnostics of the trace files ``files[name]`` (CultureBase from ``settings``), knowledge by the proxy,
    or by ``judge`` (a :class:`~eval.diagnostics.knowledge.KnowledgeJudge`; ``run`` runs its coroutine, default
    :func:`asyncio.run`); with the notes to show (why ``gold_in_kb`` is unknown).

    Proxy diagnostics are read back from :mod:`eval.diagnostics.cache` when the same inputs were diagnosed
    before (``use_cache=False`` recomputes them); a note then says so.  Diagnostics made while CultureBase
    could not be read (``gold_in_kb`` unknown) are not kept."""
    import asyncio

    from eval.diagnostics import cache

    key = cache.cache_key(items, files, settings) if use_cache and judge is None else None
    if key is not None and (hit := _read_back(settings, key)) is not None:
        return hit
    records = {name: read_traces(path) for name, path in files.items()}
    manifests = {name: read_manifest(path) for name, path in files.items()}
    notes: list[str] = []
    with open_kb_names(settings) as kb:
        if kb.unavailable:
            notes.append(f"gold_in_kb unknown: {kb.unavailable}")
        diagnostics = diagnose(items, records, kb, manifests)
        if judge is not None:
            coroutine = judge_knowledge(diagnostics, items, records, kb, judge, concurrency=settings.judge_concurrency)
            diagnostics = (run or asyncio.run)(coroutine)
    # kept only when the CultureBase could be read and nothing changed while it was (a writer in between)
    if key is not None and not notes and cache.cache_key(items, files, settings) == key:
        cache.store(settings, key, diagnostics, notes)
    return diagnostics, notes
