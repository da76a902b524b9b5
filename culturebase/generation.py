"""What identifies an embedded collection's content without opening it (or importing the store): the
collection's metadata file and its write generation, a random token :mod:`culturebase.store.edge` writes
before the first write of each session (the engine rewrites its own files' modification times on every
load, so those cannot tell a change).  Read by caches of what was computed from a collection
(:mod:`eval.diagnostics.cache`)."""

from __future__ import annotations

from pathlib import Path

META_FILE = "culturekar.json"
#: a collection's write generation: a new random token written before the first write of each session, so
#: a reader can tell "unchanged since I last read it" without opening the shard
GENERATION_FILE = "generation"


def collection_fingerprint(root: Path | str, name: str) -> str | None:
    """What identifies a collection's content without opening it (no lock taken): its metadata and its
    write generation; None when it does not exist or was last written before generations were kept."""
    folder = Path(root) / name
    try:
        return f"{(folder / META_FILE).read_text('utf-8')}\0{(folder / GENERATION_FILE).read_text('utf-8')}"
    except OSError:
        return None
