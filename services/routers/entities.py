"""CultureBase entities: grounding search, get, put, delete, JSONL import.

``GET /v1/entities?q=`` runs the same :class:`EntityGrounder` as ``kar kb search`` and the
pipeline (the text serves as every cue route).  Writes need a read-write API key.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Path as PathParam, Query, Request, Response
from pydantic import ValidationError

from services.deps import Services, WriteKey
from services.errors import ApiError
from services.schemas import EntityCreate, EntityPublic, EntitySearchPublic, ErrorPublic, ImportPublic

router = APIRouter(tags=["entities"])
EntityId = Annotated[str, PathParam(min_length=1, max_length=200, description="Entity id.")]
ERR = {code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 413, 415, 422)}


def public(entity: Any) -> dict[str, Any]:
    return entity.model_dump(mode="json")


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
    from retrieval.grounding import EntityGrounder, accepts

    settings = services.settings
    grounder = EntityGrounder(
        services.kb.store, services.kb.embedder, tau=settings.grounding_tau, top_k=top_k,
        candidates=max(settings.grounding_candidates, top_k), image_route=getattr(services.kb, "image_route", None),
    )
    result = await services.kb_read(grounder.search_text, q, language=lang, top_k=top_k)
    hits = [{**h.to_dict(), "passes_tau": accepts(h, result.tau)} for h in result.hits]
    return {"query": q, "tau": result.tau, "hits": hits, "routes": result.routes}


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


@router.delete("/v1/entities/{entity_id}", status_code=204, responses=ERR)
async def delete_entity(entity_id: EntityId, services: Services, key: WriteKey) -> Response:
    deleted = await services.kb_call(services.kb.store.delete, [entity_id])
    if not deleted:
        raise ApiError(404, "entity_not_found", f"no entity with id {entity_id!r}")
    return Response(status_code=204)


@router.post(
    "/v1/entities/import",
    response_model=ImportPublic,
    responses=ERR,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
            },
        }
    },
)
async def import_entities(
    request: Request,
    services: Services,
    key: WriteKey,
    format: Annotated[
        str | None,
        Query(max_length=20, description="jsonl | release | kym-imkg | kym-2023 | kymkb (its template_info.json); default: detected."),
    ] = None,
    category: Annotated[
        str | None, Query(max_length=1000, description="Only entries of these categories, comma-separated (KnowYourMeme: Meme,Subculture,...).")
    ] = None,
) -> dict[str, Any]:
    """Import JSONL (one record a line), the MemeBench release's JSON list, or a published dump (a KnowYourMeme
    scrape, KYMKB's template_info.json); rejected entries are reported by line or index.  Image URLs are not fetched."""
    from culturebase.importers import FORMATS, DumpError, detect_format, formats_help
    from retrieval.dump_import import OWN_FORMATS
    from retrieval.knowledge_base import ImportFileError, KnowledgeBase

    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype not in ("application/x-ndjson", "application/jsonl", "application/json", "text/plain"):
        raise ApiError(415, "unsupported_content_type", "send the records as application/x-ndjson (JSONL) or application/json (a list)")
    if format is not None and (format not in FORMATS or format == "moegirl"):
        raise ApiError(422, "unknown_format", f"format {format!r} cannot be posted; the formats are — {formats_help()} (moegirl: a folder, use `kar kb import`)")
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "empty_import", "the import body is empty")
    categories = [c for c in (category or "").split(",") if c.strip()] or None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "import.jsonl"
        path.write_bytes(raw)
        fmt = format
        if fmt is None:
            try:
                fmt = detect_format(path)
            except DumpError:
                fmt = "jsonl"  # our reader names what is wrong with the body
        if fmt not in OWN_FORMATS:
            def stream() -> tuple[Any, int]:
                rep = services.kb.import_dump(path, fmt=fmt, categories=categories, fetch_images=False)
                return rep, services.kb.store.count()

            from culturebase.store.bulk import BulkImportError

            try:
                report, total = await services.kb_call(stream)
            except ImportFileError as exc:
                raise ApiError(422, "invalid_import", str(exc).replace(str(path), "body")) from None
            except BulkImportError as exc:
                raise ApiError(507, "import_stopped", str(exc).replace(str(services.settings.kb_path), "the KB folder")) from None
            if report.stopped and not report.stored:
                raise ApiError(400, "invalid_import", f"body: {report.stopped}")
            data = report.to_dict()
            data.pop("path", None)
            return {**data, "total_entities": total}
        validator = KnowledgeBase.__new__(KnowledgeBase)  # validation does not touch the store
        validator._image_route = getattr(services.kb, "image_route", None)  # images: stored forms only, no URL fetched
        try:
            entities, report = validator.validate_file(path, fetch_images=False)
        except ImportFileError as exc:
            message = str(exc).replace(str(path), "body")
            raise ApiError(400 if "JSON" in message or "UTF-8" in message else 422, "invalid_import", message) from None
        report.format = fmt

    def store() -> int:  # a bulk import: layout by size, indexing once at the end, the free-disk guard
        services.kb.bulk_add(entities)
        return services.kb.store.count()

    if report.read and not entities and report.rejected:
        total = await services.kb_call(services.kb.store.count)
    else:
        from culturebase.store.bulk import BulkImportError

        try:
            total = await services.kb_call(store)
        except BulkImportError as exc:
            raise ApiError(507, "import_stopped", str(exc).replace(str(services.settings.kb_path), "the KB folder")) from None
    report.stored = len(entities)
    data = report.to_dict()
    data.pop("path", None)
    return {**data, "total_entities": total}
