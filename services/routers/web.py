"""The web page at ``/`` (plain HTML/JS from ``services/static``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
async def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")
