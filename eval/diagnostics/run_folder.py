"""Diagnostics of one run folder (``kar run`` or an API ablation job): its traces against its benchmark,
joined with the judged files found in the folder's ``judged/{condition}.json`` (when there are any)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from eval.diagnostics.diagnose import diagnose, gold_table, judge_knowledge
from eval.diagnostics.gold import Gold, KBNames
from eval.diagnostics.kb import open_kb_names
from eval.diagnostics.joined import join_all
from eval.diagnostics.traces import gc_paused, read_manifest, read_traces

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


def cached_diagnostics(items: Sequence[Any], files: Mapping[str, Path], settings: Any) -> Callable[[], tuple[dict[str, Any], list[str]]] | None:
    """When an earlier report kept the proxy diagnostics of these inputs: the call that reads them back (with the
    note saying so; computed here after all should the entry have become unreadable meanwhile), else None.  A
    caller that would start a worker process to compute them asks this first; the rows are read only when
    needed, so they do not sit in memory (and under the garbage collector's walks) while the report draws."""
    from eval.diagnostics import cache

    key = cache.cache_key(items, files, settings)
    if key is None or not cache.has(settings, key):
        return None

    def read() -> tuple[dict[str, Any], list[str]]:
        hit = _read_back(settings, key)
        return hit if hit is not None else diagnose_files(items, files, settings)

    return read


def diagnose_files(items: Sequence[Any], files: Mapping[str, Path], settings: Any, judge: Any = None,
                   run: Callable[[Any], Any] | None = None, use_cache: bool = True) -> tuple[dict[str, Any], list[str]]:
    """Diagnostics of the trace files ``files[name]`` (CultureBase from ``settings``), knowledge by the proxy,
    or by ``judge`` (a :class:`~eval.diagnostics.knowledge.KnowledgeJudge`; ``run`` runs its coroutine, default
    :func:`asyncio.run`); with the notes to show (why ``gold_in_kb`` is unknown).

    Proxy diagnostics are read back from :mod:`eval.diagnostics.cache` when the same inputs were diagnosed
    before, and the items' gold table when another run's report looked it up in the same KB generation
    (``use_cache=False`` recomputes both); a note says when the diagnostics were read back.  Diagnostics made
    while CultureBase could not be read (``gold_in_kb`` unknown) are not kept."""
    import asyncio

    from eval.diagnostics import cache

    key = cache.cache_key(items, files, settings) if use_cache and judge is None else None
    if key is not None and (hit := _read_back(settings, key)) is not None:
        return hit
    golds, unavailable, kb_closed = _gold_table(items, settings, use_cache)
    notes = [f"gold_in_kb unknown: {unavailable}"] if unavailable else []
    try:
        records = {name: read_traces(path) for name, path in files.items()}
        manifests = {name: read_manifest(path) for name, path in files.items()}
        with gc_paused():  # thousands of acyclic rows, over the traces' records
            diagnostics = diagnose(items, records, golds, manifests)
    finally:
        kb_closed()
    if judge is not None:
        coroutine = judge_knowledge(diagnostics, items, records, judge, concurrency=settings.judge_concurrency)
        diagnostics = (run or asyncio.run)(coroutine)
    # kept only when the CultureBase could be read and nothing changed while it was (a writer in between)
    if key is not None and not notes and cache.cache_key(items, files, settings) == key:
        cache.store(settings, key, diagnostics, notes)
    return diagnostics, notes


def _gold_table(items: Sequence[Any], settings: Any, use_cache: bool = True) -> tuple[list[tuple[Gold, bool | None]], str | None, Callable[[], None]]:
    """The items' :func:`~eval.diagnostics.diagnose.gold_table` read from the configured CultureBase, why it could
    not be read (None when it could), and the call that waits until the KB is closed (raising what closing raised).
    The KB is closed in a thread while the caller reads the traces: the embedded store's flush and close wait on
    the disk (a fifth of a second) without holding the interpreter.  A table an earlier report (of any run) looked
    up in the same KB generation for the same items is read back instead (:func:`eval.diagnostics.cache.gold_key`):
    the KB is then not opened at all."""
    from eval.diagnostics import cache

    key = cache.gold_key(items, settings) if use_cache else None
    if key is not None and (hit := cache.load_gold(settings, key)) is not None:
        return hit, None, lambda: None
    stack = ExitStack()
    kb = stack.enter_context(open_kb_names(settings))
    try:
        golds = gold_table(items, kb)
        # kept only when the KB could be read and nothing changed while it was (a writer in between)
        if key is not None and kb.available and cache.gold_key(items, settings) == key:
            cache.store_gold(settings, key, golds)
    except BaseException:
        stack.close()
        raise
    failed: list[BaseException] = []

    def close() -> None:
        try:
            stack.close()
        except BaseException as exc:  # raised by the waiting call
            failed.append(exc)

    closing = threading.Thread(target=close, name="kar-kb-close", daemon=True)
    closing.start()

    def closed() -> None:
        closing.join()
        if failed:
            raise failed[0]

    return golds, kb.unavailable, closed


def _work(conn: Any, items: Sequence[Any], files: Mapping[str, Path], settings: Any,
          then: Callable[[dict[str, Any]], None] | None) -> None:
    """The forked worker: diagnose, run ``then`` on the result, send the result (or the error) back, exit."""
    import gc

    gc.freeze()  # the parent's objects are never collected here: a collection would walk (and copy) them all
    gc.disable()  # a short life making acyclic rows and trace records: nothing for the collector to find
    try:
        diagnostics, notes = diagnose_files(items, files, settings)
        if then is not None and "skipped" not in diagnostics:
            then(diagnostics)
        found: tuple[str, Any] = ("ok", (diagnostics, notes))
    except BaseException as exc:  # carried to the parent, raised there
        found = ("error", exc)
    try:
        conn.send(found)
    except Exception as exc:  # an error that does not pickle: its text
        conn.send(("error", RuntimeError(f"{type(found[1]).__name__}: {found[1]}; {exc}")))
    finally:
        conn.close()


def start_diagnose_files(items: Sequence[Any], files: Mapping[str, Path], settings: Any,
                         then: Callable[[dict[str, Any]], None] | None = None) -> Callable[[], tuple[dict[str, Any], list[str]]]:
    """:func:`diagnose_files` (proxy, cache) in a forked process, so the caller goes on meanwhile (``kar report``
    draws its plots); returns the call that waits for the result (an error in the worker is raised there).
    The worker inherits its inputs (nothing is pickled on the way in) and sends back only the result.
    ``then``: what the worker also does with the diagnostics before sending them back (``kar report`` joins them
    with the judgments and draws their plot there), changing them in place; its errors are raised here too."""
    import gc
    import multiprocessing

    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    worker = context.Process(target=_work, args=(send, items, files, settings, then), daemon=True, name="kar-diagnostics")
    # the objects made so far are left out of this process's collections until the worker is done: a collection
    # writes into every object it walks, and each page written is copied, the worker sharing it (unless frozen already)
    frozen = gc.get_freeze_count() == 0
    if frozen:
        gc.freeze()
    try:
        worker.start()
    except BaseException:
        if frozen:
            gc.unfreeze()
        raise
    send.close()

    def wait() -> tuple[dict[str, Any], list[str]]:
        try:
            with gc_paused():  # thousands of rows unpickled: no collection passes over them meanwhile
                status, value = receive.recv()
        except EOFError:
            worker.join()
            raise RuntimeError(f"the diagnostics worker ended without a result (exit code {worker.exitcode})") from None
        finally:
            receive.close()
            if frozen:
                gc.unfreeze()
        worker.join()
        if status != "ok":
            raise value
        return value

    return wait

