"""OCR with rapidocr + onnxruntime (PP-OCR models shipped in the wheel, no download).

The text is an extraction aid: it joins the OCR route of grounding and is shown to the
extractor.  The engine is built lazily on first use and guarded by a lock (one
inference at a time per process); :meth:`OCR.read_async` runs it in a worker thread.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from dataclasses import dataclass, field
from typing import Any


class OCRError(RuntimeError):
    """The image cannot be read or the OCR engine failed."""


@dataclass
class OCRLine:
    text: str
    score: float
    box: list[list[float]]


@dataclass
class OCRResult:
    """Recognised lines in reading order and their joined text."""

    lines: list[OCRLine] = field(default_factory=list)
    latency_s: float = 0.0

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "lines": [{"text": ln.text, "score": round(ln.score, 4)} for ln in self.lines],
            "latency_s": round(self.latency_s, 4),
        }


class OCR:
    """Lazy rapidocr engine; ``min_score`` drops low-confidence lines."""

    def __init__(self, min_score: float = 0.5, max_side: int = 2000) -> None:
        self.min_score = min_score
        self.max_side = max_side
        self._engine: Any = None
        self._lock = threading.Lock()

    def _get_engine(self) -> Any:
        if self._engine is None:
            from rapidocr_onnxruntime import RapidOCR

            self._engine = RapidOCR()
        return self._engine

    def _decode(self, image: bytes) -> Any:
        import numpy as np
        from PIL import Image

        try:
            with Image.open(io.BytesIO(image)) as img:
                img.seek(0)
                frame = img.convert("RGB")
        except Exception as exc:
            raise OCRError(f"cannot decode image: {exc}") from exc
        if max(frame.size) > self.max_side:
            frame.thumbnail((self.max_side, self.max_side))
        return np.asarray(frame)[:, :, ::-1].copy()  # RGB → BGR, as OpenCV readers give

    def read(self, image: bytes) -> OCRResult:
        """Recognise the text of an encoded image (blocking)."""
        started = time.perf_counter()
        array = self._decode(image)
        with self._lock:
            try:
                raw, _ = self._get_engine()(array)
            except Exception as exc:
                raise OCRError(f"OCR failed: {type(exc).__name__}: {exc}") from exc
        lines: list[OCRLine] = []
        for box, text, score in raw or []:
            if float(score) >= self.min_score and str(text).strip():
                lines.append(OCRLine(str(text).strip(), float(score), [[float(x), float(y)] for x, y in box]))
        # reading order: top to bottom, then left to right within a row
        lines.sort(key=lambda ln: (round(min(p[1] for p in ln.box) / 20), min(p[0] for p in ln.box)))
        return OCRResult(lines=lines, latency_s=time.perf_counter() - started)

    async def read_async(self, image: bytes) -> OCRResult:
        return await asyncio.to_thread(self.read, image)
