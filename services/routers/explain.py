"""``POST /v1/explain``: an image, a clip or a sound (multipart ``image`` or ``media`` upload, ``image_url``
or ``image_base64``) → explanation + trace.

The bytes are recognised by their content (:mod:`agents.media.sniff`): an image is checked and bounded
once; a video (MP4, WebM, MOV, animated GIF/WebP) or a sound (MP3, WAV, OGG, M4A, FLAC) is prepared as
the benchmark runner prepares clips (sampled frames, OCR of each, native audio or a transcript) within
``KAR_MEDIA_MAX_*``, refused with a 4xx naming the limit otherwise; anything else is a 415 naming the
formats.  The reply has the same shape, plus ``media`` for a clip or a sound.

With ``stream=true`` (query or body) the stages arrive as server-sent events as they
finish: ``extraction``, ``entities``, ``queries``, ``evidence``, ``explanation``, then
``final`` with the whole result (``error`` if the run fails mid-way).  Every input is
checked before the pipeline starts, so bad input is always a JSON 4xx, never a stream.

With ``include_prompts=true`` (query) the trace also carries ``prompts``: what each VLM call was sent
(:mod:`agents.vlm.record`: texts verbatim up to a cap, images by SHA-256, byte size and dimensions);
without it the reply leaves them out.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from agents.factory import SEARCH_CONDITIONS
from services.deps import ExplainCaller, Services
from services.errors import ApiError
from services.images import check_url, validate_image
from services.schemas import ErrorPublic, ExplainCreate, ExplainPublic
from services.state import NO_VLM_HELP, KarServices

router = APIRouter(tags=["explain"])
LANG = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
CONTEXT_FIELDS = ("post_text", "top_comment", "context_note")
ERRORS = {code: {"model": ErrorPublic} for code in (400, 401, 403, 413, 415, 422, 429, 502, 503, 504)}

_form_schema = {
    "type": "object",
    "properties": {
        "image": {"type": "string", "format": "binary", "description": "PNG, JPEG, WebP or GIF; or a clip or sound as for media."},
        "media": {"type": "string", "format": "binary",
                  "description": "A video (MP4, WebM, MOV, animated GIF/WebP) or sound (MP3, WAV, OGG, M4A, FLAC), or an image."},
        "condition": {"type": "string", "enum": ["vanilla", "cot", "search_cot", "kar", "context_note"], "default": "kar"},
        "language": {"type": "string", "maxLength": 16},
        "post_text": {"type": "string"},
        "top_comment": {"type": "string"},
        "context_note": {"type": "string"},
        "stream": {"type": "boolean", "default": False},
    },
}
OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ExplainCreate"}},
            "multipart/form-data": {"schema": _form_schema},
        },
    }
}


def _validation_to_api(exc: ValidationError) -> ApiError:
    for err in exc.errors():
        loc = tuple(str(x) for x in err.get("loc", ()))
        if loc[:1] == ("condition",):
            return ApiError(422, "unknown_condition", "unknown condition; choose from vanilla, cot, search_cot, kar, context_note")
    parts = [f"{'.'.join(str(x) for x in e.get('loc', ())) or 'body'}: {e.get('msg')}" for e in exc.errors()[:5]]
    return ApiError(422, "validation_error", "; ".join(parts))


async def _parse(request: Request, services: KarServices) -> tuple[ExplainCreate, bytes | None]:
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype == "application/json" or ctype.endswith("+json"):
        raw = await request.body()
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, "malformed_json", f"request body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ApiError(422, "validation_error", "the JSON body must be an object")
        try:
            return ExplainCreate.model_validate(data), None
        except ValidationError as exc:
            raise _validation_to_api(exc) from None
    if ctype == "multipart/form-data":
        try:
            form = await request.form(max_files=1, max_fields=16, max_part_size=1024 * 1024)
        except ApiError:
            raise
        except Exception as exc:
            detail = getattr(exc, "detail", None) or str(exc)
            raise ApiError(400, "malformed_multipart", f"cannot read the multipart body: {detail}") from None
        if form.get("image") is not None and form.get("media") is not None:
            raise ApiError(422, "multiple_images", "send exactly one file: 'image' or 'media', not both")
        upload = form.get("image") if form.get("image") is not None else form.get("media")
        data: dict[str, Any] = {}
        for key in ("condition", "language", "stream", "image_url"):
            value = form.get(key)
            if isinstance(value, str) and value != "":
                data[key] = value
        ctx = {k: form.get(k) for k in CONTEXT_FIELDS if isinstance(form.get(k), str) and form.get(k)}
        if ctx:
            data["context"] = ctx
        unknown = sorted(set(form.keys()) - {"image", "media", "image_url", "condition", "language", "stream", *CONTEXT_FIELDS})
        if unknown:
            raise ApiError(422, "validation_error", f"unknown form field(s): {', '.join(unknown)}")
        try:
            body = ExplainCreate.model_validate(data)
        except ValidationError as exc:
            raise _validation_to_api(exc) from None
        content = None
        if upload is not None:
            if isinstance(upload, str):
                raise ApiError(422, "validation_error", "image must be a file part (multipart upload), not a text field")
            limit = int(max(services.settings.max_upload_mb, services.settings.media_max_mb) * 1024 * 1024)
            chunks, size = [], 0
            while chunk := await upload.read(256 * 1024):
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "image_too_large", f"the upload exceeds the limit of {limit} bytes")
                chunks.append(chunk)
            content = b"".join(chunks)
            await upload.close()
        return body, content
    raise ApiError(
        415,
        "unsupported_content_type",
        f"send multipart/form-data (field 'image') or application/json, not {ctype or 'no content type'!r}",
    )


def _check_request(body: ExplainCreate, upload: bytes | None, services: KarServices) -> None:
    sources = [name for name, value in (("image", upload), ("image_url", body.image_url), ("image_base64", body.image_base64)) if value is not None]
    if not sources:
        raise ApiError(422, "missing_image", "send an image, clip or sound: a multipart 'image' or 'media' file, 'image_url' or 'image_base64'")
    if len(sources) > 1:
        raise ApiError(422, "multiple_images", f"send exactly one image source, not {' and '.join(sources)}")
    limit = services.settings.max_context_chars
    ctx = body.context.model_dump() if body.context else {}
    for key in CONTEXT_FIELDS:
        value = ctx.get(key)
        if value is not None and len(value) > limit:
            raise ApiError(422, "context_too_long", f"context field {key} is {len(value)} characters; the limit is {limit}")
    if body.language is not None and not LANG.match(body.language):
        raise ApiError(422, "invalid_language", "language must be a language tag such as 'zh' or 'en'")
    if body.condition == "context_note" and not ctx.get("context_note"):
        raise ApiError(422, "missing_context_note", "condition context_note needs context.context_note")
    if services.vlm is None and body.condition != "kar":
        raise ApiError(503, "vlm_not_configured", f"condition {body.condition} needs a VLM; {NO_VLM_HELP}")
    if body.image_url is not None:
        check_url(body.image_url)


@dataclass
class ExplainInput:
    """What the pipeline gets for one request: the image bytes (a clip's first frame, empty for a sound),
    the clip's extras (frames, audio, media trace), the reply's ``image`` record and its ``media`` record."""

    data: bytes
    image: dict[str, Any]
    extras: dict[str, Any] | None = None
    media: dict[str, Any] | None = None


async def _input(body: ExplainCreate, upload: bytes | None, services: KarServices, ticket: Any = None) -> ExplainInput:
    """The request's bytes as the pipeline's input: an image checked and bounded, a clip or sound prepared (in
    one of the clip slots of the admission, held by ``ticket`` until the request leaves)."""
    from agents.media.sniff import UnsupportedMedia, sniff

    data = await _raw_bytes(body, upload, services)
    try:
        sniffed = sniff(data) if data else None
    except UnsupportedMedia:
        sniffed = None  # the image checker says what the bytes are, with the formats we read
    if sniffed is None or sniffed.kind == "image":
        image = await _image(data, services)
        return ExplainInput(image.data, {"format": image.format, "width": image.width, "height": image.height, "bytes": image.source_bytes})
    return await _clip(data, sniffed, body, services, ticket)


async def _clip(data: bytes, sniffed: Any, body: ExplainCreate, services: KarServices, ticket: Any = None) -> ExplainInput:
    """A clip or a sound through the runner's media preparation, in the CPU pool, within KAR_MEDIA_MAX_*; with a
    ticket, once a clip slot is free (503 with Retry-After when none frees in time: see services.admission)."""
    import tempfile
    from pathlib import Path

    from agents.media.explain import prepare_media
    from agents.media.frames import MediaError, MediaLimitError
    from culturebase.cpu import cpu_pool

    settings = services.settings
    limit = int(settings.media_max_mb * 1024 * 1024)
    if len(data) > limit:
        raise ApiError(413, "media_too_large", f"the clip is {len(data)} bytes; the limit is {limit} bytes (KAR_MEDIA_MAX_MB)")

    if ticket is not None:
        await services.admission.start_media(ticket)

    def prepare() -> Any:
        with tempfile.TemporaryDirectory(prefix="kar-explain-") as folder:
            path = Path(folder) / f"upload.{sniffed.format}"
            path.write_bytes(data)
            return prepare_media(path, sniffed, settings, language=body.language)

    try:
        media = await cpu_pool().run(prepare)
    except MediaLimitError as exc:
        raise ApiError(422, exc.code, str(exc).replace("upload." + sniffed.format + ": ", "")) from None
    except MediaError as exc:
        message = re.sub(r"\S*upload\.\w+:?\s*", "", str(exc)).strip()
        raise ApiError(422, "media_unreadable", f"the {sniffed.format.upper()} cannot be read: {message}") from None
    width = height = 0
    if media.image:
        import io

        from PIL import Image

        with Image.open(io.BytesIO(media.image)) as first:
            width, height = first.size
    info = {"format": media.format, "width": width, "height": height, "bytes": len(data)}
    return ExplainInput(media.image, info, media.extras, {**media.describe(), "thumbnails": media.thumbnails()})


async def _raw_bytes(body: ExplainCreate, upload: bytes | None, services: KarServices) -> bytes:
    settings = services.settings
    max_bytes = int(max(settings.max_upload_mb, settings.media_max_mb) * 1024 * 1024)
    if upload is not None:
        data = upload
    elif body.image_base64 is not None:
        text = body.image_base64.strip()
        if text.startswith("data:"):
            text = text.split(",", 1)[1] if "," in text else ""
        if len(text) > max_bytes * 4 // 3 + 8:
            raise ApiError(413, "image_too_large", f"the image is larger than the limit of {max_bytes} bytes")
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(422, "invalid_base64", "image_base64 is not valid base64") from None
    else:
        assert body.image_url is not None
        data = await services.fetcher.fetch(body.image_url)
    return data


async def _image(data: bytes, services: KarServices) -> Any:
    settings = services.settings
    max_bytes = int(settings.max_upload_mb * 1024 * 1024)
    from culturebase.cpu import cpu_pool
    from culturebase.bounded_image import decode_megapixels

    # one decode, in the process-wide CPU pool: checks the pixels and makes the bounded working copy;
    # it starts when the decode budget has its megapixels (read from the header), and waits in the
    # queue until then while the pool's threads run other requests' OCR
    work_side = max(settings.ocr_max_side if settings.ocr_enabled else 0, settings.vlm_max_image_side)
    megapixels = decode_megapixels(data, work_side)
    return await cpu_pool().run_decode(megapixels, validate_image, data, max_bytes, settings.max_image_pixels, work_side)


def _public(result: Any, image: ExplainInput, services: KarServices, include_prompts: bool = False) -> dict[str, Any]:
    payload = result.to_dict()
    payload.pop("image_path", None)
    if not include_prompts:
        payload["trace"] = {k: v for k, v in payload["trace"].items() if k != "prompts"}
    payload["image"] = image.image
    if image.media is not None:
        payload["media"] = image.media
    notes = [n for n in services.notes if not n.startswith("no web evidence")] + list(result.trace.get("notes") or [])
    if result.condition in SEARCH_CONDITIONS:
        # asked per answer, not at startup: a crawl job may have filled the local corpus since
        from retrieval.websearch import evidence_status

        evidence = evidence_status(services.search, services.settings.search_backend)
        payload["trace"].setdefault("models", {})["evidence"] = evidence.to_dict()
        if not evidence.available:
            notes.insert(0, f"no web evidence: {evidence.reason}")
    payload["notes"] = notes
    if result.response is None and result.error is None:
        payload["message"] = "no explanation was generated: " + NO_VLM_HELP
    return payload


def _stage_events(event: Any) -> list[tuple[str, dict[str, Any]]]:
    data = event.data
    if event.stage == "extract":
        return [("extraction", {"ocr": data.get("ocr"), "extraction": data.get("extraction"), "elapsed_s": round(event.elapsed_s, 4)})]
    if event.stage == "ground":
        return [("entities", {"grounding": data.get("grounding"), "elapsed_s": round(event.elapsed_s, 4)})]
    if event.stage == "search":
        return [
            ("queries", {"queries": data.get("queries") or [], "elapsed_s": round(event.elapsed_s, 4)}),
            ("evidence", {"searches": data.get("searches") or [], "evidence": data.get("evidence"), "elapsed_s": round(event.elapsed_s, 4)}),
        ]
    if event.stage in ("answer", "reason"):
        return [("explanation", {"response": data.get("response"), "error": data.get("error"), "elapsed_s": round(event.elapsed_s, 4)})]
    return []


#: the stages each condition runs, in order (to name the stage a deadline interrupted)
STAGE_ORDER = {"kar": ("extract", "ground", "search", "reason"), "search_cot": ("extract", "search", "reason")}


async def _drain(request: Request) -> None:
    """Read and drop the body of a refused request (closing on an unread upload resets the client)."""
    try:
        async for _ in request.stream():
            pass
    except Exception:  # a client gone or a body over the limit: nothing left to answer
        pass


def _timeout_response(request: Request, services: KarServices, image: ExplainInput | None, condition: str | None, stage: str, events: list[Any], timeout_s: float) -> JSONResponse:
    """504 with the standard error body and the trace of the stages that finished in time."""
    trace: dict[str, Any] = {"condition": condition, "completed_stages": [e.stage for e in events], "timings": {}}
    for event in events:
        trace.update({k: v for k, v in event.data.items() if k not in ("response", "error")})
        trace["timings"][event.stage] = round(event.elapsed_s, 4)
    request.state.error_code = "request_timeout"
    services.metrics.timeouts.labels(stage).inc()
    message = f"the request took longer than KAR_REQUEST_TIMEOUT_S = {timeout_s:g} s; it was in the {stage} stage"
    result: dict[str, Any] = {"response": None, "trace": trace}
    if image is not None:
        result["image"] = image.image
    return JSONResponse({"error": {"code": "request_timeout", "message": message, "stage": stage}, "result": result}, status_code=504)


def _next_stage(condition: str, events: list[Any]) -> str:
    done = {e.stage for e in events}
    for stage in STAGE_ORDER.get(condition, ("answer",)):
        if stage not in done:
            return stage
    return "finish"


@router.post(
    "/v1/explain",
    summary="Explain an image (optionally streamed as server-sent events)",
    response_model=ExplainPublic,
    responses={**ERRORS, 200: {"content": {"text/event-stream": {}}}},
    openapi_extra=OPENAPI_BODY,
)
async def explain(
    request: Request,
    services: Services,
    caller: ExplainCaller,
    stream: bool | None = Query(None, description="Stream the stages as server-sent events."),
    include_prompts: bool = Query(False, description="Add trace.prompts: what each VLM call was sent (texts, images by hash and size)."),
) -> Any:
    from services.admission import DeadlineExceeded

    admission = services.admission
    try:
        ticket = admission.admit()  # 503 + Retry-After at once when the queue is full
    except ApiError:
        await _drain(request)
        raise
    streaming = False
    try:
        try:  # queued with the body unread: the upload stays with the client until a slot is free
            await admission.start(ticket)
        except DeadlineExceeded:
            await _drain(request)
            return _timeout_response(request, services, None, None, "queue", [], services.settings.request_timeout_s)
        body, upload = await _parse(request, services)
        _check_request(body, upload, services)
        refusal = getattr(services.pipeline.deps.grounder, "refusal", None)
        if refusal is not None and body.condition == "kar":  # KAR_REQUIRE_CALIBRATION and no record: 409
            raise refusal
        try:
            async with asyncio.timeout(ticket.remaining()):
                image = await _input(body, upload, services, ticket)
        except TimeoutError:
            return _timeout_response(request, services, None, body.condition, "input", [], services.settings.request_timeout_s)
        del upload
        from agents.pipeline import ExplainContext

        context = ExplainContext.from_dict(body.context.model_dump() if body.context else None)
        if stream if stream is not None else body.stream:
            streaming = True
            # the generator's finally frees the slot; the background task too, should the client leave before it starts
            leave = BackgroundTask(admission.leave, ticket)
            return EventSourceResponse(_stream(services, services.pipeline, image, body, context, ticket, include_prompts),
                                       ping=15, background=leave)
        return await _run(request, services, image, body, context, ticket, include_prompts)
    finally:
        if not streaming:
            admission.leave(ticket)


async def _run(request: Request, services: KarServices, image: ExplainInput, body: ExplainCreate, context: Any, ticket: Any,
               include_prompts: bool = False) -> Any:
    metrics = services.metrics
    timeout_s = services.settings.request_timeout_s
    events: list[Any] = []
    result = None
    metrics.in_flight.inc()
    try:
        async with asyncio.timeout(ticket.remaining()):
            stages = services.pipeline.stream(image.data, body.condition, context, language=body.language, extras=image.extras)
            async with contextlib.aclosing(stages):
                async for event in stages:
                    if event.result is not None:
                        result = event.result
                    else:
                        events.append(event)
    except TimeoutError:
        return _timeout_response(request, services, image, body.condition, _next_stage(body.condition, events), events, timeout_s)
    finally:
        metrics.in_flight.dec()
    assert result is not None
    metrics.observe_result(body.condition, result.trace, result.error is None)
    payload = _public(result, image, services, include_prompts)
    if result.error is not None:
        request.state.error_code = "pipeline_failed"
        err = result.error
        message = f"the {err.get('stage')} stage failed: {err.get('type')}: {err.get('message')}"
        return JSONResponse({"error": {"code": "pipeline_failed", "message": message, "stage": err.get("stage")}, "result": payload}, status_code=502)
    return payload


async def _stream(services: KarServices, pipeline: Any, image: ExplainInput, body: ExplainCreate, context: Any, ticket: Any,
                  include_prompts: bool = False) -> AsyncIterator[dict[str, Any]]:
    metrics = services.metrics
    timeout_s = services.settings.request_timeout_s
    events: list[Any] = []

    def timeout_event(stage: str) -> dict[str, Any]:
        metrics.timeouts.labels(stage).inc()
        message = f"the request took longer than KAR_REQUEST_TIMEOUT_S = {timeout_s:g} s; it was in the {stage} stage"
        return {"event": "error", "data": json.dumps({"error": {"code": "request_timeout", "message": message, "stage": stage}})}

    metrics.in_flight.inc()
    try:
        try:
            async with asyncio.timeout(ticket.remaining()):
                stages = pipeline.stream(image.data, body.condition, context, language=body.language, extras=image.extras)
                async with contextlib.aclosing(stages):
                    async for event in stages:
                        if event.result is not None:
                            result = event.result
                            metrics.observe_result(body.condition, result.trace, result.error is None)
                            yield {"event": "final", "data": json.dumps(_public(result, image, services, include_prompts), ensure_ascii=False, default=str)}
                            continue
                        events.append(event)
                        for name, data in _stage_events(event):
                            yield {"event": name, "data": json.dumps(data, ensure_ascii=False, default=str)}
        except TimeoutError:
            yield timeout_event(_next_stage(body.condition, events))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the stream has started: report in-band
        yield {"event": "error", "data": json.dumps({"error": {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"}})}
    finally:
        metrics.in_flight.dec()
        services.admission.leave(ticket)
