"""Typer functions for ``kar explain`` and ``kar run`` (registered into the ``kar`` app by services.cli).

Kept free of pipeline logic: they build the pipeline from settings, call its async API and
print.  Errors are one line on stderr with a non-zero exit code.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from culturebase.console import emit_json, fail, progress_bar

console = Console(stderr=True)
out = Console(soft_wrap=True)

NO_VLM_HELP = (
    "No explanation was generated: no VLM is configured. Set KAR_VLM_BASE_URLS (an OpenAI-compatible "
    "base URL, e.g. http://localhost:8000/v1 for `vllm serve Qwen/Qwen2.5-VL-7B-Instruct`) and KAR_VLM_MODEL "
    "(plus KAR_VLM_API_KEY if the server needs one)."
)


def _settings(**overrides: Any):  # type: ignore[no-untyped-def]
    from culturebase.settings import get_settings

    settings = get_settings()
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return settings.model_copy(update=overrides) if overrides else settings


def _user_error(exc: BaseException) -> str | None:
    """A one-line message for the project's user-facing errors (None: not one of them)."""
    from agents.runner import DatasetFormatError
    from agents.vlm import VLMNotConfiguredError
    from culturebase.store import StoreError
    from retrieval.embedders import EmbedderUnavailableError
    from retrieval.websearch import SearchNotConfiguredError

    if isinstance(exc, (StoreError, EmbedderUnavailableError, SearchNotConfiguredError, DatasetFormatError, VLMNotConfiguredError)):
        return str(exc)
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError)):
        return f"{exc.filename}: {exc.strerror}"
    return None


def _run(coro: Any) -> Any:
    """Run a command's coroutine; user-facing errors become one line and exit code 1."""
    try:
        return asyncio.run(coro)
    except typer.Exit:
        raise
    except Exception as exc:
        message = _user_error(exc)
        if message is None:
            raise
        raise fail(message) from None


def _print_explain(result: Any, notes: list[str]) -> None:
    t = result.trace
    out.rule(f"[bold]{t['condition']}[/]  {result.image_path}")
    if t.get("ocr") is not None:
        out.print("[bold]OCR[/]:", (t["ocr"].get("text") or "(no text found)").replace("\n", " / "))
    ex = t.get("extraction")
    if ex and ex.get("format") != "ocr_only":
        out.print("[bold]Visual handle[/]:", ex.get("visual_handle") or "(none)")
        for e in ex.get("entities") or []:
            out.print(f"  entity guess: {e['name']} ({e.get('source') or '?'}, {e.get('confidence')})")
        if ex.get("parse_errors"):
            out.print("[yellow]extraction parse problems[/]:", "; ".join(ex["parse_errors"]))
    g = t.get("grounding")
    if g is not None:
        out.print(f"[bold]CultureBase[/] (τ = {g['tau']:.3f}):")
        if not g["hits"]:
            best = g["candidates"][0] if g["candidates"] else None
            out.print("  no entity passed τ" + (f" (best: {best['name']} {best['score']:.3f})" if best else ""))
        for h in g["hits"]:
            src = h["sources"][0]["url"] if h.get("sources") else ""
            out.print(f"  {h['score']:.3f}  {h['name']} — {h.get('source_work') or ''}  [{h['route']}] {src}")
    if t.get("queries"):
        out.print("[bold]Searches[/]:")
        for s in t.get("searches") or []:
            out.print(f"  [Search: {s['query']}]" + (f"  [red]{s['error']['message']}[/]" if s.get("error") else ""))
            for i, r in enumerate(s.get("results") or [], start=1):
                out.print(f"    {i}. {r['title']}  {r['url']}")
    out.print(f"[dim]timings: {t['timings']}  tokens: {t['usage']['total_tokens']}[/]")
    if result.error:
        out.print(f"[bold red]failed at {result.error['stage']}[/]: {result.error['message']}")
    elif result.response is None:
        out.print(f"[bold yellow]{NO_VLM_HELP}[/]")
    else:
        out.rule("explanation")
        out.print(result.response)
    for note in notes:
        if result.response is None and not result.error and note.startswith("No VLM configured"):
            continue  # already said above, with the fix
        out.print(f"[dim]note: {note}[/]")


