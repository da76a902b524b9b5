"""`kar kb`: import, export, search, stats, reindex, get and delete CultureBase entities."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from services.cli.console import ExitCode, console, emit_json, fail, out, progress_bar, user_errors
from services.cli.options import JsonOption, KbOption
from services.cli.render import mapping_table, print_joins, skipped_routes

kb_app = typer.Typer(
    help="CultureBase: the knowledge base of cultural entities (import, search, stats, export, reindex).",
    no_args_is_help=True,
    epilog="Examples:\n\n  kar kb import examples/culturebase_sample.jsonl\n\n  kar kb search \"Zhuge Liang\" --kb data/demo/culturebase",
)
_state: dict[str, Path | None] = {"kb": None}


@kb_app.callback()
def _kb_options(kb: KbOption = None) -> None:
    """CultureBase: the knowledge base of cultural entities (import, search, stats, export, reindex)."""
    _state["kb"] = kb


def _use_kb(kb: Path | None) -> None:
    """``--kb`` given after the subcommand wins over one given before it (``kar kb --kb DIR stats``)."""
    if kb is not None:
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


@kb_app.command(
    "import",
    epilog="Examples:\n\n  kar kb import examples/culturebase_sample.jsonl\n\n  kar kb import kb_entries.json --kb data/culturebase --json\n\n  kar kb import memes.json --format kym-2023 --category Meme",
)
def import_cmd(
    file: Annotated[Path, typer.Argument(help="A dump file or folder (or a zip / tar.gz of one): our JSONL, the MemeBench release, a KnowYourMeme scrape, KYMKB, Moegirlpedia maps, a crawl's scrapy -o output.", show_default=False)],
    fmt: Annotated[
        Optional[str],
        typer.Option("--format", help="jsonl | release | kym-imkg | kym-2023 | kymkb | crawl | moegirl (default: detected)."),
    ] = None,
    category: Annotated[
        Optional[str], typer.Option("--category", help="Only entries of these categories, comma-separated (KnowYourMeme: Meme,Subculture,...; Moegirlpedia: 日本作品,...).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Read and validate the whole dump and print the report, storing nothing (nothing is embedded).")
    ] = False,
    fetch_images: Annotated[
        Optional[bool],
        typer.Option("--fetch-images/--no-fetch-images", help="Fetch image URLs through the image checks (default: yes for our JSONL and the release, no for the published dumps)."),
    ] = None,
    report_file: Annotated[
        Optional[Path],
        typer.Option("--report", help="Write the report as JSON Lines: every join (with the rule), record kept apart, split, rejected entry and note, then a summary.", show_default=False),
    ] = None,
    json_out: JsonOption = False,
    kb: KbOption = None,
) -> None:
    """Import a dump, streamed (a zip / tar.gz of a dump folder is unpacked first); the report counts stored,
    joined (by identity rule), skipped and rejected entries (exit 3 if any was rejected or the dump was cut)."""
    from contextlib import ExitStack

    _use_kb(kb)
    with user_errors(), ExitStack() as stack:
        categories = [c for c in (category or "").split(",") if c.strip()] or None
        path = _unpacked(file, stack)
        with _open() as kb:
            with progress_bar() as bar:
                task = bar.add_task(f"{'checking' if dry_run else 'importing'} {file.name}", total=None)
                report = kb.import_dump(
                    path, fmt=fmt, categories=categories, fetch_images=fetch_images, dry_run=dry_run,
                    progress=lambda n: bar.advance(task, n), total=lambda n: bar.update(task, total=n),
                )
            total = kb.store.count()
            calibration = None if dry_run or not file.is_file() else _import_calibration(kb, file)
        report.path = str(file)
        if report_file is not None:
            _write_report(report_file, report)
    if json_out:
        emit_json({**report.to_dict(), "total_entities": total, **({"calibration": calibration} if calibration else {})})
    else:
        _print_import_report(report, file, total)
        if calibration:
            console.print(calibration, markup=False, highlight=False, soft_wrap=True)
    if not report.complete:
        raise typer.Exit(ExitCode.PARTIAL)


def _import_calibration(kb: Any, file: Path) -> str | None:
    """The calibration record exported beside ``file`` (``FILE.calibration.json``), stored with the KB: what happened."""
    from retrieval.calibration.sidecar import import_sidecar

    record, why = import_sidecar(kb.store, kb.embedder, file)
    return why or (f"calibration record stored from {file.name}.calibration.json" if record else None)


def _unpacked(file: Path, stack: Any) -> Path:
    """``file`` itself, or for a zip / tar(.gz) archive the dump unpacked from it into a temporary folder
    (removed when ``stack`` closes; the size limit is KAR_IMPORT_ARCHIVE_MAX_MB)."""
    import tempfile

    from culturebase.importers.archive import ArchiveError, archive_kind, unpack_archive
    from culturebase.settings import get_settings
    from retrieval.knowledge_base import ImportFileError

    if not file.is_file():
        return file
    with file.open("rb") as fh:
        if archive_kind(fh.read(512)) is None:
            return file
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kar-import-")))
    try:
        return unpack_archive(file, tmp / "dump", get_settings().import_archive_max_mb * 2**20)
    except ArchiveError as exc:
        raise ImportFileError(f"{file}: {exc} (KAR_IMPORT_ARCHIVE_MAX_MB)" if "limit" in str(exc) else f"{file}: {exc}") from None


def _write_report(path: Path, report: Any) -> None:
    """``--report FILE``: the import report as JSON Lines."""
    import json

    try:
        with path.open("w", encoding="utf-8") as fh:
            for row in report.jsonl_rows():
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise fail(f"--report {path}: cannot write: {exc.strerror or exc}", ExitCode.USAGE) from None


def _print_import_report(report, file: Path, total: int) -> None:  # type: ignore[no-untyped-def]
    """The import report by reason (data printed without markup)."""
    unit = report.unit
    stored = f"would store {report.stored} (dry run: nothing stored)" if report.dry_run else f"stored {report.stored}"
    line = (
        f"{report.format}: read {report.read} entries from {file}: {stored}, "
        f"{report.merged_duplicates} joined into other entities, {report.skipped} skipped by category, "
        f"{len(report.rejected)} rejected; CultureBase now holds {total}"
    )
    console.print(line, highlight=False, markup=False)
    if report.merged_duplicates or report.joins.kept_apart or report.joins.split:
        print_joins(console, report.joins)
    for cat, n in sorted(report.skipped_category.items()):
        console.print(f"  skipped {n} of category {cat}", highlight=False, markup=False)
    for r in report.rejected:
        console.print(f"  {unit} {r.line}: {r.reason}", highlight=False, soft_wrap=True, markup=False)
    if report.notes_total:
        console.print(f"{report.notes_total} field(s) left out or shortened:", highlight=False)
        for n in report.notes[:20]:
            console.print(f"  {unit} {n.line}: {n.field}: {n.reason}", highlight=False, soft_wrap=True, markup=False)
        if report.notes_total > 20:
            console.print(f"  ... and {report.notes_total - 20} more (--json lists {len(report.notes)})", highlight=False)
    if report.images or report.image_problems:
        console.print(f"{report.images} image(s) stored; {len(report.image_problems)} left out", highlight=False)
    for p in report.image_problems:
        console.print(f"  {unit} {p.line}: image {p.image}: {p.reason}", highlight=False, soft_wrap=True, markup=False)
    if report.images_not_fetched:
        console.print(f"{report.images_not_fetched} image URL(s) not fetched (--fetch-images fetches them)", highlight=False)
    if report.stopped:
        console.print(f"stopped: {report.stopped}", highlight=False, soft_wrap=True, markup=False)


@kb_app.command("export", epilog="Examples:\n\n  kar kb export --out culturebase.jsonl\n\n  kar kb export --lang zh > zh.jsonl")
def export_cmd(
    out_file: Annotated[
        Optional[Path], typer.Option("--out", "-o", help="Output JSONL file (default: stdout).", show_default=False)
    ] = None,
    lang: Annotated[Optional[str], typer.Option("--lang", help="Only entities in this language (e.g. en, zh).", show_default=False)] = None,
    kb: KbOption = None,
) -> None:
    """Export every entity as JSONL (the format `kar kb import` reads)."""
    import sys

    _use_kb(kb)
    sidecar = None
    with user_errors(), _open(create=False) as base:
        if out_file is None:
            n = base.export(sys.stdout, language=lang)
        else:
            tmp = out_file.with_name(out_file.name + ".tmp")
            with tmp.open("w", encoding="utf-8") as fh:
                n = base.export(fh, language=lang)
            tmp.replace(out_file)
            from retrieval.calibration.sidecar import write_sidecar

            sidecar = write_sidecar(base.store, out_file)  # the KB's calibration record travels with it
    console.print(f"exported {n} entities" + (f" (calibration record: {sidecar.name})" if out_file and sidecar else ""), highlight=False)


@kb_app.command(
    "search",
    epilog="Examples:\n\n  kar kb search \"Zhuge Liang\" --top-k 3\n\n  kar kb search --image examples/images/doge_such_culture.png --json",
)
def search_cmd(
    text: Annotated[
        Optional[str], typer.Argument(help="Text to ground (it serves as every cue route).", show_default=False)
    ] = None,
    image: Annotated[
        Optional[Path],
        typer.Option("--image", help="An image (meme) to match against entity images by perceptual hash.", show_default=False),
    ] = None,
    audio: Annotated[
        Optional[Path],
        typer.Option("--audio", help="A sound clip (audio, or a video's sound) to match against entity sounds.", show_default=False),
    ] = None,
    lang: Annotated[Optional[str], typer.Option("--lang", help="Only entities in this language (e.g. en, zh).", show_default=False)] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100, help="Entities shown.")] = 5,
    json_out: JsonOption = False,
    kb_dir: KbOption = None,
) -> None:
    """Search CultureBase with the same grounding retriever the pipeline uses (text, an image, a sound, or several)."""
    _use_kb(kb_dir)
    text = text or ""
    if not text.strip() and image is None and audio is None:
        raise fail("search text is empty (give a search text, --image PATH or --audio PATH)", ExitCode.USAGE)
    sound_query = _read_audio(audio) if audio is not None else None
    with user_errors():
        settings = _settings()
        data = _read_image(image) if image is not None else None
        result, calibration, indexed_images = _ground_search(text, data, image, sound_query, lang, top_k, settings)
    hits = [{**h.to_dict(), "passes_tau": result.accepts(h)} for h in result.hits]
    notes = [n for n in (calibration.warning, *calibration.notes) if n]
    if json_out:
        emit_json(
            {"query": text or None, "image": str(image) if image else None, "audio": str(audio) if audio else None, "tau": result.tau, "image_tau": settings.image_tau,
             "routes": result.routes, "hits": hits, "calibration": calibration.summary(), "notes": notes}
        )
        return
    for note in notes:  # said once, before the table
        console.print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)
    _print_search_table(text, image, audio, result.tau, hits)
    if indexed_images == 0:
        out.print(
            "no entity image is indexed: import entities with `image`/`images` fields or run `kar crawl memegen`",
            markup=False, highlight=False,
        )
    for route, why in skipped_routes(result.routes).items():
        out.print(f"route {route}: {why}", markup=False, highlight=False)


def _read_audio(audio: Path) -> Any:
    """``--audio``: the clip decoded for the sound route (exit 2 when it cannot be read or has no sound)."""
    from retrieval.sounds.fingerprint import AudioDecodeError
    from retrieval.sounds.route import prepare

    try:
        return prepare(audio.read_bytes())
    except OSError as exc:
        raise fail(f"cannot read --audio {audio}: {exc.strerror or exc}", ExitCode.USAGE) from None
    except AudioDecodeError as exc:
        raise fail(f"--audio {audio} has no readable sound: {exc}", ExitCode.USAGE) from None


def _read_image(image: Path) -> bytes:
    """``--image``: the file's bytes (exit 2 when it cannot be read)."""
    try:
        return image.read_bytes()
    except OSError as exc:
        raise fail(f"cannot read --image {image}: {exc.strerror or exc}", ExitCode.USAGE) from None


