"""compose.yaml's `searxng` profile: the official image with the JSON format on, reached by the API."""

from __future__ import annotations

from pathlib import Path

import yaml

from culturebase.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_searxng_profile_starts_the_official_image_with_json_on():
    doc = yaml.safe_load((REPO / "compose.yaml").read_text())
    sx = doc["services"]["searxng"]
    assert sx["profiles"] == ["searxng"] and sx["image"].startswith("searxng/searxng:")
    host, container = sx["volumes"][0].removesuffix(":ro").split(":")
    settings = yaml.safe_load((REPO / host).read_text())
    assert container == "/etc/searxng/settings.yml" and "json" in settings["search"]["formats"]
    assert settings["use_default_settings"] is True
    env = doc["x-kar-env"]
    assert env["KAR_SEARXNG_URL"] == "${KAR_SEARXNG_URL:-http://searxng:8080}" and "8080" in sx["expose"]
    s = Settings(search_backend="searxng", searxng_url="http://searxng:8080")
    assert s.search_backend == "searxng" and s.searxng_url == "http://searxng:8080"
