"""`kar corpus`: the pages the local web search searches (import, stats, search, delete)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from services.cli.console import ExitCode, emit_json, fail, out, progress_bar, user_errors
from services.cli.options import JsonOption, KbOption

corpus_app = typer.Typer(
    help="The search corpus: crawled and imported pages that the local web search (KAR's evidence) searches.",
    no_args_is_help=True,
    epilog="Examples:\n\n  kar corpus import pages.jsonl\n\n  kar corpus search \"Potion Seller meme origin meaning\"\n\n  kar corpus stats --json",
)
_state: dict[str, Path | None] = {"kb": None}


@corpus_app.callback()
def _corpus_options(kb: KbOption = None) -> None:
    """The search corpus: crawled and imported pages that the local web search (KAR's evidence) searches."""
    _state["kb"] = kb


def _open(kb: Path | None, create: bool = True):  # type: ignore[no-untyped-def]
    from culturebase.settings import get_settings
    from retrieval.knowledge_base import KnowledgeBase

    settings = get_settings()
    path = kb or _state["kb"]
    if path is not None:
        settings = settings.model_copy(update={"kb_path": path})
    return KnowledgeBase.open(settings, create=create), settings


def _plain(text: str) -> None:
    out.print(text, highlight=False, markup=False, soft_wrap=True)


@corpus_app.command(
    "import",
    epilog="Examples:\n\n  kar corpus import pages.jsonl\n\n  kar corpus import crawl.warc.gz --dry-run\n\n  kar corpus import dumps/ --json",
)
def import_cmd(
    path: Annotated[Path, typer.Argument(help="A page dump or a folder of them: JSONL pages (url, title, text, site?, entity?), WARC / WARC.gz, `scrapy crawl -o` output (.json / .jl).", show_default=False)],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Read and check every record and print the report; store nothing.")] = False,
    json_out: JsonOption = False,
    kb: KbOption = None,
) -> None:
    """Import pages into the search corpus, streamed; a page already there is replaced (by URL).
    Skipped records are named by line (or WARC record) with their reason: exit 3."""
    from crawlers.page_dump import import_pages

    with user_errors():
        base, _ = _open(kb)
        with base:
            with progress_bar() as bar:
                task = bar.add_task(f"{'checking' if dry_run else 'importing'} {path.name}", total=None)
                report = import_pages(base, path, dry_run=dry_run, progress=lambda n: bar.advance(task, n))
            stats = base.store.corpus_stats()
    if json_out:
        emit_json({**report.to_dict(), "corpus": stats})
    else:
        verb = "would store" if dry_run else "stored"
        _plain(
            f"read {report.read} records: {verb} {report.pages} pages ({report.chunks} chunks, {report.linked} linked to an entity), "
            f"{len(report.skipped)} skipped; the corpus now holds {stats['pages']} pages ({stats['chunks']} chunks)"
            + (" (dry run: nothing stored)" if dry_run else "")
        )
        if report.fallback:
            _plain(f"{report.fallback} page(s) had no main text the extractor could find: read by their visible text instead")
        for s in report.skipped[:50]:
            _plain(f"  {s.file} {s.where}: {s.reason}")
        if len(report.skipped) > 50:
            _plain(f"  ... and {len(report.skipped) - 50} more (--json lists every one)")
    if not report.complete:
        raise typer.Exit(ExitCode.PARTIAL)


@corpus_app.command("stats", epilog="Examples:\n\n  kar corpus stats\n\n  kar corpus stats --json")
def stats_cmd(json_out: JsonOption = False, kb: KbOption = None) -> None:
    """Pages and chunks in the corpus, by site, and how many are linked to an entity."""
    with user_errors():
        base, _ = _open(kb)
        with base:
            stats = base.store.corpus_stats()
    if json_out:
        emit_json(stats)
        return
    lexical = {True: "hybrid search (dense + BM25)", False: "dense only: `kar kb reindex` adds the lexical index", None: "empty"}
    _plain(f"{stats['pages']} pages, {stats['chunks']} chunks, {stats['entity_pages']} linked to an entity; {lexical[stats['lexical_index']]}")
    for site, n in stats["by_site"].items():
        _plain(f"  {site}: {n} pages")


@corpus_app.command(
    "search",
    epilog="Examples:\n\n  kar corpus search \"Potion Seller\"\n\n  kar corpus search \"我从未见过如此厚颜无耻之人\" --all --json",
)
def search_cmd(
    query: Annotated[str, typer.Argument(help="What to search for.", show_default=False)],
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=50, help="Pages shown.")] = 5,
    show_all: Annotated[bool, typer.Option("--all", help="Also show pages below the relevance floor (marked).")] = False,
    json_out: JsonOption = False,
    kb: KbOption = None,
) -> None:
    """Search the corpus as KAR's local web search does: ranked pages with url, title, score and text."""
    if not query.strip():
        raise fail("search text is empty", ExitCode.USAGE)
    with user_errors():
        from retrieval.websearch.local import LocalCorpusSearch

        base, settings = _open(kb)
        with base:
            search = LocalCorpusSearch(base, fusion=settings.corpus_fusion, floor=settings.evidence_floor)
            pages = search.pages(query, top_k) if base.store.has_corpus else []
            floor = search.floor
    shown = [p for p in pages if show_all or p.above_floor]
    if json_out:
        emit_json({"query": query, "floor": floor, "results": [p.to_dict() for p in shown], "below_floor": sum(1 for p in pages if not p.above_floor)})
        return
    if not shown:
        why = "the corpus is empty (kar corpus import FILE, or a crawl)" if not pages else f"no page stands above the relevance floor ({floor:.3f}); --all shows them"
        _plain(f"no results: {why}")
        return
    for i, p in enumerate(shown, start=1):
        mark = "" if p.above_floor else "  (below floor)"
        _plain(f"{i}. {p.title}  score {p.relevance:.3f}{mark}")
        _plain(f"   {p.url}")
        _plain(f"   {p.text[:300]}")


@corpus_app.command("delete", epilog="Examples:\n\n  kar corpus delete https://knowyourmeme.com/memes/doge")
def delete_cmd(url: Annotated[str, typer.Argument(help="The page's URL (compared canonically).", show_default=False)], kb: KbOption = None) -> None:
    """Delete one page (every chunk of it) from the corpus."""
    with user_errors():
        base, _ = _open(kb)
        with base:
            n = base.store.delete_page(url)
    if n == 0:
        raise fail(f"no page {url} in the corpus", ExitCode.USAGE)
    _plain(f"deleted {url} ({n} chunks)")
