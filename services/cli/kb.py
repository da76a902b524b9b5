"""`kar kb`: import, export, search, stats, reindex, get and delete CultureBase entities."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from services.cli.common import console, emit_json, fail, progress_bar, user_errors

kb_app = typer.Typer(help="CultureBase: the knowledge base of cultural entities.", no_args_is_help=True)
_state: dict[str, Path | None] = {"kb": None}


@kb_app.callback()
def _kb_options(
    kb: Annotated[Optional[Path], typer.Option("--kb", help="CultureBase folder (overrides KAR_KB_PATH).")] = None,
) -> None:
    _state["kb"] = kb


def _settings():  # type: ignore[no-untyped-def]
    from culturebase.settings import get_settings

    settings = get_settings()
    if _state["kb"] is not None:
        settings = settings.model_copy(update={"kb_path": _state["kb"]})
    return settings


def _open(create: bool = True):  # type: ignore[no-untyped-def]
    from retrieval.knowledge_base import KnowledgeBase

    return KnowledgeBase.open(_settings(), create=create)


@kb_app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="Our JSONL, or the MemeBench release's kb_entries.json.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the import report as JSON.")] = False,
) -> None:
    """Import entities; rejected lines are reported with line numbers and reasons (exit 3 if any)."""
    with user_errors():
        with _open() as kb:
            entities, report = kb.validate_file(file)
            with progress_bar() as bar:
                task = bar.add_task(f"embedding {file.name}", total=len(entities))
                report.stored = kb.bulk_add(entities, progress=lambda n: bar.advance(task, n))
            total = kb.store.count()
    if json_out:
        emit_json({**report.to_dict(), "total_entities": total})
    else:
        console.print(
            f"stored {report.stored} entities from {file} ({report.merged_duplicates} duplicates merged, "
            f"{len(report.rejected)} rejected); CultureBase now holds {total}",
            highlight=False,
            markup=False,
        )
        for r in report.rejected:
            console.print(f"  line {r.line}: {r.reason}", highlight=False, soft_wrap=True, markup=False)
        if report.images or report.image_problems:
            console.print(f"{report.images} image(s) stored; {len(report.image_problems)} left out", highlight=False)
        for p in report.image_problems:
            console.print(f"  line {p.line}: image {p.image}: {p.reason}", highlight=False, soft_wrap=True, markup=False)
    if report.rejected:
        raise typer.Exit(3)


@kb_app.command("export")
def export_cmd(
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Output JSONL file (default: stdout).")] = None,
    lang: Annotated[Optional[str], typer.Option("--lang", help="Only entities in this language.")] = None,
) -> None:
    """Export every entity as JSONL."""
    import sys

    with user_errors(), _open(create=False) as kb:
        if out is None:
            n = kb.export(sys.stdout, language=lang)
        else:
            tmp = out.with_name(out.name + ".tmp")
            with tmp.open("w", encoding="utf-8") as fh:
                n = kb.export(fh, language=lang)
            tmp.replace(out)
    console.print(f"exported {n} entities", highlight=False)


@kb_app.command("search")
def search_cmd(
    text: Annotated[Optional[str], typer.Argument(help="Text to ground (it serves as every cue route).")] = None,
    image: Annotated[
        Optional[Path], typer.Option("--image", help="An image (meme) to match against entity images by perceptual hash.")
    ] = None,
    lang: Annotated[Optional[str], typer.Option("--lang", help="Only entities in this language.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100)] = 5,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Search CultureBase with the same grounding retriever the pipeline uses (text, an image, or both)."""
    text = text or ""
    if not text.strip() and image is None:
        raise fail("search text is empty (give a search text or --image PATH)")
    with user_errors():
        from retrieval.grounding import EntityGrounder, GroundingCues, accepts

        settings = _settings()
        data = None
        indexed_images = None
        if image is not None:
            try:
                data = image.read_bytes()
            except OSError as exc:
                raise fail(f"cannot read --image {image}: {exc.strerror or exc}") from None
        with _open(create=False) as kb:
            grounder = EntityGrounder(
                kb.store, kb.embedder, tau=settings.grounding_tau, top_k=top_k,
                candidates=max(settings.grounding_candidates, top_k), image_route=kb.image_route,
            )
            if data is None:
                result = grounder.search_text(text, language=lang, top_k=top_k)
            else:
                try:
                    query = kb.image_route.hash_query(data)
                except Exception as exc:  # not an image PIL can read
                    raise fail(f"--image {image} is not a readable image: {exc}") from None
                cues = GroundingCues.from_text(text) if text.strip() else GroundingCues()
                cues.image = query
                full = grounder.ground(cues, language=lang)
                result = type(full)(full.candidates[:top_k], full.candidates, full.tau, full.routes)
                indexed_images = kb.image_route.index.count()
    hits = [{**h.to_dict(), "passes_tau": accepts(h, result.tau)} for h in result.hits]
    if json_out:
        emit_json(
            {"query": text or None, "image": str(image) if image else None, "tau": result.tau, "image_tau": settings.image_tau,
             "routes": result.routes, "hits": hits}
        )
        return
    from retrieval.grounding import route_summary

    shown = " + ".join(x for x in (repr(text) if text else "", f"image {image}" if image else "") if x)
    table = Table(title=escape(f"CultureBase: {shown} (τ = {result.tau})"))
    columns = ["#", "name", "source work", "score", "route scores (winner first)", "matched", "≥τ"]
    if image is not None:  # the image route's distance only means something for an image search
        columns.insert(-1, "image distance")
    for col in columns:
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        matched = h["matched_alias"] or (h["matched_caption"] or {}).get("catchphrase") or ""
        cells = [str(i), h["name"], h["source_work"], f"{h['score']:.3f}", route_summary(h), matched, "yes" if h["passes_tau"] else ""]
        if image is not None:
            cells.insert(-1, "" if h.get("image_distance") is None else f"{h['image_distance']}/128")
        table.add_row(*(escape(c) for c in cells))
    Console().print(table)
    if not hits:
        Console().print("no entity found", highlight=False)
    if indexed_images == 0:
        Console().print(
            "no entity image is indexed: import entities with `image`/`images` fields or run `kar crawl memegen`",
            markup=False, highlight=False,
        )
    skipped = {r: why for r, why in result.routes.items() if why != "ran" and not why.startswith("ran ")}
    for route, why in skipped.items():
        Console().print(f"route {route}: {why}", markup=False, highlight=False)