def explain_command(
    image: Annotated[Path, typer.Argument(help="Image file (PNG/JPEG/WebP/GIF).")],
    condition: Annotated[str, typer.Option("--condition", "-c", help="vanilla, cot, search_cot, kar or context_note.")] = "kar",
    context_note: Annotated[Optional[str], typer.Option("--context-note", help="A cultural context note for the image.")] = None,
    post_text: Annotated[Optional[str], typer.Option("--post-text", help="Text of the post the image came with.")] = None,
    top_comment: Annotated[Optional[str], typer.Option("--top-comment", help="The post's top comment.")] = None,
    language: Annotated[Optional[str], typer.Option("--language", help="Explanation language (zh or en; default en).")] = None,
    ocr: Annotated[Optional[bool], typer.Option("--ocr/--no-ocr", help="Run OCR (default: KAR_OCR_ENABLED).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result and trace as JSON.")] = False,
) -> None:
    """Explain one image and show the trace; without a VLM, show OCR + grounding + search only."""
    from agents.factory import build_pipeline
    from agents.pipeline import CONDITIONS, ExplainContext

    if condition not in CONDITIONS:
        raise fail(f"unknown condition {condition!r}; choose from {', '.join(CONDITIONS)}", 2)
    try:
        data = image.read_bytes()
    except OSError as exc:
        raise fail(f"{image}: {exc.strerror or exc}") from None
    context = ExplainContext(post_text=post_text, top_comment=top_comment, context_note=context_note)

    async def main() -> tuple[Any, list[str]]:
        resources = build_pipeline(_settings(), (condition,), ocr_enabled=ocr)
        try:
            pipeline = resources.pipeline
            if pipeline.deps.vlm is None and condition != "kar":
                # without a VLM only the retrieval side can run; never pretend another condition ran
                raise fail(f"condition {condition} needs a VLM. {NO_VLM_HELP}")
            from agents.runner import _bounded

            work = await _bounded(data)  # decoded once: OCR and the VLM's copy start from the bounded copy
            result = await pipeline.explain(work, condition, context, item_id=image.stem, language=language, image_path=str(image))
            return result, resources.notes
        finally:
            await resources.aclose()

    result, notes = _run(main())
    if json_out:
        payload = result.to_dict()
        payload["notes"] = notes
        if result.response is None and result.error is None:
            payload["message"] = NO_VLM_HELP
        emit_json(payload)
    else:
        _print_explain(result, notes)
    if result.error is not None:
        raise typer.Exit(1)


def run_command(
    dataset: Annotated[Path, typer.Option("--dataset", help="MemeBench benchmark JSON/JSONL file, or a folder of them.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder (traces, predictions, manifest); reruns resume.")],
    conditions: Annotated[str, typer.Option("--conditions", help="Comma-separated conditions.")] = "vanilla,cot,search_cot,kar",
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=1024, help="Items in flight.")] = 8,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Only the first N items.")] = None,
    ocr: Annotated[Optional[bool], typer.Option("--ocr/--no-ocr", help="Run OCR (default: KAR_OCR_ENABLED).")] = None,
    replay_only: Annotated[Optional[bool], typer.Option("--replay-only/--no-replay-only", help="Fail searches that miss the cache.")] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Run failed items (response null) once more; the new attempt is appended.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Run conditions over a benchmark: append-only traces, MemeBench predictions, resumable."""
    from agents.factory import build_pipeline
    from agents.pipeline import CONDITIONS
    from agents.runner import AblationRunner, load_items

    conds = [c.strip() for c in conditions.split(",") if c.strip()]
    bad = [c for c in conds if c not in CONDITIONS]
    if bad or not conds:
        raise fail(f"unknown condition(s) {', '.join(bad) or '(none)'}; choose from {', '.join(CONDITIONS)}", 2)

    async def main() -> Any:
        settings = _settings(search_replay_only=replay_only)
        items = load_items(dataset)[:limit] if limit else load_items(dataset)
        resources = build_pipeline(settings, conds, ocr_enabled=ocr, require_vlm=True)
        try:
            runner = AblationRunner(
                resources.pipeline, out_dir, conds, concurrency=concurrency,
                manifest={"settings": settings.public_dict(), "notes": resources.notes}, retry_failed=retry_failed,
            )
            with progress_bar(disable=json_out and not console.is_terminal) as bar:
                task = bar.add_task(f"running {','.join(conds)}", total=len(items) * len(conds))
                return await runner.run(items, progress=lambda done, total: bar.update(task, completed=done), dataset=str(dataset))
        finally:
            await resources.aclose()

    summary = _run(main())
    if json_out:
        emit_json(summary.to_dict())
    else:
        console.print(
            f"{summary.ran} ran, {summary.skipped} already done, {summary.failed} failed (response null); "
            f"predictions in {Path(summary.out_dir) / 'predictions'}"
        )
