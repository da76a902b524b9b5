"""Typer function for ``kar explain`` and the helpers ``kar run`` shares (registered into the ``kar`` app by services.cli).

Kept free of pipeline logic: they build the pipeline from settings, call its async API and
print.  Errors are one line on stderr with a non-zero exit code.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from culturebase.console import emit_json, fail

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
    from agents.vlm import VLMNotConfiguredError
    from culturebase.store import StoreError
    from retrieval.embedders import EmbedderUnavailableError
    from retrieval.websearch import SearchNotConfiguredError

    if isinstance(exc, (StoreError, EmbedderUnavailableError, SearchNotConfiguredError, VLMNotConfiguredError)):
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
    from retrieval.grounding import route_summary

    """Human output of ``kar explain``; every piece of data is escaped (rich would eat ``[text]`` as markup)."""
    t = result.trace
    out.rule(f"[bold]{escape(t['condition'])}[/]  {escape(str(result.image_path))}")
    if t.get("ocr") is not None:
        out.print("[bold]OCR[/]:", escape((t["ocr"].get("text") or "(no text found)").replace("\n", " / ")))
    ex = t.get("extraction")
    if ex and ex.get("format") != "ocr_only":
        out.print("[bold]Visual handle[/]:", escape(ex.get("visual_handle") or "(none)"))
        for e in ex.get("entities") or []:
            out.print(escape(f"  entity guess: {e['name']} ({e.get('source') or '?'}, {e.get('confidence')})"))
        if ex.get("parse_errors"):
            out.print("[yellow]extraction parse problems[/]:", escape("; ".join(ex["parse_errors"])))
    g = t.get("grounding")
    if g is not None:
        out.print(f"[bold]CultureBase[/] (τ = {g['tau']:.3f}):")
        if not g["hits"]:
            best = g["candidates"][0] if g["candidates"] else None
            out.print(escape("  no entity passed τ" + (f" (best: {best['name']} {best['score']:.3f})" if best else "")))
        for h in g["hits"]:
            src = h["sources"][0]["url"] if h.get("sources") else ""
            out.print(escape(f"  {h['score']:.3f}  {h['name']} — {h.get('source_work') or ''}  [{route_summary(h)}] {src}"))
            if h.get("matched_caption"):
                out.print(escape(f"         caption: {h['matched_caption']['line']} ≈ {h['matched_caption']['catchphrase']}"))
        skipped = {r: why for r, why in (g.get("routes") or {}).items() if why != "ran" and not why.startswith("ran ")}
        for route, why in skipped.items():
            out.print(f"[dim]{escape(f'  route {route}: {why}')}[/]")
    if t.get("queries"):
        out.print("[bold]Searches[/]:")
        for s in t.get("searches") or []:
            out.print(escape(f"  [Search: {s['query']}]") + (f"  [red]{escape(s['error']['message'])}[/]" if s.get("error") else ""))
            for i, r in enumerate(s.get("results") or [], start=1):
                out.print(escape(f"    {i}. {r['title']}  {r['url']}"))
    timings = escape(f"timings: {t['timings']}  tokens: {t['usage']['total_tokens']}")
    out.print(f"[dim]{timings}[/]")
    if result.error:
        out.print(f"[bold red]failed at {escape(result.error['stage'])}[/]: {escape(result.error['message'])}")
    elif result.response is None:
        out.print(f"[bold yellow]{escape(NO_VLM_HELP)}[/]")
    else:
        out.rule("explanation")
        out.print(result.response, markup=False)
    for note in notes:
        if result.response is None and not result.error and note.startswith("No VLM configured"):
            continue  # already said above, with the fix
        out.print(f"[dim]note: {escape(note)}[/]")


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
