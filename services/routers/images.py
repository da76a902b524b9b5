"""``GET /v1/images/{sha256}``: an entity image from the content-addressed image folder (thumbnails on the web page)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path as PathParam
from fastapi.responses import FileResponse

from services.deps import Services
from services.errors import ApiError

router = APIRouter(tags=["entities"])
MEDIA_TYPES = {"png": "image/png", "jpg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
Sha256 = Annotated[str, PathParam(pattern=r"^[0-9a-f]{64}$", description="The image's sha256 (from an entity's images).")]


@router.get("/v1/images/{sha256}", response_class=FileResponse, responses={404: {"description": "no such image"}})
async def get_image(sha256: Sha256, services: Services) -> FileResponse:
    folder = services.settings.images_dir / sha256[:2]
    for ext, media_type in MEDIA_TYPES.items():
        path = folder / f"{sha256}.{ext}"
        if path.is_file():
            return FileResponse(path, media_type=media_type, headers={"Cache-Control": "public, max-age=86400, immutable"})
    raise ApiError(404, "image_not_found", f"no entity image with sha256 {sha256}")
