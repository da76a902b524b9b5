"""``kar explain FILE``: one image, clip or sound through the pipeline, with the trace shown as text (or JSON).

The file is recognised by its content (:mod:`agents.media.sniff`): an image is checked and bounded
once; a video (MP4, WebM, MOV, animated GIF/WebP) or a sound (MP3, WAV, OGG, M4A, FLAC) goes through
the runner's media preparation (:func:`agents.media.explain.prepare_media`) within ``KAR_MEDIA_MAX_*``;
anything else exits 2 naming the formats.

Only terminal work lives here: settings from the command line, ``agents.factory.build_pipeline``,
the pipeline's async API, and printing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from services.cli.console import ExitCode, emit_json, fail, out, run_async, settings_with
from services.cli.options import ApiKeyOption, BaseUrlOption, JsonOption, KbOption, ModelOption, kb_override, vlm_overrides
from services.cli.render import skipped_routes, timings_line

NO_VLM_HELP = (
    "No explanation was generated: no VLM is configured. Give --base-url and --model (or set KAR_VLM_BASE_URLS, an "
    "OpenAI-compatible base URL such as http://localhost:8001/v1 for `vllm serve Qwen/Qwen2.5-VL-7B-Instruct --port 8001`, "
    "and KAR_VLM_MODEL; plus KAR_VLM_API_KEY if the server needs one)."
)

EXAMPLES = """\
Examples:

  kar explain examples/images/doge_such_culture.png

  kar explain meme.png --condition kar --base-url http://localhost:8001/v1 --model Qwen/Qwen2.5-VL-7B-Instruct --json

  kar explain clip.mp4   # a video: sampled frames, OCR of each, audio per KAR_MEDIA_AUDIO / KAR_ASR_*