@kb_app.command("stats")
def stats_cmd(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Entity counts by language and site, corpus size, backend and embedder."""
    with user_errors(), _open(create=False) as kb:
        stats = kb.store.stats()
        from retrieval.image_route import image_stats

        stats["entity_images"] = image_stats(kb.store, kb.image_route)
    if json_out:
        emit_json(stats)
    else:
        from rich.markup import escape

        for key, value in stats.items():
            if key == "storage" and isinstance(value, dict):  # one line: the layout, and why it is read-only
                value = value.get("describe", "") + (f"; read-only: {value['read_only']}" if value.get("read_only") else "")
            if key == "entity_images":
                value = _images_line(value)
            Console().print(escape(f"{key}: {value}"), highlight=False, soft_wrap=True)


def _images_line(s: dict) -> str:
    """``kar kb stats``: entity images in one line (counts by kind, hashed and embedded points); the caller escapes it."""
    kinds = ", ".join(f"{k} {n}" for k, n in s["by_kind"].items())
    line = f"{s['images']}" + (f" ({kinds})" if kinds else "") + f" on {s['entities_with_images']} entities; hashed {s['hashed']}"
    if "embedded" in s:
        line += f", embedded {s['embedded']} ({s['image_embedder']})"
    return line


@kb_app.command("reindex-images")
def reindex_images_cmd(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Hash (and with KAR_IMAGE_EMBEDDER, embed) every entity image again into fresh image collections."""
    with user_errors(), _open(create=False) as kb:
        route = kb.image_route
        if route is None:
            raise fail("no image route: settings are missing")
        counts = route.rebuild()
    if json_out:
        emit_json(counts)
    else:
        Console().print(", ".join(f"{k} {v}" for k, v in counts.items()), highlight=False)


@kb_app.command("get")
def get_cmd(entity_id: Annotated[str, typer.Argument()]) -> None:
    """Print one entity as JSON."""
    with user_errors(), _open(create=False) as kb:
        entity = kb.store.get(entity_id)
    if entity is None:
        raise fail(f"no entity with id {entity_id!r}")
    emit_json(entity.model_dump(mode="json"))


@kb_app.command("delete")
def delete_cmd(
    entity_ids: Annotated[list[str], typer.Argument(help="Entity ids to delete.")],
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Delete entities by id (exit 1 if none of them existed)."""
    with user_errors(), _open(create=False) as kb:
        deleted = kb.store.delete(entity_ids)
        if kb.image_route is not None:
            kb.image_route.delete_entities(entity_ids)
        total = kb.store.count()
    if json_out:
        emit_json({"deleted": deleted, "requested": len(entity_ids), "total_entities": total})
    if not deleted:
        raise fail(f"no entity with id {', '.join(entity_ids)}")
    if not json_out:
        console.print(f"deleted {deleted} of {len(entity_ids)}; {total} left", highlight=False)


@kb_app.command("reindex")
def reindex_cmd(
    json_out: Annotated[bool, typer.Option("--json")] = False,
    re_embed: Annotated[
        bool, typer.Option("--re-embed", help="Re-embed even when the configured embedder built the KB.")
    ] = False,
) -> None:
    """Rebuild CultureBase with the current settings and swap it in atomically.

    Stored vectors are reused when the configured embedder built the KB (storage/index settings
    changed, or an older layout is migrated); otherwise every entity is re-embedded."""
    with user_errors():
        from retrieval.embedders import build_embedder
        from retrieval.knowledge_base import KnowledgeBase

        settings = _settings()
        embedder = build_embedder(settings)
        with progress_bar() as bar:
            task = bar.add_task("rebuilding", total=None)
            result = KnowledgeBase.reindex(settings, embedder, progress=lambda n: bar.advance(task, n), re_embed=re_embed)
    if json_out:
        emit_json(result)
    else:
        how = "stored vectors reused" if result.get("reused_vectors") else "re-embedded"
        Console().print(  # a console on the current stdout (as stats/search use)
            f"reindexed {result['entities']} entities and {result['corpus_chunks']} corpus chunks ({how}): "
            f"{result['from']} → {result['to']}",
            highlight=False,
        )
