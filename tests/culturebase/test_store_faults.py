"""Faults during a bulk import into the embedded store, each in a real child process: the disk
filling up (a small tmpfs) and a SIGKILL half-way.  Afterwards the store opens, keeps what was
acknowledged, and a rerun completes without duplicates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.edge import EdgeBackend

REPO = Path(__file__).resolve().parents[2]
PROC = [sys.executable, "-m", "tests.culturebase.bulk_import_proc"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _open(path: Path, dim: int) -> CultureBaseStore:
    return CultureBaseStore(EdgeBackend(path), EmbedderInfo("proc-embedder", dim), create=False)


def _ids(store: CultureBaseStore) -> list[str]:
    return [p["_id"] for p in store.entities.scroll(batch=2000)]


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs (needs mount rights: root in a container)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill ({res.stderr.strip() or 'not permitted'})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_filling_stops_the_import_with_the_count_and_the_store_opens(small_disk):
    kb = small_disk / "kb"
    res = subprocess.run(
        [*PROC, str(kb), "200000", "--dim", "64", "--batch", "500", "--min-free-mb", "16", "--payload-chars", "1000"],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=300,
    )
    assert res.returncode == 3, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert 0 < out["stored"] < 200000
    assert f"stored {out['stored']} of 200000 entities so far" in out["error"] and "nearly full" in out["error"]
    store = _open(kb, 64)
    try:
        assert store.count() == out["stored"]
        ids = _ids(store)
        assert len(set(ids)) == len(ids) == out["stored"]
        assert store.get(ids[0]) is not None
    finally:
        store.close()


def test_sigkill_during_bulk_import_then_rerun_completes_without_duplicates(tmp_path):
    kb, n = tmp_path / "kb", 15000
    cmd = [*PROC, str(kb), str(n), "--batch", "500"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
    acknowledged = 0
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("stored "):
            acknowledged = int(line.split()[1])
        if acknowledged >= 3000 or time.monotonic() > deadline:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert 3000 <= acknowledged < n, "the import finished before it could be killed"

    store = _open(kb, 16)  # the lock died with the process; the WAL is replayed
    try:
        survived = store.count()
        assert acknowledged <= survived < n
        assert len(set(_ids(store))) == survived
    finally:
        store.close()

    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {"stored": n, "count": n}
    store = _open(kb, 16)
    try:
        ids = _ids(store)
        assert store.count() == n and len(ids) == len(set(ids)) == n
    finally:
        store.close()
