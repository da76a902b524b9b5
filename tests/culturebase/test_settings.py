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


def test_docs_list_every_setting_with_the_generated_table():
    doc = (REPO / "docs" / "settings.md").read_text("utf-8")
    assert settings_table() in doc, "docs/settings.md is stale: regenerate its table with `kar config --markdown`"
    for name in Settings.model_fields:
        assert f"KAR_{name.upper()}" in doc


def test_dotenv_sits_between_the_environment_and_the_defaults(tmp_path, monkeypatch):
    from culturebase.settings import setting_sources

    monkeypatch.delenv("KAR_VLM_MODEL", raising=False)
    monkeypatch.delenv("KAR_SEARCH_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("KAR_VLM_MODEL=from-dotenv\nKAR_SEARCH_RESULTS=3\nOTHER=x\n")
    monkeypatch.setenv("KAR_SEARCH_RESULTS", "7")
    s = Settings()
    assert s.vlm_model == "from-dotenv" and s.search_results == 7
    sources = setting_sources()
    assert (sources["vlm_model"], sources["search_results"], sources["hnsw_m"]) == (".env", "env", "default")


def test_readme_starts_with_the_two_commands():
    head = (REPO / "README.md").read_text("utf-8").split("\n## ")[0]
    assert "make demo" in head and "make test" in head
    assert head.index("make demo") < head.index("make test")
