"""The congruence tests' backends: each store test runs against embedded Qdrant Edge, qdrant-client's local
mode and, with KAR_QDRANT_URL, a real Qdrant server (skipped without one)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from culturebase.store.base import Backend
from culturebase.store.edge import EdgeBackend
from culturebase.store.layout import LayoutPolicy
from culturebase.store.server import ServerBackend

#: the ``backend_kind`` fixture's params
BACKEND_KINDS = ["embedded", "local", pytest.param("server", marks=pytest.mark.server)]


def make_backend(kind: str, tmp_path: Path, policy: LayoutPolicy | None = None) -> Backend:
    """A fresh backend of ``kind`` ("embedded", "local" or "server")."""
    if kind == "embedded":
        return EdgeBackend(tmp_path / "kb", layout_policy=policy)
    if kind == "local":
        return ServerBackend(location=":memory:", prefix=f"t{uuid.uuid4().hex[:8]}", layout_policy=policy)
    url = os.environ.get("KAR_QDRANT_URL")
    if not url:
        pytest.skip("KAR_QDRANT_URL not set: no Qdrant server to test against")
    return ServerBackend(url=url, prefix=f"t{uuid.uuid4().hex[:8]}", layout_policy=policy)


def unit_vectors(n: int, names: tuple[str, ...], dim: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` random unit vectors of ``dim`` per name (one generator, the names in order)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in names:
        m = rng.normal(size=(n, dim)).astype(np.float32)
        out[name] = m / np.linalg.norm(m, axis=1, keepdims=True)
    return out
