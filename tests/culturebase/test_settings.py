"""The one settings class: env prefix, list parsing, masking, and the README documents every setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from culturebase.settings import Settings, settings_table
from tests.conftest import REPO


def test_env_prefix_and_list_parsing(monkeypatch):
    monkeypatch.setenv("KAR_VLM_BASE_URLS", "http://a:8000/v1, http://b:8000/v1")
    monkeypatch.setenv("KAR_API_KEYS", '["k1","k2"]')
    monkeypatch.setenv("KAR_EMBEDDER", "bge-m3")
    s = Settings()
    assert s.vlm_base_urls == ["http://a:8000/v1", "http://b:8000/v1"]
    assert s.api_keys == ["k1", "k2"] and s.embedder == "bge-m3"


def test_invalid_values_name_the_field(monkeypatch):
    monkeypatch.setenv("KAR_SEARCH_MAX_QUERIES", "9")
    with pytest.raises(ValidationError, match="search_max_queries"):
        Settings()


def test_secrets_are_masked(monkeypatch):
    monkeypatch.setenv("KAR_TAVILY_API_KEY", "tvly-secret")
    monkeypatch.setenv("KAR_API_KEYS", "abc,def")
    public = Settings().public_dict()
    assert public["tavily_api_key"] == "***" and "abc" not in str(public)


def test_readme_lists_every_setting_with_the_generated_table():
    readme = (REPO / "README.md").read_text("utf-8")
    assert settings_table() in readme, "README settings table is stale: run `kar config --markdown`"
    for name in Settings.model_fields:
        assert f"KAR_{name.upper()}" in readme


def test_readme_starts_with_the_two_commands():
    head = (REPO / "README.md").read_text("utf-8").split("\n## ")[0]
    assert "make demo" in head and "make test" in head
    assert head.index("make demo") < head.index("make test")
