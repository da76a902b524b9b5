"""`kar serve` (typer function on a local app: worker policy, uvicorn arguments) and the compose/Docker files' structure."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from typer.testing import CliRunner

from services.cli.serve import serve_command

REPO = Path(__file__).resolve().parents[2]


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command("serve")(serve_command)

    @app.command("noop")
    def noop() -> None:  # keeps typer from collapsing the single command
        pass

    return app


def test_serve_refuses_several_workers_without_qdrant(monkeypatch):
    monkeypatch.delenv("KAR_QDRANT_URL", raising=False)
    called = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: called.append(k))
    result = CliRunner().invoke(cli(), ["serve", "--workers", "3"])
    assert result.exit_code == 2 and not called
    assert "KAR_QDRANT_URL" in result.output and "embedded CultureBase" in result.output


def test_serve_starts_uvicorn_with_settings(monkeypatch):
    monkeypatch.setenv("KAR_API_PORT", "8123")
    monkeypatch.setenv("KAR_QDRANT_URL", "http://qdrant:6333")
    monkeypatch.setenv("KAR_API_WORKERS", "4")
    called = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: called.append((a, k)))
    result = CliRunner().invoke(cli(), ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 0, result.output
    (args, kwargs), = called
    assert args == ("services.cli.serve_guard:create_app",) and kwargs["factory"] is True  # services.app's, behind the startup guard
    assert (kwargs["host"], kwargs["port"], kwargs["workers"]) == ("0.0.0.0", 8123, 4)


def test_serve_one_worker_embedded_is_fine(monkeypatch):
    monkeypatch.delenv("KAR_QDRANT_URL", raising=False)
    called = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: called.append(k))
    result = CliRunner().invoke(cli(), ["serve", "--port", "9001"])
    assert result.exit_code == 0 and called[0]["workers"] == 1 and called[0]["port"] == 9001


def test_compose_structure():
    doc = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = doc["services"]
    assert {"qdrant", "api", "vllm"} <= set(services)
    qdrant, api, vllm = services["qdrant"], services["api"], services["vllm"]
    # qdrant: official image, a volume, a healthcheck
    assert qdrant["image"].startswith("qdrant/qdrant:")
    assert any(v.endswith(":/qdrant/storage") for v in qdrant["volumes"])
    assert qdrant["healthcheck"]["test"] and "readyz" in str(qdrant["healthcheck"]["test"])
    # api: built here, waits for a healthy qdrant, points at it, runs kar serve
    assert api["build"] == "." and api["depends_on"]["qdrant"]["condition"] == "service_healthy"
    env = api["environment"]
    assert env["KAR_QDRANT_URL"] == "http://qdrant:6333"
    assert "vllm:8000/v1" in env["KAR_VLM_BASE_URLS"]
    assert env["KAR_API_HOST"] == "0.0.0.0" and api["command"] == ["kar", "serve"]
    assert "/healthz" in str(api["healthcheck"]["test"])
    # required secrets fail loudly
    assert env["KAR_API_KEYS"].startswith("${KAR_API_KEYS:?")
    assert env["KAR_QDRANT_API_KEY"].startswith("${QDRANT_API_KEY:?")
    assert qdrant["environment"]["QDRANT__SERVICE__API_KEY"].startswith("${QDRANT_API_KEY:?")
    # vllm: gpu profile, GPU reservation, OpenAI-compatible server serving a Qwen-VL model
    assert vllm["profiles"] == ["gpu"] and vllm["image"].startswith("vllm/vllm-openai")
    assert "Qwen" in " ".join(vllm["command"]) and "VL" in " ".join(vllm["command"])
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert "profiles" not in api and "profiles" not in qdrant  # the core stack starts without --profile
    assert set(doc["volumes"]) >= {"qdrant-data", "kar-data"}


def test_dockerfile_and_dockerignore():
    text = (REPO / "Dockerfile").read_text()
    assert "FROM python:3.11" in text and "pip install ." in text
    assert "USER kar" in text and "HEALTHCHECK" in text and 'CMD ["kar", "serve"]' in text
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "data", "tests"} <= set(ignored)
    for folder in ("culturebase", "crawlers", "retrieval", "agents", "eval", "services"):
        assert f"COPY {folder} {folder}" in text


def test_static_files_ship_in_the_package():
    static = REPO / "services" / "static"
    assert (static / "__init__.py").exists() and {"index.html", "app.js", "style.css"} <= {p.name for p in static.iterdir()}
