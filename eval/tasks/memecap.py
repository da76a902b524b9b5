"""MemeCap: the test split's JSON (``post_id, img_fname, title, meme_captions``) as reference
items for ``kar report-refs`` (reference explanations; no run items of its own)."""

from __future__ import annotations

from pathlib import Path

from eval.records import DatasetError, ReferenceItem, read_records


def load_memecap(path: str | Path, *, image_dir: str | Path | None = None) -> list[ReferenceItem]:
    """MemeCap test split (JSON list with ``post_id``, ``img_fname``, ``title``, ``meme_captions``)."""
    path = Path(path)
    base = Path(image_dir) if image_dir is not None else path.parent
    items: list[ReferenceItem] = []
    for index, record in enumerate(read_records(path)):
        where = f"{path}: item {index} (post_id={record.get('post_id', '?')})"
        fname = record.get("img_fname")
        if not fname:
            raise DatasetError(f"{where}: field 'img_fname' is missing")
        captions = record.get("meme_captions")
        if not isinstance(captions, list) or not [c for c in captions if isinstance(c, str) and c.strip()]:
            raise DatasetError(f"{where}: field 'meme_captions' is missing or empty")
        items.append(
            ReferenceItem(
                id=str(record.get("post_id") or fname),
                image_path=str(base / fname),
                references=tuple(c.strip() for c in captions if isinstance(c, str) and c.strip()),
                language="en",
                context=record.get("title") or None,
            )
        )
    return items