"""


def print_explain(result: Any, notes: list[str]) -> None:
    """Human output of ``kar explain``; every piece of data is escaped (rich would eat ``[text]`` as markup)."""
    from retrieval.grounding import route_summary

    t = result.trace
    out.rule(f"[bold]{escape(t['condition'])}[/]  {escape(str(result.image_path))}")
    media = t.get("media")
    if media and media.get("kind") in ("video", "audio"):
        frames = media.get("frames") or []
        said = f"{media['kind']} ({media.get('format') or '?'}), {media.get('duration_s', 0):.1f} s"
        if media["kind"] == "video":
            said += f", {len(frames)} frames at " + ", ".join(f"{f['t']:.1f}" for f in frames) + " s"
        said += f"; audio: {media.get('audio_mode')}"
        out.print("[bold]Media[/]:", escape(said))
        if media.get("transcript"):
            out.print("[bold]Transcript[/]:", escape(media["transcript"]))
        for note in media.get("notes") or []:
            out.print(f"[dim]{escape('  ' + note)}[/]")
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
        for route, why in skipped_routes(g.get("routes")).items():
            out.print(f"[dim]{escape(f'  route {route}: {why}')}[/]")
    if t.get("queries"):
        out.print("[bold]Searches[/]:")
        for s in t.get("searches") or []:
            out.print(escape(f"  [Search: {s['query']}]") + (f"  [red]{escape(s['error']['message'])}[/]" if s.get("error") else ""))
            for i, r in enumerate(s.get("results") or [], start=1):
                out.print(escape(f"    {i}. {r['title']}  {r['url']}"))
            if not s.get("results") and not s.get("error"):
                out.print("    (no results)", markup=False)
    ev = t.get("evidence") or {}
    if t.get("queries") and "pieces" in ev:
        out.print("[bold]Evidence[/]:")
        for i, p in enumerate(ev["pieces"], start=1):
            why = p["reason"] + (f": {p['entity']}" if p.get("entity") else "")
            where = f"{p['backend']}" + (f", query {p['query']!r}, rank {p['rank']}" if p.get("query") else "")
            score = f", score {p['score']:.3f}" if isinstance(p.get("score"), (int, float)) else ""
            out.print(escape(f"  {i}. {p['title']}  {p['url']}  ({why}; {where}{score})"))
        if ev.get("dropped"):
            out.print(escape("  left out: " + ", ".join(f"{n} {r}" for r, n in sorted(ev["dropped"].items()))), style="dim")
        if not ev["pieces"] and ev.get("none_reason"):
            out.print(escape(f"  no evidence: {ev['none_reason']}"))
    out.print(f"[dim]{escape('timings: ' + timings_line(t['timings']) + '; tokens: ' + str(t['usage']['total_tokens']))}[/]")
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


def _sniffed(path: Path) -> Any:
    """What the file is, by its content; exit 2 naming the formats for anything else."""
    from agents.media.explain import sniff_file
    from agents.media.sniff import UnsupportedMedia

    try:
        return sniff_file(path)
    except OSError as exc:
        raise fail(f"{path}: {exc.strerror or exc}", ExitCode.USAGE) from None
    except UnsupportedMedia as exc:
        raise fail(f"{path}: {exc}", ExitCode.USAGE) from None


async def _inputs(path: Path, sniffed: Any, settings: Any, language: str | None) -> tuple[bytes, dict[str, Any] | None]:
    """The pipeline's image and extras: an image checked and bounded once; a clip or a sound prepared
    (frames, audio, transcript) within KAR_MEDIA_MAX_*; what cannot be read exits 2 with the reason."""
    import asyncio

    from agents.media.explain import prepare_media
    from agents.media.frames import MediaError
    from culturebase.cpu import cpu_pool

    size = path.stat().st_size
    if sniffed.kind == "image":
        from culturebase.bounded_image import decode_megapixels
        from culturebase.images import ImageRejected, check_image_bytes

        data = path.read_bytes()
        side = max(settings.ocr_max_side, settings.vlm_max_image_side)
        try:  # decoded once: OCR and the VLM's copy start from the bounded copy
            checked = await cpu_pool().run_decode(decode_megapixels(data, side), check_image_bytes, data, len(data) + 1,
                                                  settings.max_image_pixels, side)
        except ImageRejected as exc:
            raise fail(f"{path}: {exc}", ExitCode.USAGE) from None
        return checked.data, None
    limit = int(settings.media_max_mb * 2**20)
    if size > limit:
        raise fail(f"{path}: the file is {size} bytes; the limit is {limit} bytes (KAR_MEDIA_MAX_MB)", ExitCode.USAGE)
    try:
        media = await asyncio.to_thread(prepare_media, path, sniffed, settings, language=language)
    except MediaError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    return media.image, media.extras


def explain_command(
    image: Annotated[
        Path,
        typer.Argument(help="An image (PNG, JPEG, WebP, GIF), a video (MP4, WebM, MOV, animated GIF/WebP) or a sound "
                       "(MP3, WAV, OGG, M4A, FLAC), recognised by its content.", show_default=False),
    ],
    condition: Annotated[
        str, typer.Option("--condition", "-c", help="vanilla, cot, search_cot, kar or context_note (all but kar need a VLM).")
    ] = "kar",
    kb: KbOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    api_key: ApiKeyOption = None,
    context_note: Annotated[Optional[str], typer.Option("--context-note", help="A cultural context note for the image.")] = None,
    post_text: Annotated[Optional[str], typer.Option("--post-text", help="Text of the post the image came with.")] = None,
    top_comment: Annotated[Optional[str], typer.Option("--top-comment", help="The post's top comment.")] = None,
    language: Annotated[
        Optional[str], typer.Option("--language", help="Explanation language: en or zh (default: en).", show_default=False)
    ] = None,
    ocr: Annotated[
        Optional[bool], typer.Option("--ocr/--no-ocr", help="Run OCR (default: KAR_OCR_ENABLED, on).", show_default=False)
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Explain one image, clip or sound and show the trace: media, OCR, grounded entities, searches, evidence, timings.

    Without a VLM the default condition (kar) still runs OCR + grounding + search and says that no
    explanation was generated (exit 0); the other conditions need a VLM (exit 2)."""
    from agents.factory import build_pipeline
    from agents.pipeline import CONDITIONS, ExplainContext

    if condition not in CONDITIONS:
        raise fail(f"unknown condition {condition!r}; choose from {', '.join(CONDITIONS)}", ExitCode.USAGE)
    sniffed = _sniffed(image)
    context = ExplainContext(post_text=post_text, top_comment=top_comment, context_note=context_note)

    async def main() -> tuple[Any, list[str]]:
        settings = settings_with(**kb_override(kb), **vlm_overrides(model, base_url, api_key))
        resources = build_pipeline(settings, (condition,), ocr_enabled=ocr)
        try:
            pipeline = resources.pipeline
            if pipeline.deps.grounder is not None:  # the model, jieba's tables, OpenCV ... load while OCR reads the image
                from retrieval.warmup import start_warmup

                start_warmup(pipeline.deps.grounder)
            refusal = getattr(pipeline.deps.grounder, "refusal", None)
            if refusal is not None and condition == "kar":  # KAR_REQUIRE_CALIBRATION and no record: exit 2
                raise fail(str(refusal), ExitCode.USAGE)
            if pipeline.deps.vlm is None and condition != "kar":
                # without a VLM only the retrieval side can run; never pretend another condition ran
                raise fail(f"condition {condition} needs a VLM. {NO_VLM_HELP}", ExitCode.USAGE)
            if not json_out:  # said before the work starts, not discovered in the trace afterwards
                for note in resources.notes:
                    if note.startswith(("no web evidence", "grounding is not calibrated")):
                        from services.cli.console import err

                        err.print(f"[yellow]warning:[/] {escape(note)}", soft_wrap=True)
            work, extras = await _inputs(image, sniffed, settings, language)
            result = await pipeline.explain(work, condition, context, item_id=image.stem, language=language, image_path=str(image),
                                            extras=extras)
            return result, resources.notes
        finally:
            await resources.aclose()

    result, notes = run_async(main())
    if json_out:
        payload = result.to_dict()
        payload["notes"] = notes
        if result.response is None and result.error is None:
            payload["message"] = NO_VLM_HELP
        emit_json(payload)
    else:
        print_explain(result, [n for n in notes if not n.startswith("no web evidence")])
    if result.error is not None:
        from services.cli.errors import stage_error_line

        raise fail(stage_error_line(result.error), ExitCode.FAILED)
