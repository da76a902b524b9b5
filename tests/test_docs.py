"""The docs hold together: every relative link points to a file that exists, every ``#anchor`` to a
heading of its page (GitHub's slugs), every figures table is what ``bench/results/*.json`` gives, the
pages stay short, and no code names a docs page that is gone."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
LINKED = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "bench" / "results" / "README.md", *PAGES]
MAX_PAGE_LINES = 300
MAX_DOCS_LINES = 2000

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text without fenced code blocks (their ``#`` lines are no headings, their brackets no links)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links and code marks dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a markdown file's headings (a repeated slug gets -1, -2, … as on GitHub)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose(path.read_text("utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The link targets of a markdown file, outside code."""
    return LINK.findall(INLINE_CODE.sub("", prose(path.read_text("utf-8"))))


def test_the_slug_rules_match_githubs():
    assert slug("Ablations: `kar run`") == "ablations-kar-run"
    assert slug("What reaches the evidence block, and why") == "what-reaches-the-evidence-block-and-why"
    assert slug("DrivelHub+ rubric and reasoning as retrieval") == "drivelhub-rubric-and-reasoning-as-retrieval"
    assert slug("A Qdrant server instead of the embedded store") == "a-qdrant-server-instead-of-the-embedded-store"
    assert slug("Retrieval diagnostics: why a condition repaired or damaged an item") == (
        "retrieval-diagnostics-why-a-condition-repaired-or-damaged-an-item"
    )


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_no_wrapped_line_turns_into_a_list_item():
    """A prose line that begins with ``+ `` renders as a list item (the docs use ``-`` lists only)."""
    bad = [f"{p.relative_to(REPO)}: {line}" for p in LINKED for line in prose(p.read_text("utf-8")).splitlines()
           if line.startswith("+ ")]
    assert not bad, bad


def test_pages_are_short_and_the_docs_fit():
    lengths = {p.name: len(p.read_text("utf-8").splitlines()) for p in PAGES}
    long = {name: n for name, n in lengths.items() if n > MAX_PAGE_LINES}
    assert not long, f"pages over {MAX_PAGE_LINES} lines: {long}"
    assert sum(lengths.values()) <= MAX_DOCS_LINES, f"docs/ is {sum(lengths.values())} lines (at most {MAX_DOCS_LINES})"
    assert len((REPO / "README.md").read_text("utf-8").splitlines()) <= MAX_PAGE_LINES


def test_the_figures_tables_are_what_the_bench_json_gives():
    spec = importlib.util.spec_from_file_location("docs_figures", REPO / "bench" / "docs_figures.py")
    assert spec and spec.loader
    figures = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = figures  # its dataclasses look their module up
    try:
        spec.loader.exec_module(figures)
    finally:
        sys.modules.pop(spec.name, None)
    stale = [page for page, (now, new) in figures.expected_pages().items() if now != new]
    assert not stale, f"stale figures tables in {stale}: run `python bench/docs_figures.py`"
    marked = {m for p in PAGES for m in re.findall(r"<!-- figures:([\w-]+) -->", INLINE_CODE.sub("", p.read_text("utf-8")))}
    assert marked == {t.name for t in figures.TABLES}, "every table has its markers on its page, and no marker lacks a table"


def test_code_names_only_docs_pages_that_exist():
    named = {}
    for package in ("culturebase", "retrieval", "crawlers", "agents", "eval", "services", "bench"):
        for path in (REPO / package).rglob("*.py"):
            for name in re.findall(r"docs/([\w-]+\.md)", path.read_text("utf-8")):
                named.setdefault(name, []).append(str(path.relative_to(REPO)))
    missing = {name: files for name, files in named.items() if not (DOCS / name).exists()}
    assert not missing, f"code names docs pages that do not exist: {missing}"


def test_every_repository_path_the_docs_quote_exists():
    """A path in inline code (`retrieval/grounding/fusion.py`, `eval/tasks/`) names a file or folder of today's tree."""
    roots = ("culturebase", "retrieval", "crawlers", "agents", "eval", "services", "bench", "tests", "examples")
    quoted = re.compile(rf"^(?:{'|'.join(roots)})/[\w./-]*$")
    missing = []
    for page in LINKED:
        for code in re.findall(r"`([^`\n]+)`", prose(page.read_text("utf-8"))):
            for token in code.split():
                token = token.rstrip(",;:)")
                generated = token.startswith("bench/results/")  # a bench's output, named before it is made
                if quoted.match(token) and not generated and not (REPO / token).exists():
                    missing.append(f"{page.relative_to(REPO)}: {token}")
    assert not missing, "the docs quote paths that do not exist: " + "; ".join(missing)


def test_every_setting_the_docs_name_exists():
    """`KAR_X` in the docs is a field of the settings class (a `KAR_X_*` family excepted, and compose's own variables)."""
    from culturebase.settings import Settings

    fields = {f"KAR_{name.upper()}" for name in Settings.model_fields}
    compose_only = {"KAR_API_PUBLISH", "KAR_API_CLUSTER_PUBLISH"}  # compose.yaml's published ports, not settings
    unknown = []
    for page in LINKED:
        for name, family in re.findall(r"(KAR_[A-Z0-9_]*[A-Z0-9])(_\*)?", page.read_text("utf-8")):
            if not family and name not in fields and name not in compose_only:
                unknown.append(f"{page.relative_to(REPO)}: {name}")
    assert not unknown, "the docs name settings that do not exist: " + "; ".join(sorted(set(unknown)))


def test_the_readme_lists_every_page():
    listed = {Path(t.partition("#")[0]).name for t in links(REPO / "README.md") if t.startswith("docs/")}
    assert {p.name for p in PAGES} <= listed, f"pages the README's Documentation list lacks: {sorted({p.name for p in PAGES} - listed)}"