def _ground_search(
    text: str, data: bytes | None, image: Path | None, sound_query: Any, lang: str | None, top_k: int, settings: Any
) -> tuple[Any, Any, int | None]:
    """Ground the search (text as every cue route, plus the image and the clip): the result with its first
    ``top_k`` candidates as hits, the calibration in use, and how many entity images are indexed (an image search)."""
    from retrieval.grounding import EntityGrounder, GroundingCues

    with _open(create=False) as kb:
        grounder = EntityGrounder(
            kb.store, kb.embedder, tau=settings.grounding_tau, top_k=top_k,
            candidates=max(settings.grounding_candidates, top_k), image_route=kb.image_route, sound_route=kb.sound_store,
            require_calibration=settings.require_calibration,
        )
        if data is None and sound_query is None:
            return grounder.search_text(text, language=lang, top_k=top_k), grounder.calibration, None
        cues = GroundingCues.from_text(text) if text.strip() else GroundingCues()
        cues.sound = sound_query
        if data is not None:
            try:
                cues.image = kb.image_route.prepare(data)
            except Exception as exc:  # not an image PIL can read
                raise fail(f"--image {image} is not a readable image: {exc}", ExitCode.USAGE) from None
        result = grounder.ground(cues, language=lang).top(top_k)
        return result, grounder.calibration, kb.image_route.index.count() if data is not None else None


