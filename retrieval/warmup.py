"""Load what a process's first grounding call would otherwise load, on a background thread.

A cold ``kar explain`` reads an image, runs OCR, then grounds.  The first grounding call of a
process used to load jieba's dictionary and word tags (:mod:`retrieval.jieba_dict`), wordfreq's
tables, OpenCV (the image route's features) and the embedder's model, seconds of work that do
not depend on the image.  :func:`start_warmup` starts that loading on a daemon thread as soon as
the pipeline is built, so it runs while the image is decoded and read by OCR (which spends its
time in onnxruntime, outside the GIL) instead of after it.  Whatever the thread has not finished
when grounding starts is simply loaded by grounding itself (every part is loaded once, under its
own lock).  ``bench/cold_start.py`` prints the cold and warm figures side by side.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)


def warm_grounding(embedder: Any = None) -> dict[str, float]:
    """Load grounding's lazily loaded parts now; returns the seconds each took (a part that fails is
    logged and left to load, and to fail clearly, where grounding needs it)."""
    seconds: dict[str, float] = {}

    def part(name: str, load: Any) -> None:
        started = time.perf_counter()
        try:
            load()
        except Exception as exc:  # noqa: BLE001 - grounding loads it again and reports the error itself
            log.debug("warm-up of %s failed: %s", name, exc)
        seconds[name] = time.perf_counter() - started

    from retrieval import jieba_dict
    from retrieval.lexical import commonness

    part("jieba", jieba_dict.tokenizer)
    part("word_tags", jieba_dict.word_tags)
    part("wordfreq", lambda: (commonness("梗"), commonness("meme")))
    part("opencv", lambda: __import__("cv2"))
    if embedder is not None:
        part("embedder", lambda: embedder.encode_queries(["warm up"]))
    return seconds


def start_warmup(embedder: Any = None) -> threading.Thread:
    """Run :func:`warm_grounding` on a daemon thread (started); join it to wait for it."""
    thread = threading.Thread(target=warm_grounding, args=(embedder,), name="kar-grounding-warmup", daemon=True)
    thread.start()
    return thread
