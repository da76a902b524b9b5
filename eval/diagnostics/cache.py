"""Diagnostics computed once per set of inputs: a report run again over the same traces, benchmark and
CultureBase reads them back instead of recomputing them.

The key is a hash of everything the proxy diagnostics read: this package's source (a change of code
is a change of result), the benchmark items' ids, identity and knowledge layers, each trace file and
its run's ``manifest.json`` (path, size and modification time, as ``make`` decides), and the
CultureBase entities collection's metadata and write generation
(:func:`culturebase.generation.collection_fingerprint`: the engine rewrites its own files' times on every
load, so those cannot tell a change).  What cannot be fingerprinted that way is not cached: a CultureBase
on a Qdrant server (it changes without a file here), one last written before generations were kept, one
that could not be opened (the diagnostics then say ``gold_in_kb`` is unknown; computed again next time),
and a knowledge judge's verdicts (they have their own SQLite cache, :mod:`eval.diagnostics.knowledge`).

Entries are JSON files under ``KAR_DATA_DIR/cache/diagnostics``; the newest :data:`KEEP` are kept.  An
unreadable entry is a miss, never an error.  The items' gold table (their gold entities matched in CultureBase)
is kept apart, under ``gold/`` there (:func:`gold_key`: the items and the KB generation, not the traces), so the
report of another run over the same benchmark and KB does not open the KB.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

#: bumped when the entry layout changes (code changes are caught by the source hash)
VERSION = 1
#: entries kept (the newest by modification time)
KEEP = 16
_PACKAGE = Path(__file__).resolve().parent
#: the collection whose names and aliases the diagnostics read
ENTITIES = "entities"


def _stat(path: Path) -> tuple[str, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _items_digest(label: str, items: Sequence[Any], settings: Any) -> Any:
    """A sha256 of ``label``, the diagnostics code, the items' ids, identity and knowledge and the CultureBase
    entities collection's metadata and write generation; None when the KB cannot be fingerprinted (a Qdrant
    server CultureBase, or an embedded one without a write generation)."""
    from culturebase.generation import collection_fingerprint

    if getattr(settings, "qdrant_url", None):
        return None
    kb = collection_fingerprint(settings.kb_path, ENTITIES)
    if kb is None:
        return None
    digest = hashlib.sha256(f"{label} v{VERSION}\0{_source_hash()}\0".encode())
    digest.update(orjson.dumps([[str(i.id), i.identity, i.knowledge] for i in items], default=str))
    digest.update(kb.encode())
    return digest


def cache_key(items: Sequence[Any], files: Mapping[str, Path], settings: Any) -> str | None:
    """The key of these inputs (:func:`_items_digest`, and each trace file and its run's manifest), or None
    when they cannot be fingerprinted."""
    digest = _items_digest("diagnostics", items, settings)
    if digest is None:
        return None
    for name in sorted(files):
        path = Path(files[name])
        digest.update(orjson.dumps([name, _stat(path), _stat(path.parent.parent / "manifest.json")]))
    return digest.hexdigest()


def gold_key(items: Sequence[Any], settings: Any) -> str | None:
    """The key of the items' gold table (:func:`eval.diagnostics.diagnose.gold_table`): :func:`_items_digest`
    alone, so reports of different runs over the same benchmark and KB share it; None when the KB cannot be
    fingerprinted."""
    digest = _items_digest("gold table", items, settings)
    return None if digest is None else digest.hexdigest()


def load_gold(settings: Any, key: str) -> list[tuple[Any, bool | None]] | None:
    """The gold table stored under ``key`` (one ``(Gold, gold_in_kb)`` per item, in order), or None."""
    from eval.diagnostics.gold import Gold, GoldEntity

    path = _gold_folder(settings) / f"{key}.json"
    try:
        rows = orjson.loads(path.read_bytes())
        table = [(Gold([GoldEntity(e[0], frozenset(e[1]), e[2], e[3]) for e in entities], list(knowledge), source), in_kb)
                 for entities, knowledge, source, in_kb in rows]
        os.utime(path)  # kept as recently used
        return table
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("gold table cache entry %s unreadable (%s); looked up again", path.name, exc)
        return None


def store_gold(settings: Any, key: str, table: Sequence[tuple[Any, bool | None]]) -> None:
    """Store a gold table (as :func:`store` stores diagnostics; the newest :data:`KEEP` kept)."""
    rows = [[[[e.name, sorted(e.keys), e.kb_id, e.kb_name] for e in gold.entities], gold.knowledge, gold.gold_source, in_kb]
            for gold, in_kb in table]
    write_entry(_gold_folder(settings), key, orjson.dumps(rows))


def _folder(settings: Any) -> Path:
    return Path(settings.data_dir) / "cache" / "diagnostics"


def _gold_folder(settings: Any) -> Path:
    return _folder(settings) / "gold"


def plots_folder(settings: Any) -> Path:
    """Where ``kar report`` keeps the diagnostics' causes plot by what it shows (:func:`eval.report.diagnostics.causes_plot`)."""
    return _folder(settings) / "plots"


def has(settings: Any, key: str) -> bool:
    """Whether an entry is stored under ``key`` (it may still turn out unreadable: :func:`load` says)."""
    return (_folder(settings) / f"{key}.json").is_file()


def load(settings: Any, key: str) -> tuple[dict[str, Any], list[str]] | None:
    """The diagnostics and notes stored under ``key``, or None."""
    from eval.diagnostics.traces import gc_paused

    path = _folder(settings) / f"{key}.json"
    try:
        with gc_paused():  # thousands of acyclic rows
            entry = orjson.loads(path.read_bytes())
        found = entry["diagnostics"], list(entry["notes"])
        os.utime(path)  # kept as recently used
        return found
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("diagnostics cache entry %s unreadable (%s); recomputing", path.name, exc)
        return None


def store(settings: Any, key: str, diagnostics: Mapping[str, Any], notes: Sequence[str]) -> None:
    """Store an entry (written whole, then renamed into place) and drop all but the newest :data:`KEEP`."""
    write_entry(_folder(settings), key, orjson.dumps({"diagnostics": diagnostics, "notes": list(notes)}, option=orjson.OPT_NON_STR_KEYS))


def write_entry(folder: Path, key: str, data: bytes, suffix: str = ".json") -> None:
    """One entry (``key`` + ``suffix``) written whole, then renamed into place; all but the newest :data:`KEEP`
    entries of the folder with that suffix dropped.  A cache that cannot be written is logged, not raised."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        tmp.replace(folder / f"{key}{suffix}")
        entries = sorted(folder.glob(f"*{suffix}"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except OSError as exc:  # a cache that cannot be written costs a recomputation next time, nothing else
        log.warning("diagnostics cache not written in %s: %s", folder, exc)