def _print_search_table(text: str, image: Path | None, audio: Path | None, tau: float, hits: list[dict[str, Any]]) -> None:
    """The hits as a table: name, source work, score, route scores (winner first), what matched, ≥τ."""
    from retrieval.grounding import route_summary

    shown = " + ".join(x for x in (repr(text) if text else "", f"image {image}" if image else "", f"audio {audio}" if audio else "") if x)
    table = Table(title=escape(f"CultureBase: {shown} (τ = {tau})"))
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
    out.print(table)
    if not hits:
        out.print("no entity found", highlight=False)


@kb_app.command(
    "import-audio",
    epilog="Example:\n\n  kar kb import-audio sounds/   # sounds/doge.mp3, sounds/rickroll-2.wav, sounds/诸葛亮/x.ogg",
)
def import_audio_cmd(
    folder: Annotated[Path, typer.Argument(help="A folder of sound files named by entity (id or name), or one sub-folder per entity.")],
    json_out: JsonOption = False,
    kb: KbOption = None,
) -> None:
    """Give entities sounds: each file's entity is its sub-folder's name, else its file name without the
    extension and a trailing ``-N``/``_N`` (an entity id, name or alias).  The sounds are stored and
    fingerprinted for the sound route; files that name no entity or hold no sound are listed."""
    _use_kb(kb)
    if not folder.is_dir():
        raise fail(f"{folder} is not a folder", ExitCode.USAGE)
    with user_errors():
        from retrieval.sounds.importing import import_audio_folder

        with _open(create=False) as base:
            report = import_audio_folder(base, folder)
    if json_out:
        emit_json(report)
        return
    out.print(
        f"sounds: {report['stored']} stored for {report['entities']} entities, {len(report['problems'])} left out",
        markup=False, highlight=False,
    )
    for p in report["problems"]:
        out.print(f"  {p['file']}: {p['reason']}", markup=False, highlight=False)


