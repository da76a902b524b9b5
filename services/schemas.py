"""Request (``XCreate``) and response (``XPublic``) schemas of the API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Condition = Literal["vanilla", "cot", "search_cot", "kar", "context_note"]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorPublic(BaseModel):
    error: ErrorDetail


class ContextCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    post_text: str | None = Field(None, description="Text of the post the image came with.")
    top_comment: str | None = Field(None, description="The post's top comment.")
    context_note: str | None = Field(None, description="A cultural context note (needed by condition context_note).")


class ExplainCreate(BaseModel):
    """JSON body of ``POST /v1/explain`` (multipart uploads send the same fields as form fields plus ``image``)."""

    model_config = ConfigDict(extra="forbid")

    image_url: str | None = Field(None, max_length=4096, description="http(s) URL of the image (public addresses only).")
    image_base64: str | None = Field(None, description="The image bytes, base64 (a data: URL prefix is accepted).")
    condition: Condition = Field("kar", description="vanilla, cot, search_cot, kar or context_note.")
    language: str | None = Field(None, max_length=16, description="Explanation language hint (zh or en).")
    context: ContextCreate | None = None
    stream: bool = Field(False, description="Send the stages as server-sent events as they finish.")


class ImageInfoPublic(BaseModel):
    format: str
    width: int
    height: int
    bytes: int


class ExplainPublic(BaseModel):
    id: str
    condition: str
    response: str | None
    error: dict[str, Any] | None
    trace: dict[str, Any]
    image: ImageInfoPublic
    media: dict[str, Any] | None = Field(
        None, description="For a clip or a sound: kind (video/audio), format, duration_s, frames, audio_mode, transcript."
    )
    notes: list[str] = []
    message: str | None = None


class SourcePublic(BaseModel):
    site: str
    url: str
    retrieved_at: str | None = None


class EntityCreate(BaseModel):
    """An entity to store under the id in the path (``PUT /v1/entities/{id}``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=300)
    aliases: list[str] = []
    source_work: str = ""
    description: str = ""
    visual_desc: str = ""
    cultural_usage: str = ""
    language: str = "und"
    sources: list[dict[str, Any]] = []
    tags: list[str] = []
    meme_ids: list[str] = []


class JoinedPartPublic(BaseModel):
    """One record an entity was joined from, and the identity rule that joined it (``first``: its own)."""

    id: str
    name: str
    url: str | None
    site: str
    rule: str
    joined_at: str


class EntityPublic(BaseModel):
    id: str
    name: str
    aliases: list[str]
    source_work: str
    description: str
    visual_desc: str
    cultural_usage: str
    language: str
    sources: list[dict[str, Any]]
    tags: list[str]
    meme_ids: list[str]
    joined_from: list[JoinedPartPublic] = Field(default_factory=list, description="The records it was joined from (empty: one record).")
    updated_at: str | None = None


class SplitCreate(BaseModel):
    """``POST /v1/entities/{id}/split``: the page of the record to take back out."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, max_length=2000, description="A source URL of a record joined into the entity.")


class SplitPublic(BaseModel):
    kept: EntityPublic
    split: EntityPublic


class EntityHitPublic(BaseModel):
    id: str
    name: str
    score: float
    route: str
    passes_tau: bool
    model_config = ConfigDict(extra="allow")


class EntitySearchPublic(BaseModel):
    query: str | None
    tau: float | None
    hits: list[dict[str, Any]]
    routes: dict[str, str] | None = None
    calibration: dict[str, Any] | None = None  # the thresholds in use and their source (docs/calibration.md)
    notes: list[str] = []  # e.g. grounding is not calibrated for this embedder


class ImportPublic(BaseModel):
    read: int
    stored: int
    merged_duplicates: int
    rejected: list[dict[str, Any]]
    total_entities: int
    images: int = 0
    image_problems: list[dict[str, Any]] = Field(default_factory=list)
    format: str = "jsonl"
    unit: str = "line"
    skipped_category: int = 0
    skipped_by_category: dict[str, int] = Field(default_factory=dict)
    notes: list[dict[str, Any]] = Field(default_factory=list)
    notes_total: int = 0
    images_not_fetched: int = 0
    stopped: str | None = None
    dry_run: bool = False  # true: read and validated only, nothing stored (`stored`: what would be)


class CrawlJobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spider: Literal["knowyourmeme", "moegirl", "memegen"]
    start_urls: list[str] = Field(default_factory=list, max_length=100)
    limit: int | None = Field(None, ge=1, le=1_000_000)
    options: dict[str, Any] = Field(default_factory=dict)


class CrawlJobPublic(BaseModel):
    id: str
    spider: str
    status: str
    params: dict[str, Any]
    counters: dict[str, Any]
    error: str | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    attempts: int
    resumable: bool
    cancel_requested: bool


class AblationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(min_length=1, max_length=500, description="Benchmark file or folder relative to DATA_DIR/datasets.")
    conditions: list[Condition] = Field(default_factory=lambda: ["vanilla", "cot", "search_cot", "kar"], min_length=1, max_length=5)
    limit: int | None = Field(None, ge=1, le=1_000_000)
    concurrency: int = Field(4, ge=1, le=256)
    resume_id: str | None = Field(None, max_length=64)
    allow_no_evidence: bool = Field(
        False, description="Run search_cot/kar even when the search backend has nothing to search (else 422 no_evidence)."
    )


class AblationPublic(BaseModel):
    id: str
    dataset: str
    conditions: list[str]
    status: str
    done: int
    total: int
    progress: float
    error: str | None
    summary: dict[str, Any] | None
    results: dict[str, str]


class AblationDatasetPublic(BaseModel):
    name: str = Field(description="Path relative to DATA_DIR/datasets, as POST /v1/ablations takes it.")
    kind: str = Field(description="'file' (a .json/.jsonl benchmark) or 'folder' (its .json/.jsonl files together).")
    size_bytes: int
