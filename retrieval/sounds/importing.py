"""``audio`` field of imported records: sound files and URLs turned into stored entity sounds.

An imported record may carry ``audio``: a list (or one entry) of URLs (``http(s)://...``,
downloaded), paths relative to the imported file, or the exported form
(``{url, path, sha256, seconds}``, kept when the sound folder holds that file).  A sound that
cannot be read, fetched or accepted is left out and the import report names the line, the entry
and the reason (with the image problems, labelled ``audio``); the record is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from culturebase.entity import EntitySound
from retrieval.images.importing import ImageProblem
from retrieval.sounds.route import SoundRejected, SoundStore

Fetcher = Callable[[str], bytes]


def resolve_audio(
    rec: dict[str, Any], line: int, base_dir: Path, store: SoundStore, fetch: Fetcher | None
) -> tuple[dict[str, Any], list[ImageProblem]]:
    """The record with ``audio`` as stored-sound objects; problems for the entries left out."""
    raw = rec.pop("audio", None)
    if raw in (None, "", []):
        return rec, []
    entries = raw if isinstance(raw, list) else [raw]
    sounds: list[dict[str, Any]] = []
    problems: list[ImageProblem] = []
    for n, entry in enumerate(entries):
        url = path = None
        if isinstance(entry, str):
            url, path = (entry, None) if entry.startswith(("http://", "https://")) else (None, entry)
        elif isinstance(entry, dict):
            url, path = entry.get("url"), entry.get("path")
            if entry.get("sha256") and path and store.path_of(path).is_file():
                try:
                    sounds.append(EntitySound.model_validate(entry).model_dump())
                    continue
                except ValueError:
                    pass
        else:
            problems.append(ImageProblem(line, f"audio[{n}]", f"expected a URL, a path or an object, got {type(entry).__name__}"))
            continue
        label = f"audio: {url or path or n}"
        try:
            if path and (base_dir / path).is_file():
                data = (base_dir / path).read_bytes()
            elif url:
                if fetch is None:
                    problems.append(ImageProblem(line, label, "not fetched (fetching is off)"))
                    continue
                data = fetch(url)
            else:
                problems.append(ImageProblem(line, label, f"no such file under {base_dir.name or '.'}"))
                continue
            sounds.append(store.put(data, url=url).model_dump())
        except SoundRejected as exc:
            problems.append(ImageProblem(line, label, str(exc)))
        except OSError as exc:
            problems.append(ImageProblem(line, label, f"cannot read it ({type(exc).__name__})"))
        except Exception as exc:  # a fetcher's own errors (HTTP status, size cap, refused address)
            problems.append(ImageProblem(line, label, str(exc)))
    rec["audio"] = sounds
    return rec, problems


_TRAILING_NUMBER = __import__("re").compile(r"[-_ ]\d+$")


def entity_key_of(file: Path, root: Path) -> str:
    """The entity a sound file names: its sub-folder under ``root``, else its stem without a trailing ``-N``."""
    rel = file.relative_to(root)
    if len(rel.parts) > 1:
        return rel.parts[0]
    return _TRAILING_NUMBER.sub("", file.stem)


def import_audio_folder(kb: Any, root: Path) -> dict[str, Any]:
    """Store and fingerprint every sound file of a folder for the entity it names (``kar kb import-audio``).

    Returns ``{stored, entities, problems[{file, reason}]}``: a file whose name matches no entity (by id,
    then by name or alias), or that holds no readable sound, is listed and skipped."""
    store: SoundStore = kb.sound_store
    problems: list[dict[str, str]] = []
    updated: dict[str, Any] = {}
    stored = 0
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    for file in files:
        key = entity_key_of(file, root)
        entity = updated.get(key) or kb.store.get(key)
        if entity is None:
            found = kb.store.find_by_name([key])
            if len(found) > 1:
                problems.append({"file": str(file.relative_to(root)), "reason": f"{key!r} names {len(found)} entities: use an entity id"})
                continue
            entity = found[0] if found else None
        if entity is None:
            problems.append({"file": str(file.relative_to(root)), "reason": f"no entity with the id, name or alias {key!r}"})
            continue
        entity = updated.get(entity.id, entity)
        try:
            sound = store.put(file.read_bytes())
        except (SoundRejected, OSError) as exc:
            problems.append({"file": str(file.relative_to(root)), "reason": str(exc)})
            continue
        if all(a.sha256 != sound.sha256 for a in entity.audio):
            entity = entity.model_copy(update={"audio": [*entity.audio, sound]})
            stored += 1
        updated[entity.id] = entity
    if updated:
        kb.add(list(updated.values()))  # re-stored with their sounds; KnowledgeBase.add fingerprints them
    return {"stored": stored, "entities": len(updated), "problems": problems}