@kb_app.command("stats", epilog="Examples:\n\n  kar kb stats\n\n  kar kb stats --kb data/demo/culturebase --json")
def stats_cmd(json_out: JsonOption = False, kb: KbOption = None) -> None:
    """Entity counts by language and site, corpus size, entity images, backend, storage and embedder."""
    _use_kb(kb)
    with user_errors(), _open(create=False) as base:
        stats = base.store.stats()
        from retrieval.calibration.stats import calibration_stats
        from retrieval.images.route import image_stats

        stats["entity_images"] = image_stats(base.store, base.image_route)
        stats["calibration"] = calibration_stats(base.store, base.embedder)
    if json_out:
        emit_json(stats)
        return
    print_stats(stats, _settings().kb_path)


def print_stats(stats: dict, kb_path: Path) -> None:
    """``kar kb stats`` as text: a summary table, then entities by language and by site."""
    summary = Table(title=escape(f"CultureBase {stats.get('backend') or kb_path}"), title_justify="left",
                    show_header=False, box=None, pad_edge=False)
    summary.add_column(style="bold")
    summary.add_column(overflow="fold")  # a long path or reason is wrapped, never cut
    storage = stats.get("storage")
    if isinstance(storage, dict):  # the layout, and why it is read-only
        storage = storage.get("describe", "") + (f"; read-only: {storage['read_only']}" if storage.get("read_only") else "")
    emb = stats.get("embedder") or {}
    embedder = f"{emb.get('name')} ({emb.get('dim')}-d dense"
    embedder += ", sparse lexical weights)" if emb.get("sparse") else "; no sparse lexical weights, so the sparse route never runs)"
    lexical = stats.get("lexical_index")
    rows = [
        ("entities", f"{stats['entities']:,}"),
        ("crawled page chunks", f"{stats.get('corpus_chunks', 0):,}" + ("" if stats.get("corpus_chunks") else "  (local web search has nothing to search: see `kar crawl`)")),
        ("entity images", _images_line(stats["entity_images"]) if "entity_images" in stats else "-"),
        ("embedder", embedder),
        ("lexical index", "-" if lexical is None else "yes" if lexical else "no (run `kar kb reindex`)"),
        ("storage", str(storage or "-")),
        *calibration_rows(stats.get("calibration")),
    ]
    for label, value in rows:
        summary.add_row(escape(label), escape(value))
    out.print(summary)
    if stats.get("by_language"):
        out.print(mapping_table("entities by language", stats["by_language"], "language", "entities"))
    if stats.get("by_site"):
        out.print(mapping_table("entities by site", stats["by_site"], "site", "entities"))


