"""Adding a route needs no other edit: a toy route registered from outside the package shows in the
grounded entities' route scores (the trace), in fusion and in `kar kb search`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from retrieval.grounding import (
    CandidatePool,
    EntityGrounder,
    RouteHit,
    RouteQuery,
    RouteRun,
    fuse,
    get_route,
    register_route,
    route_names,
    route_table,
    unregister_route,
)
from services.cli import app


class ToyRoute:
    """Scores 1.0 every candidate named in the OCR text (case-insensitive)."""

    name = "toy"
    scores = ("toy",)
    reads = ("ocr_text",)
    role = "evidence"
    weight = 0.2
    accepts_alone = False
    phases = ("score",)

    def wanted(self, query: RouteQuery) -> bool:
        return bool(query.cues.ocr_text.strip())

    def run(self, phase: str, query: RouteQuery, pool: CandidatePool) -> RouteRun:
        run = RouteRun(status={self.name: "ran"})
        text = query.cues.ocr_text.lower()
        for ent in pool.entities.values():
            if ent.name.lower() in text:
                run.hits.append(RouteHit(self.name, ent, 1.0, cue=ent.name, reason="named"))
        return run


@pytest.fixture
def toy():
    register_route()(ToyRoute)
    yield ToyRoute
    unregister_route("toy")


def test_the_registry_lists_checks_and_names_what_is_available(toy):
    assert route_names()[-1] == "toy" and get_route("toy") is ToyRoute
    with pytest.raises(KeyError, match="unknown route nope; available: dense, lexical, caption, exact, sparse, image, frames, sound, toy"):
        get_route("nope")

    class NotARoute:
        name = "broken"
        scores = ("broken",)

    with pytest.raises(TypeError, match="does not implement Route"):
        register_route()(NotARoute)
    with pytest.raises(ValueError, match="already registered"):
        register_route("toy")(type("Other", (ToyRoute,), {}))
    assert "broken" not in route_names()


def test_a_toy_route_is_run_traced_and_fused(toy, sample_kb):
    assert route_table().weights["toy"] == 0.2
    grounder = EntityGrounder(sample_kb.store, sample_kb.embedder)
    result = grounder.search_text("such doge")
    doge = next(c for c in result.candidates if c.entity.name == "Doge")
    assert doge.route_scores["toy"] == 1.0 and doge.reasons["toy"] == "named"
    fused = fuse(doge.route_scores, grounder.table)
    assert fused.terms["toy"] == pytest.approx(0.2) and doge.score == pytest.approx(fused.score)
    trace = result.to_dict()
    assert trace["routes"]["toy"] == "ran"
    assert next(c for c in trace["candidates"] if c["name"] == "Doge")["route_scores"]["toy"] == 1.0
    others = [c for c in result.candidates if c.entity.name != "Doge"]
    assert others and all("toy" not in c.route_scores for c in others)


def test_a_grounder_built_without_the_toy_route_does_not_run_it(sample_kb):
    result = EntityGrounder(sample_kb.store, sample_kb.embedder).search_text("such doge")
    assert "toy" not in result.routes and all("toy" not in c.route_scores for c in result.candidates)


def test_kar_kb_search_shows_the_toy_route(toy, sample_kb_copy):
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["kb", "--kb", str(sample_kb_copy), "search", "such doge", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["routes"]["toy"] == "ran"
    doge = next(h for h in data["hits"] if h["name"] == "Doge")
    assert doge["route_scores"]["toy"] == 1.0
    table = CliRunner().invoke(app, ["kb", "--kb", str(sample_kb_copy), "search", "such doge"], catch_exceptions=False)
    assert "toy1.00" in "".join(table.stdout.split())  # the route summary column (however the table wraps)
