"""The probes ``kar calibrate`` grounds: positives made from the KB's own entities, negatives from packaged
ordinary captions, and the user's labels.

Positives (expected: the entity): the name, one alias, one catchphrase (a quoted line of the cultural usage),
the description with the name and aliases taken out; the name and the catchphrase again with OCR-like noise
(:func:`ocr_noise`: spaces dropped, a wrong character, a cut line).  At most ``max_entities`` entities are
drawn, by hash of their id, while the store is streamed, so memory does not grow with the KB.

Negatives (expected: nothing): ``files/captions.<lang>.txt`` (ordinary captions and chat lines written for
this, several hundred per language; none is a line of a bench's query sets: ``tests/retrieval/test_calibration.py``
checks it) for each language the KB holds; and ``--labels`` lines whose entity is null.

The split is fixed before anything is fitted: :func:`split_of` hashes the entity id (so an entity's probes stay
together) or the text of a negative.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from retrieval.text import lexical as lex

__all__ = ["LabelsFileError", "Probe", "caption_languages", "entity_probes", "label_probes", "load_captions", "ocr_noise", "split_of"]

#: description probes are cut to this many characters (an OCR line or a VLM's visual handle is short)
MAX_PROBE_CHARS = 200
#: the characters a wrong-character OCR error puts in (CJK lookalikes, Latin confusions)
_WRONG_CJK = "口日曰己已巳人入大太木本未末土士"
_WRONG_LATIN = {"l": "1", "o": "0", "e": "c", "i": "l", "a": "o", "s": "5", "n": "m", "m": "rn"}
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


class LabelsFileError(ValueError):
    """A ``--labels`` line that cannot be used (the message names the file, the line and why)."""


@dataclass(frozen=True)
class Probe:
    """One text to ground, what it should ground to (None: nothing), and how it is sent."""

    text: str
    kind: str
    language: str
    expected: str | None
    cue: str  # search | ocr | visual
    split: str  # calibration | held-out


def split_of(key: str) -> str:
    """``calibration`` or ``held-out``, by the parity of sha1(key): fixed before any fitting."""
    return "held-out" if int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:8], 16) % 2 else "calibration"


def _draw(key: str, rate: float) -> bool:
    return int(hashlib.sha1(("draw\0" + key).encode("utf-8")).hexdigest()[:8], 16) < rate * 0xFFFFFFFF


def ocr_noise(text: str) -> str:
    """``text`` as OCR might misread it (deterministic per text): spaces dropped, one wrong character, and a line
    cut off at the end when it is long enough to survive the cut."""
    rng = random.Random(hashlib.sha1(text.encode("utf-8")).hexdigest())
    noisy = text.replace(" ", "") if " " in text and rng.random() < 0.5 else text
    chars = list(noisy)
    spots = [i for i, c in enumerate(chars) if c.isalnum()]
    if spots:
        i = rng.choice(spots)
        c = chars[i]
        chars[i] = rng.choice(_WRONG_CJK) if _CJK.match(c) else _WRONG_LATIN.get(c.lower(), c.swapcase() if c.isalpha() else "8")
    noisy = "".join(chars)
    if len(noisy) >= 12:
        noisy = noisy[: max(6, int(len(noisy) * 0.75))]
    return noisy


def _without_names(text: str, names: list[str]) -> str:
    for n in sorted((n for n in names if len(n.strip()) >= 2), key=len, reverse=True):
        text = re.sub(re.escape(n), " ", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text).strip(" ,.;:|-—，。；：")[:MAX_PROBE_CHARS].strip()


def probes_of(entity: Any) -> list[Probe]:
    """The positives one entity gives (module docstring)."""
    split = split_of(entity.id)
    lang = entity.language
    out = [Probe(entity.name, "name", lang, entity.id, "search", split)]
    if entity.aliases:
        out.append(Probe(entity.aliases[0], "alias", lang, entity.id, "search", split))
    names = [entity.name, *entity.aliases]
    squashed = {lex.squash(n) for n in names}
    phrases = [p for p in lex.catchphrases(entity) if lex.squash(p) not in squashed]
    if phrases:
        out.append(Probe(phrases[0][:MAX_PROBE_CHARS], "catchphrase", lang, entity.id, "ocr", split))
        out.append(Probe(ocr_noise(phrases[0][:MAX_PROBE_CHARS]), "noisy-catchphrase", lang, entity.id, "ocr", split))
    if len(lex.squash(entity.name)) >= 4:
        out.append(Probe(ocr_noise(entity.name), "noisy-name", lang, entity.id, "ocr", split))
    described = _without_names(" ".join(x for x in (entity.visual_desc, entity.description) if x), names)
    if len(described) >= 12:
        out.append(Probe(described, "description", lang, entity.id, "visual", split))
    return [p for p in out if p.text.strip()]


def entity_probes(store: Any, max_entities: int) -> Iterator[Probe]:
    """Positives of at most about ``max_entities`` entities drawn by hash of their id, the store streamed."""
    total = store.count()
    rate = 1.0 if total <= max_entities else max_entities / total
    for entity in store.iter_entities():
        if rate >= 1.0 or _draw(entity.id, rate):
            yield from probes_of(entity)


def caption_languages() -> list[str]:
    """Languages with a packaged caption file."""
    folder = resources.files("retrieval.calibration") / "files"
    return sorted(p.name.split(".")[1] for p in folder.iterdir() if p.name.startswith("captions.") and p.name.endswith(".txt"))


def load_captions(language: str) -> list[str]:
    """The packaged ordinary captions of ``language`` (one a line; ``#`` lines are comments)."""
    path = resources.files("retrieval.calibration") / "files" / f"captions.{language}.txt"
    lines = path.read_text("utf-8").splitlines() if path.is_file() else []
    return [x.strip() for x in lines if x.strip() and not x.startswith("#")]


def caption_probes(languages: list[str]) -> Iterator[Probe]:
    """Negatives: the packaged captions of each of ``languages`` that has a file."""
    for lang in languages:
        for text in load_captions(lang):
            yield Probe(text, "caption", lang, None, "search", split_of(text))


def label_probes(path: Path, store: Any) -> list[Probe]:
    """The user's labels: JSONL of ``{"text": ..., "entity": id | name | null}``; a bad line is an error naming it."""
    out: list[Probe] = []
    try:
        lines = Path(path).read_text("utf-8").splitlines()
    except OSError as exc:
        raise LabelsFileError(f"--labels {path}: {exc.strerror or exc}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LabelsFileError(f"--labels {path} line {n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or not row["text"].strip():
            raise LabelsFileError(f"--labels {path} line {n}: needs {{\"text\": \"...\", \"entity\": id | name | null}}")
        ref = row.get("entity")
        if ref is not None and not isinstance(ref, str):
            raise LabelsFileError(f"--labels {path} line {n}: entity must be an id, a name or null")
        expected, lang = None, str(row.get("language") or "und")
        if ref is not None:
            entity = store.get(ref) or next(iter(store.find_by_name([ref])), None)
            if entity is None:
                raise LabelsFileError(f"--labels {path} line {n}: entity {ref!r} is not in the knowledge base (an id or a name)")
            expected, lang = entity.id, entity.language
        text = row["text"].strip()
        out.append(Probe(text, "label" if expected else "label-negative", lang, expected, "search", split_of(expected or text)))
    return out