def calibration_rows(cal: dict | None) -> list[tuple[str, str]]:
    """``kar kb stats``: the calibration in use (source, τ and floors, when fitted, held-out figures) and its warnings."""
    if not cal:
        return []
    t = cal["thresholds"]
    values = f"τ {t['tau']}, height {t['min_height']}, evidence {t['min_evidence']}, corpus floors {t['corpus_floor']} / {t['corpus_ordinary_floor']}"
    rec = cal.get("record") or {}
    source = {"kb": "fitted for this KB by `kar calibrate`", "bundled": "the bundled record of the embedder",
              "conservative": "none: conservative values"}[cal["source"]]
    if rec:
        source += f", {rec['created_at'][:10]}, at {rec['kb_entities']:,} entities"
        held = rec.get("held_out") or {}
        if "false_rate" in held:
            source += f"; held-out false {held['false_rate']:.1%}, top-1 {held.get('top1', 0):.1%}"
    rows = [("calibration", f"{source}: {values}")]
    rows += [("warning", n) for n in (cal.get("warning"), *cal.get("notes", [])) if n]
    return rows


def _images_line(s: dict) -> str:
    """``kar kb stats``: entity images in one line (counts by kind, hashed and embedded points); the caller escapes it."""
    kinds = ", ".join(f"{k} {n}" for k, n in s["by_kind"].items())
    line = f"{s['images']}" + (f" ({kinds})" if kinds else "") + f" on {s['entities_with_images']} entities; hashed {s['hashed']}"
    if "embedded" in s:
        line += f", embedded {s['embedded']} ({s['image_embedder']})"
    return line


@kb_app.command("reindex-images", epilog="Example:\n\n  kar kb reindex-images --kb data/culturebase")
def reindex_images_cmd(json_out: JsonOption = False, kb: KbOption = None) -> None:
    """Hash (and with KAR_IMAGE_EMBEDDER, embed) every entity image again into fresh image collections."""
    _use_kb(kb)
    with user_errors(), _open(create=False) as base:
        route = base.image_route
        if route is None:
            raise fail("no image route: settings are missing")
        counts = route.rebuild()
    if json_out:
        emit_json(counts)
    else:
        out.print(", ".join(f"{k} {v}" for k, v in counts.items()), highlight=False, markup=False)


@kb_app.command("get", epilog="Example:\n\n  kar kb get doge --kb data/demo/culturebase")
def get_cmd(
    entity_id: Annotated[str, typer.Argument(help="Entity id (as `kar kb search --json` shows it).", show_default=False)],
    kb: KbOption = None,
) -> None:
    """Print one entity as JSON."""
    _use_kb(kb)
    with user_errors(), _open(create=False) as base:
        entity = base.store.get(entity_id)
    if entity is None:
        raise fail(f"no entity with id {entity_id!r}")
    emit_json(entity.model_dump(mode="json"))


