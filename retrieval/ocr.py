"""OCR with rapidocr + onnxruntime (PP-OCR models shipped in the wheel, no download).

The text is an extraction aid: it joins the OCR route of grounding and is shown to the
extractor.  OCR never touches the full-size pixels; it works on two bounded copies made
from one decode (:mod:`culturebase.bounded_image`: first frame, EXIF-upright):

* **detection** runs on a copy whose longest side is ``det_side`` (``KAR_OCR_DET_SIDE``,
  800: a caption 2.5 % of the image high is still 11+ px there).  The detector's memory
  grows with the pixels it sees (one read peaks ~195 MB above the process at 800 px, ~335 MB
  at 960), so this is what bounds OCR's memory per concurrent read.  The copy goes to the
  detector as it is (rapidocr would by default enlarge it until its short side is 736 px);
* **recognition** reads each detected line cropped from the copy of longest side
  ``max_side`` (``KAR_OCR_MAX_SIDE``), scaled to the recognizer's input height (48 px) with
  area averaging.  The recognizer would otherwise shrink a tall crop with plain bilinear
  sampling, which aliases: the same caption then reads differently at 4000 px than at
  1600 px ("noynoL" for "Touhou").  With the crop averaged down first, what is read no longer
  depends on the image's scale.

Engines are built lazily, up to ``engines`` of them (one inference per engine at a time;
each engine uses ``threads`` ONNX threads); :meth:`OCR.read_async` runs in the process-wide
CPU pool (:mod:`culturebase.cpu`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from culturebase.bounded_image import BoundedImage, ImageDecodeError, open_bounded


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
    read_size: tuple[int, int] | None = None  # (width, height) of the copy the lines were read from
    detect_size: tuple[int, int] | None = None  # (width, height) of the copy the lines were detected on
    source_size: tuple[int, int] | None = None  # (width, height) of the original, upright
    rotated: bool = False  # the EXIF orientation was applied

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "lines": [{"text": ln.text, "score": round(ln.score, 4)} for ln in self.lines],
            "latency_s": round(self.latency_s, 4),
            **({"read_size": list(self.read_size), "source_size": list(self.source_size or ())} if self.read_size else {}),
            **({"detect_size": list(self.detect_size)} if self.detect_size else {}),
            **({"exif_rotated": True} if self.rotated else {}),
        }


def reading_order(lines: list[OCRLine]) -> list[OCRLine]:
    """Top to bottom, then left to right within a row.

    Two boxes share a row when their vertical centres are closer than half the height of
    the row's first box, so the order does not depend on the image's scale (pieces of one
    caption line stay in order at 4000 px as at 1000 px).
    """

    def span(line: OCRLine) -> tuple[float, float]:
        ys = [p[1] for p in line.box]
        return min(ys), max(ys)

    rows: list[tuple[float, float, list[OCRLine]]] = []  # (centre, height, members)
    for line in sorted(lines, key=lambda ln: sum(span(ln)) / 2):
        top, bottom = span(line)
        centre = (top + bottom) / 2
        if rows and abs(centre - rows[-1][0]) < max(rows[-1][1], 1.0) / 2:
            rows[-1][2].append(line)
        else:
            rows.append((centre, bottom - top, [line]))
    return [ln for _, _, members in rows for ln in sorted(members, key=lambda ln: min(p[0] for p in ln.box))]


#: bumped whenever how text is read changes (benchmarks key cached readings on it)
READING_METHOD = 2

#: the recognizer's input height (PP-OCR ``rec_img_shape`` = 3 x 48 x 320)
REC_HEIGHT = 48


class OCR:
    """Lazy rapidocr engines; ``min_score`` drops low-confidence lines."""

    def __init__(
        self,
        min_score: float = 0.5,
        max_side: int = 1600,
        engines: int = 1,
        threads: int | None = None,
        det_side: int = 800,
        det_limit_type: str = "max",
        detections: int | None = None,
    ) -> None:
        self.min_score = min_score
        # at most this many detections run at once (None: one per engine); the detector is the
        # part of a read whose memory is large, so this bounds OCR's peak whatever the pool size
        self._detecting = threading.Semaphore(max(1, detections)) if detections else None
        self.det_limit_type = det_limit_type  # "min": rapidocr's default, enlarging a short side under 736 px
        self.max_side = max_side
        self.det_side = min(det_side, max_side)
        self.engines = max(1, engines)
        self.threads = threads
        self._idle: list[Any] = []
        self._built = 0
        self._cond = threading.Condition()

    @classmethod
    def from_settings(cls, settings: Any) -> OCR:
        """Sized like the CPU pool: one engine per pool worker, the CPU's threads shared among them."""
        import os

        workers = settings.cpu_workers or os.cpu_count() or 1
        cpus = os.cpu_count() or 1
        return cls(
            max_side=settings.ocr_max_side,
            det_side=settings.ocr_det_side,
            engines=workers,
            threads=max(1, cpus // workers),
            detections=settings.ocr_detections,
        )

    def _build_engine(self) -> Any:
        from rapidocr_onnxruntime import RapidOCR

        # the detection copy is what the detector sees: never shrunk again (max_side_len) nor, as
        # rapidocr does by default (limit_type "min", 736), enlarged until its short side is 736 px
        options: dict[str, Any] = {"max_side_len": max(self.det_side, 2000), "det_limit_type": self.det_limit_type}
        if self.threads:
            options["intra_op_num_threads"] = self.threads
        return RapidOCR(**options)

    def _acquire(self) -> Any:
        with self._cond:
            while not self._idle and self._built >= self.engines:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._built += 1
        try:
            return self._build_engine()
        except BaseException:
            with self._cond:
                self._built -= 1
                self._cond.notify()
            raise

    def _release(self, engine: Any) -> None:
        with self._cond:
            self._idle.append(engine)
            self._cond.notify()

    def _decode(self, image: bytes) -> BoundedImage:
        try:
            return open_bounded(image, self.max_side)
        except ImageDecodeError as exc:
            raise OCRError(str(exc)) from exc

    @staticmethod
    def _bgr(image: Any) -> Any:
        import numpy as np

        return np.asarray(image)[:, :, ::-1].copy()  # RGB → BGR, as OpenCV readers give

    def _detection_copy(self, image: Any) -> Any:
        from PIL import Image

        if max(image.size) <= self.det_side:
            return image
        small = image.copy()
        small.thumbnail((self.det_side, self.det_side), Image.Resampling.LANCZOS, reducing_gap=3.0)
        return small

    @staticmethod
    def _to_rec_height(crop: Any) -> Any:
        """A line crop area-averaged down to the recognizer's height (kept as is when not taller)."""
        import cv2

        h, w = crop.shape[:2]
        if h <= REC_HEIGHT:
            return crop
        return cv2.resize(crop, (max(1, round(w * REC_HEIGHT / h)), REC_HEIGHT), interpolation=cv2.INTER_AREA)

    def read(self, image: bytes) -> OCRResult:
        """Recognise the text of an encoded image (blocking)."""
        import numpy as np

        started = time.perf_counter()
        copy = self._decode(image)
        det_image = self._detection_copy(copy.image)
        scale = copy.image.size[0] / det_image.size[0]
        engine = self._acquire()
        try:
            with self._detecting or contextlib.nullcontext():
                boxes, _ = engine(self._bgr(det_image), use_det=True, use_cls=False, use_rec=False)
            del det_image
            raw: list[tuple[Any, str, float]] = []
            if boxes:
                boxes = [np.asarray(b, dtype=np.float32) * scale for b in boxes]
                crops = [self._to_rec_height(c) for c in engine.get_crop_img_list(self._bgr(copy.image), boxes)]
                crops, _, _ = engine.text_cls(crops)
                recognised, _ = engine.text_rec(crops)
                raw = [(box, res[0], res[1]) for box, res in zip(boxes, recognised)]
        except Exception as exc:
            raise OCRError(f"OCR failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self._release(engine)
        lines: list[OCRLine] = []
        for box, text, score in raw:
            if float(score) >= self.min_score and str(text).strip():
                lines.append(OCRLine(str(text).strip(), float(score), [[float(x), float(y)] for x, y in box]))
        lines = reading_order(lines)
        return OCRResult(
            lines=lines,
            latency_s=time.perf_counter() - started,
            read_size=copy.image.size,
            detect_size=(round(copy.image.size[0] / scale), round(copy.image.size[1] / scale)),
            source_size=copy.source_size,
            rotated=copy.rotated,
        )

    async def read_async(self, image: bytes) -> OCRResult:
        """:meth:`read` in the process-wide CPU pool."""
        from culturebase.cpu import cpu_pool

        return await cpu_pool().run(self.read, image)
