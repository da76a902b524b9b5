"""CultureBase entities: grounding search, get, put, delete, JSONL import.

``GET /v1/entities?q=`` runs the same :class:`EntityGrounder` as ``kar kb search`` and the
pipeline (the text serves as every cue route).  Writes need a read-write API key.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Path as PathParam, Query, Request, Response
from pydantic import ValidationError

from services.deps import Services, WriteKey
from services.errors import ApiError
from services.schemas import EntityCreate, EntityPublic, EntitySearchPublic, ErrorPublic, ImportPublic, SplitCreate, SplitPublic

router = APIRouter(tags=["entities"])
EntityId = Annotated[str, PathParam(min_length=1, max_length=200, description="Entity id.")]
ERR = {code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 413, 415, 422)}


def public(entity: Any) -> dict[str, Any]:
    data = entity.model_dump(mode="json", exclude={"constituents"})
    data["joined_from"] = [{k: v for k, v in p.items() if k != "record"} for p in entity.model_dump(mode="json", include={"constituents"})["constituents"]]
    return data


@router.get("/v1/entities", response_model=EntitySearchPublic, responses=ERR)
async def search_entities(
    services: Services,
    q: Annotated[str | None, Query(max_length=1000, description="Text to ground; without it, entities are listed.")] = None,
    lang: Annotated[str | None, Query(max_length=16, pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$|^und$")] = None,
    top_k: Annotated[int, Query(ge=1, le=100)] = 5,
) -> dict[str, Any]:
    """Grounding search (what the pipeline finds for this text), or a listing when ``q`` is empty."""
    if q is None or not q.strip():
        def listing() -> list[dict[str, Any]]:
            out = []
            for entity in services.kb.store.iter_entities(language=lang):
                out.append({**public(entity), "score": None})
                if len(out) >= top_k:
                    break
            return out

        return {"query": None, "tau": None, "hits": await services.kb_call(listing)}
    from retrieval.grounding import EntityGrounder

    settings = services.settings
    grounder = EntityGrounder(
        services.kb.store, services.kb.embedder, tau=settings.grounding_tau, top_k=top_k,
        candidates=max(settings.grounding_candidates, top_k), image_route=getattr(services.kb, "image_route", None),
        require_calibration=settings.require_calibration,
    )
    result = await services.kb_read(grounder.search_text, q, language=lang, top_k=top_k)
    hits = [{**h.to_dict(), "passes_tau": result.accepts(h)} for h in result.hits]
    cal = grounder.calibration
    return {"query": q, "tau": result.tau, "hits": hits, "routes": result.routes, "calibration": cal.summary(),
            "notes": [n for n in (cal.warning, *cal.notes) if n]}


@router.post(
    "/v1/entities/by-sound",
    response_model=EntitySearchPublic,
    responses={**ERR, 400: {"model": ErrorPublic}},
    openapi_extra={"requestBody": {"required": True, "content": {"audio/*": {"schema": {"type": "string", "format": "binary"}},
                                                                  "video/*": {"schema": {"type": "string", "format": "binary"}},
                                                                  "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def search_entities_by_sound(
    request: Request,
    services: Services,
    top_k: Annotated[int, Query(ge=1, le=100)] = 5,
) -> dict[str, Any]:
    """Grounding search by a sound clip (the body: an audio file, or a video whose sound is read): the sound
    route of ``GET /v1/entities`` (a clip cannot travel in a query string).  A clip matching no entity sound
    returns no hits; a body holding no sound is refused (415)."""
    from retrieval.grounding import EntityGrounder, GroundingCues
    from retrieval.sounds.fingerprint import AudioDecodeError
    from retrieval.sounds.route import prepare

    settings = services.settings
    limit = int(settings.max_upload_mb * 2**20)
    raw = bytearray()
    async for part in request.stream():
        raw.extend(part)
        if len(raw) > limit:
            raise ApiError(413, "upload_too_large", f"the clip is over {settings.max_upload_mb} MB (KAR_MAX_UPLOAD_MB)")
    if not raw:
        raise ApiError(400, "missing_audio", "send the sound clip as the request body (audio or video bytes)")
    try:
        query = await asyncio.to_thread(prepare, bytes(raw))
    except AudioDecodeError as exc:
        raise ApiError(415, "unsupported_media", f"the body holds no readable sound: {exc}") from None
    store = getattr(services.kb, "sound_store", None)
    grounder = EntityGrounder(
        services.kb.store, services.kb.embedder, tau=settings.grounding_tau, top_k=top_k,
        candidates=max(settings.grounding_candidates, top_k), sound_route=store, require_calibration=settings.require_calibration,
    )
    result = await services.kb_read(grounder.ground, GroundingCues(sound=query))
    hits = [{**h.to_dict(), "passes_tau": result.accepts(h)} for h in result.candidates[:top_k]]
    return {"query": None, "tau": result.tau, "hits": hits, "routes": result.routes}


@router.get("/v1/entities/{entity_id}", response_model=EntityPublic, responses=ERR)
async def get_entity(entity_id: EntityId, services: Services) -> dict[str, Any]:
    entity = await services.kb_call(services.kb.store.get, entity_id)
    if entity is None:
        raise ApiError(404, "entity_not_found", f"no entity with id {entity_id!r}")
    return public(entity)


@router.put("/v1/entities/{entity_id}", response_model=EntityPublic, responses={**ERR, 201: {"model": EntityPublic}})
async def put_entity(entity_id: EntityId, body: EntityCreate, services: Services, key: WriteKey, response: Response) -> dict[str, Any]:
    """Create or replace the entity with this id (re-embedded)."""
    from culturebase.entity import Entity
    from retrieval.knowledge_base import format_validation_error

    try:
        entity = Entity.model_validate({**body.model_dump(), "id": entity_id})
    except ValidationError as exc:
        raise ApiError(422, "validation_error", format_validation_error(exc)) from None

    def store() -> bool:
        existed = services.kb.store.get(entity_id) is not None
        services.kb.add([entity])
        return existed

    existed = await services.kb_call(store)
    response.status_code = 200 if existed else 201
    return public(entity)


@router.post("/v1/entities/{entity_id}/split", response_model=SplitPublic, responses=ERR)
async def split_entity(entity_id: EntityId, body: SplitCreate, services: Services, key: WriteKey) -> dict[str, Any]:
    """Take the record of page ``source`` back out of a joined entity into its own entity, both re-embedded, each
    with its own images and sounds (``kar kb split``); 409 when it cannot be split (the entity's own page, a page
    not joined into it, an entity joined before joins were recorded)."""
    from culturebase.identity import SplitError

    try:
        kept, out = await services.kb_call(services.kb.split, entity_id, body.source)
    except KeyError:
        raise ApiError(404, "entity_not_found", f"no entity with id {entity_id!r}") from None
    except SplitError as exc:
        raise ApiError(409, "cannot_split", str(exc)) from None
    return {"kept": public(kept), "split": public(out)}


@router.delete("/v1/entities/{entity_id}", status_code=204, responses=ERR)
async def delete_entity(entity_id: EntityId, services: Services, key: WriteKey) -> Response:
    deleted = await services.kb_call(services.kb.store.delete, [entity_id])
    if not deleted:
        raise ApiError(404, "entity_not_found", f"no entity with id {entity_id!r}")
    return Response(status_code=204)


#: content types of a posted dump: text dumps, or an archive of a dump folder (zip, tar, tar.gz)
TEXT_TYPES = ("application/x-ndjson", "application/jsonl", "application/json", "text/plain")
ARCHIVE_TYPES = ("application/zip", "application/x-zip-compressed", "application/gzip", "application/x-gzip",
                 "application/x-tar", "application/x-gtar", "application/x-compressed-tar", "application/octet-stream")


#: the query parameters of an entity-dump import (``POST /v1/entities/import``, ``POST /v1/kb/import``)
DumpFormat = Annotated[
    str | None,
    Query(max_length=20, description="jsonl | release | kym-imkg | kym-2023 | kymkb | crawl | moegirl (an archive of the folder); default: detected."),
]
DumpCategories = Annotated[
    str | None, Query(max_length=1000, description="Only entries of these categories, comma-separated (KnowYourMeme: Meme,Subculture,...).")
]


def dump_content_type(request: Request, format: str | None) -> str:
    """The content type of a posted entity dump, after refusing one we do not read (415) and an unknown
    ``format`` (422): the checks ``POST /v1/entities/import`` and ``POST /v1/kb/import`` share."""
    from culturebase.importers import FORMATS, formats_help

    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype not in TEXT_TYPES + ARCHIVE_TYPES:
        raise ApiError(
            415, "unsupported_content_type",
            "send the records as application/x-ndjson (JSONL) or application/json (a list), or a dump folder as application/zip or application/gzip (tar.gz)",
        )
    if format is not None and format not in FORMATS:
        raise ApiError(422, "unknown_format", f"format {format!r} is not one we read; the formats are — {formats_help()}")
    return ctype


@router.post(
    "/v1/entities/import",
    response_model=ImportPublic,
    responses={**ERR, 400: {"model": ErrorPublic}, 507: {"model": ErrorPublic}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
                "application/zip": {"schema": {"type": "string", "format": "binary"}},
                "application/gzip": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    },
)
async def import_entities(
    request: Request,
    services: Services,
    key: WriteKey,
    format: DumpFormat = None,
    category: DumpCategories = None,
    dry_run: Annotated[
        bool, Query(description="Read and validate the dump and report what would be stored, without storing (nothing is embedded).")
    ] = False,
) -> dict[str, Any]:
    """Import JSONL (one record a line), the MemeBench release's JSON list, a published dump (a KnowYourMeme
    scrape, a crawl's `scrapy crawl -o` output, ...) or an archive (zip, tar.gz) of a dump folder (the
    Moegirlpedia maps, KYMKB), streamed by the same readers as `kar kb import`; rejected entries are reported
    by line or index.  Image URLs are not fetched."""
    from culturebase.importers import DumpError, detect_format
    from culturebase.importers.archive import ArchiveError, ArchiveTooLarge, archive_kind, unpack_archive
    from culturebase.store.bulk import BulkImportError
    from retrieval.knowledge_base import ImportFileError

    ctype = dump_content_type(request, format)
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "empty_import", "the import body is empty")
    kind = archive_kind(raw[:512])
    if kind is None and ctype in ARCHIVE_TYPES and ctype != "application/octet-stream":
        raise ApiError(422, "invalid_archive", f"the body is sent as {ctype} but is not a zip or tar(.gz) archive")
    if kind is None and format == "moegirl":
        raise ApiError(422, "unknown_format", "format 'moegirl' is a folder of maps: post it as a zip or tar.gz archive of the folder")
    categories = [c for c in (category or "").split(",") if c.strip()] or None
    with tempfile.TemporaryDirectory() as tmp:
        if kind is not None:
            archive = Path(tmp) / "body.archive"
            archive.write_bytes(raw)
            del raw
            limit = services.settings.import_archive_max_mb * 2**20
            try:
                path = await asyncio.to_thread(unpack_archive, archive, Path(tmp) / "dump", limit)
            except ArchiveTooLarge as exc:
                raise ApiError(413, "archive_too_large", f"{exc} (KAR_IMPORT_ARCHIVE_MAX_MB)") from None
            except ArchiveError as exc:
                raise ApiError(422, "invalid_archive", str(exc)) from None
            archive.unlink()
        else:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ApiError(400, "invalid_import", f"body: not UTF-8 text (byte {exc.start})") from None
            path = Path(tmp) / "import.jsonl"
            path.write_bytes(raw)
        shown = str(path)
        fmt = format
        if fmt is None:
            try:
                fmt = detect_format(path)
            except DumpError as exc:
                if kind is not None:  # a folder we do not know: say what is in it, and what we read
                    raise ApiError(422, "unknown_format", str(exc).replace(shown, "the archive")) from None
                fmt = "jsonl"  # our reader names what is wrong with the body

        def run() -> tuple[Any, int]:
            rep = services.kb.import_dump(path, fmt=fmt, categories=categories, fetch_images=False, dry_run=dry_run)
            return rep, services.kb.store.count()

        try:
            report, total = await (services.kb_read(run) if dry_run else services.kb_call(run))
        except ImportFileError as exc:
            raise ApiError(422, "invalid_import", str(exc).replace(shown, "body")) from None
        except BulkImportError as exc:
            raise ApiError(507, "import_stopped", str(exc).replace(str(services.settings.kb_path), "the KB folder")) from None
    if report.stopped and not report.stored:
        raise ApiError(400, "invalid_import", f"body: {report.stopped}")
    data = report.to_dict()
    data.pop("path", None)
    return {**data, "total_entities": total}