@kb_app.command("merges", epilog="Examples:\n\n  kar kb merges\n\n  kar kb merges --json")
def merges_cmd(json_out: JsonOption = False, kb: KbOption = None) -> None:
    """List the entities joined from more than one record, with each record's page and the rule that joined it."""
    from culturebase.identity import merged_entities

    _use_kb(kb)
    with user_errors(), _open(create=False) as base:
        rows = [
            {"id": e.id, "name": e.name, "parts": [
                {"id": p.id, "name": p.name, "source": p.url, "site": p.site, "rule": p.rule, "joined_at": p.joined_at.isoformat()}
                for p in e.constituents
            ]}
            for e in merged_entities(base.store.iter_entities())
        ]
    if json_out:
        emit_json({"merged_entities": rows})
        return
    if not rows:
        console.print("no entity was joined from more than one record", highlight=False, markup=False)
    for row in rows:
        out.print(f"{row['name']} ({row['id']}): {len(row['parts'])} records", highlight=False, markup=False)
        for p in row["parts"]:
            out.print(f"  {p['rule']}: {p['name']} · {p['source'] or p['id']}", highlight=False, soft_wrap=True, markup=False)


@kb_app.command("split", epilog="Example:\n\n  kar kb split cb_0123456789abcdef0123 --source https://api.memegen.link/templates/jim")
def split_cmd(
    entity_id: Annotated[str, typer.Argument(help="The joined entity's id (as `kar kb merges` shows it).", show_default=False)],
    source: Annotated[str, typer.Option("--source", help="The page of the record to take back out (a source URL `kar kb merges` lists).", show_default=False)],
    json_out: JsonOption = False,
    kb: KbOption = None,
) -> None:
    """Take a wrongly joined record back out into its own entity, re-embedded, with its images and sounds."""
    from culturebase.identity import SplitError

    _use_kb(kb)
    with user_errors(), _open(create=False) as base:
        try:
            kept, split_out = base.split(entity_id, source)
        except KeyError:
            raise fail(f"no entity with id {entity_id!r}") from None
        except SplitError as exc:
            raise fail(str(exc), ExitCode.USAGE) from None
    if json_out:
        emit_json({"kept": kept.model_dump(mode="json"), "split": split_out.model_dump(mode="json")})
        return
    console.print(
        f"took {split_out.name} ({split_out.id}) out of {kept.name} ({kept.id}); {len(split_out.images)} image(s) and "
        f"{len(split_out.audio)} sound(s) went with it",
        highlight=False, markup=False,
    )


@kb_app.command("delete", epilog="Example:\n\n  kar kb delete doge rickroll")
def delete_cmd(
    entity_ids: Annotated[list[str], typer.Argument(help="Entity ids to delete.", show_default=False)],
    json_out: JsonOption = False,
    kb: KbOption = None,
) -> None:
    """Delete entities by id (exit 1 if none of them existed)."""
    _use_kb(kb)
    with user_errors(), _open(create=False) as base:
        deleted = base.store.delete(entity_ids)
        if base.image_route is not None:
            base.image_route.delete_entities(entity_ids)
        total = base.store.count()
    if json_out:
        emit_json({"deleted": deleted, "requested": len(entity_ids), "total_entities": total})
    if not deleted:
        raise fail(f"no entity with id {', '.join(entity_ids)}")
    if not json_out:
        console.print(f"deleted {deleted} of {len(entity_ids)}; {total} left", highlight=False, markup=False)


@kb_app.command("reindex", epilog="Examples:\n\n  kar kb reindex\n\n  KAR_EMBEDDER=bge-m3 kar kb reindex --re-embed --kb data/culturebase")
def reindex_cmd(
    json_out: JsonOption = False,
    re_embed: Annotated[
        bool, typer.Option("--re-embed", help="Re-embed even when the configured embedder built the KB.")
    ] = False,
    kb: KbOption = None,
) -> None:
    """Rebuild CultureBase with the current settings and swap it in atomically.

    Stored vectors are reused when the configured embedder built the KB (storage/index settings
    changed, or an older layout is migrated); otherwise every entity is re-embedded."""
    _use_kb(kb)
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
        out.print(
            f"reindexed {result['entities']} entities and {result['corpus_chunks']} corpus chunks ({how}): "
            f"{result['from']} → {result['to']}",
            highlight=False,
            markup=False,
        )
