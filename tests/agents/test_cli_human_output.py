"""Human (not --json) output of `kar explain` and `kar kb search`: data in square brackets is shown,
not eaten as rich markup; and offline `kar explain` grounds a catchphrase rendered on an image."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from tests.agents.test_cli_runner import REPO, app, cli_kb, env  # noqa: F401  (fixtures)

sys.path.insert(0, str(REPO))
from bench.caption_images import find_font, render  # noqa: E402


def test_explain_human_output_shows_entities_routes_and_searches(env, tmp_path):  # noqa: F811
    if find_font(cjk=True) is None:
        pytest.skip("no CJK font (install fonts-wqy-microhei)")
    image = render("我从未见过\n有如此厚颜无耻之人", tmp_path / "wang_lang.png")
    result = CliRunner().invoke(app, ["explain", str(image)])
    assert result.exit_code == 0, result.output
    out = result.output
    entity_lines = [line for line in out.splitlines() if "王司徒 — 三国演义" in line]
    assert entity_lines, out
    assert "[caption 1.00 · " in entity_lines[0]  # the winning route and the others' scores, brackets kept
    assert "caption: 我从未见过有如此厚颜无耻之人 ≈ 我从未见过有如此厚颜无耻之人" in out
    assert any(line.strip().startswith("[Search: 王司徒") for line in out.splitlines()), out
    assert "route caption" not in out  # routes that ran are not listed
    assert "route sparse" not in out  # a route this embedder never runs is said once, by `kar kb stats`


@pytest.mark.parametrize(
    ("caption", "expected"),
    [("鲁迅说过：\n我没说过这句话", "鲁迅"), ("SUCH WOW\nMUCH AMAZE\nVERY SKILL", "Doge")],
)
def test_offline_explain_grounds_a_rendered_catchphrase(env, tmp_path, caption, expected):  # noqa: F811
    if find_font(cjk=True) is None:
        pytest.skip("no CJK font (install fonts-wqy-microhei)")
    image = render(caption, tmp_path / "caption.png")
    result = CliRunner().invoke(app, ["explain", str(image), "--json"])
    assert result.exit_code == 0, result.output
    grounding = json.loads(result.stdout)["trace"]["grounding"]
    top = grounding["hits"][0]
    assert top["name"] == expected and top["score"] >= grounding["tau"] and top["route"] == "caption"


def test_kb_search_human_output_keeps_brackets(sample_kb_copy):
    from culturebase.settings import get_settings
    from services.cli import app as kar

    get_settings.cache_clear()
    res = CliRunner().invoke(kar, ["kb", "--kb", str(sample_kb_copy), "search", "[ocr] such wow", "--top-k", "3"])
    assert res.exit_code == 0, res.output
    assert "[ocr] such wow" in res.stdout  # the query, shown in the title
    rows = [line for line in res.stdout.splitlines() if "Doge" in line]
    assert rows and "lexical" in rows[0] and "yes" in rows[0]


def test_explain_human_output_shows_seconds_with_units(env):  # noqa: F811
    from tests.agents.conftest import IMAGES

    result = CliRunner().invoke(app, ["explain", str(IMAGES / "doge_such_culture.png")])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("timings:"))
    assert "{" not in line and "total " in line
    parts = line.removeprefix("timings: ").split("; tokens:")[0].split(" · ")
    assert parts and all(p.split()[-1] in ("ms", "s") or p.endswith(" s") for p in parts), line
