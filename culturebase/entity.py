"""CultureBase records: the :class:`Entity` model, its stable id and its embedding texts."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from datetime import datetime, timezone
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 20_000
MAX_ALIASES = 200

_WS = re.compile(r"\s+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_TRACKING_PARAMS = re.compile(r"^(utm_\w+|fbclid|gclid|ref|spm)$", re.I)


def normalize_text(text: str) -> str:
    """Matching key of a name or alias: NFKC (full-width → half-width), case-folded, single spaces."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def detect_language(text: str) -> str:
    """``zh`` when the text holds CJK characters, else ``en`` (used for release imports without a language)."""
    return "zh" if _CJK.search(text) else "en"


def canonical_url(url: str) -> str:
    """A canonical form of a page URL: lower-case scheme/host, decoded path, no fragment or tracking params."""
    parts = urlsplit(url.strip())
    scheme = (parts.scheme or "https").lower()
    if scheme == "http":
        scheme = "https"
    host = (parts.hostname or "").lower()
    if parts.port and parts.port not in (80, 443):
        host = f"{host}:{parts.port}"
    path = quote(unquote(parts.path), safe="/:@!$&'()*+,;=-._~")
    if len(path) > 1:
        path = path.rstrip("/")
    query = urlencode(sorted((k, v) for k, v in parse_qsl(parts.query) if not _TRACKING_PARAMS.match(k)))
    return urlunsplit((scheme, host, path, query, ""))


def make_entity_id(name: str, source_work: str = "", language: str = "", url: str | None = None) -> str:
    """Stable id: from the canonical source URL when there is one, else language + name + source work."""
    if url:
        key = "url:" + canonical_url(url)
    else:
        key = "|".join(["name", language.lower(), normalize_text(name), normalize_text(source_work)])
    return "cb_" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:20]


class Source(BaseModel):
    """Where a record's facts come from."""

    model_config = ConfigDict(extra="forbid")

    site: str = Field(min_length=1, max_length=100)
    url: str = Field(min_length=1, max_length=2000)
    retrieved_at: datetime | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        if urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc:
            raise ValueError("must be an absolute http(s) URL")
        return value


def stored_path(value: str, kind: str) -> str:
    """``value`` when it is a path inside the ``kind`` folder (``ab/<sha256>.<ext>``); else a ValueError."""
    if value.startswith("/") or ".." in value.split("/"):
        raise ValueError(f"must be a path inside the {kind} folder (ab/<sha256>.<ext>)")
    return value


class EntityImage(BaseModel):
    """An image of the entity, stored once under ``KAR_DATA_DIR/images`` by content hash."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, max_length=2000, description="Where it was downloaded from (None for a local file).")
    path: str = Field(min_length=1, max_length=200, description="Path under the image folder: ``ab/<sha256>.<ext>``.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    width: int = Field(ge=1)
    height: int = Field(ge=1)
    kind: Literal["template", "example"] = "template"

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        return stored_path(value, "image")


class EntitySound(BaseModel):
    """A sound clip of the entity (a song hook, a sound effect, a famous line), stored once under
    ``KAR_DATA_DIR/sounds`` by content hash and fingerprinted for the sound route."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, max_length=2000, description="Where it was downloaded from (None for a local file).")
    path: str = Field(min_length=1, max_length=200, description="Path under the sound folder: ``ab/<sha256>.<ext>``.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    seconds: float = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        return stored_path(value, "sound")


def _clean(value: Any) -> Any:
    return _WS.sub(" ", value).strip() if isinstance(value, str) else value


def _stored_time(value: Any) -> datetime | None:
    """A datetime as :meth:`Entity.to_payload` writes it (ISO 8601), or None."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


class Constituent(BaseModel):
    """One record an entity was joined from (:mod:`culturebase.identity`): the record as it was before the
    join and the identity rule that joined it (``first`` for the record the entity started from)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    url: str | None = Field(None, max_length=2000, description="The record's canonical source URL (None for a record without one).")
    site: str = Field("", max_length=100)
    rule: str = Field(min_length=1, max_length=40)
    joined_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    record: dict[str, Any] = Field(description="The record's fields as they were when it was joined (no constituents).")


class Entity(BaseModel):
    """One cultural entity (a character, work, meme template, catchphrase ...)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    id: str = Field("", max_length=200, description="Stable id; derived when empty.")
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    aliases: list[str] = Field(default_factory=list, max_length=MAX_ALIASES)
    source_work: str = Field("", max_length=MAX_NAME_CHARS * 5)
    description: str = Field("", max_length=MAX_TEXT_CHARS)
    visual_desc: str = Field("", max_length=MAX_TEXT_CHARS)
    cultural_usage: str = Field("", max_length=MAX_TEXT_CHARS)
    language: str = Field("und", min_length=2, max_length=16, pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$|^und$")
    sources: list[Source] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list, max_length=MAX_ALIASES)
    meme_ids: list[str] = Field(default_factory=list)
    images: list[EntityImage] = Field(default_factory=list, max_length=50)
    audio: list[EntitySound] = Field(default_factory=list, max_length=50)
    #: the records this entity was joined from, first the one it started from; empty for a single record
    constituents: list[Constituent] = Field(default_factory=list)
    updated_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))

    @field_validator("name", "source_work", "description", "visual_desc", "cultural_usage", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return _clean(value)

    @field_validator("name")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value:
            raise ValueError("must not be blank")
        return value

    @field_validator("aliases", "tags", mode="before")
    @classmethod
    def _string_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("must be a list of strings, not a string")
        return value

    @field_validator("aliases", "tags")
    @classmethod
    def _dedupe(cls, values: list[str]) -> list[str]:
        seen: set[str] = set()
        out: list[str] = []
        for raw in values:
            text = _clean(raw)
            key = normalize_text(text)
            if not key or key in seen:
                continue
            if len(text) > MAX_NAME_CHARS:
                raise ValueError(f"item {text[:40]!r}... is longer than {MAX_NAME_CHARS} characters")
            seen.add(key)
            out.append(text)
        return out

    @field_validator("images")
    @classmethod
    def _dedupe_images(cls, values: list[EntityImage]) -> list[EntityImage]:
        seen: set[str] = set()
        return [i for i in values if i.sha256 not in seen and not seen.add(i.sha256)]  # type: ignore[func-returns-value]

    @field_validator("audio")
    @classmethod
    def _dedupe_audio(cls, values: list[EntitySound]) -> list[EntitySound]:
        seen: set[str] = set()
        return [a for a in values if a.sha256 not in seen and not seen.add(a.sha256)]  # type: ignore[func-returns-value]

    @field_validator("language")
    @classmethod
    def _lower_lang(cls, value: str) -> str:
        return value.lower()

    @model_validator(mode="after")
    def _derive(self) -> "Entity":
        name_key = normalize_text(self.name)
        self.aliases = [a for a in self.aliases if normalize_text(a) != name_key]
        if not self.id:
            url = self.sources[0].url if self.sources else None
            self.id = make_entity_id(self.name, self.source_work, self.language, url)
        return self

    # -- derived views ----------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """Name followed by aliases."""
        return [self.name, *self.aliases]

    @property
    def match_keys(self) -> list[str]:
        """Normalized name and aliases, for exact lexical matching and payload filters."""
        return list(dict.fromkeys(normalize_text(n) for n in self.names))

    @property
    def sites(self) -> list[str]:
        """Distinct source sites."""
        return list(dict.fromkeys(s.site for s in self.sources))

    def embedding_text(self) -> str:
        """The MemeBench release's embedding text (kept compatible)."""
        return " | ".join(
            [self.name, ", ".join(self.aliases), self.source_work, self.description, self.visual_desc, self.cultural_usage]
        )

    def route_texts(self) -> dict[str, str]:
        """Text embedded for each named vector: ``full`` (the release's text) plus one per grounding route.

        A route the record has nothing to say on gets ``""`` and no vector there: ``visual`` without a
        visual description (a description alone says what the entity is, not what it looks like: a
        Moegirl character's voice actors, a work's "a character of X" shared by hundreds of records),
        ``usage`` without cultural usage (an OCR cue scores such an entity on its identity vector:
        :mod:`retrieval.routes.dense`).  What is not described is not searched by description."""
        aliases = ", ".join(self.aliases)
        return {
            "full": self.embedding_text(),
            "identity": " | ".join(x for x in (self.name, aliases, self.source_work) if x),
            "visual": " | ".join(x for x in (self.visual_desc, self.description) if x) if self.visual_desc else "",
            "usage": " | ".join(x for x in (self.name, aliases, self.cultural_usage) if x) if self.cultural_usage else "",
        }

    @property
    def primary_url(self) -> str | None:
        """The canonical URL of the record's own page (its first source), or None."""
        return canonical_url(self.sources[0].url) if self.sources else None

    def merged_with(self, other: "Entity") -> "Entity":
        """This record with ``other``'s aliases, sources, tags and meme ids united in, and empty fields filled
        (the fields only: who joined what is :func:`culturebase.identity.join`'s record)."""
        data = self.model_dump()
        other_data = other.model_dump()
        for key in ("source_work", "description", "visual_desc", "cultural_usage"):
            if not data[key]:
                data[key] = other_data[key]
        data["aliases"] = self.aliases + ([other.name] if normalize_text(other.name) != normalize_text(self.name) else []) + other.aliases
        seen_urls = {canonical_url(s.url) for s in self.sources}
        data["sources"] = [s.model_dump() for s in self.sources] + [
            s.model_dump() for s in other.sources if canonical_url(s.url) not in seen_urls
        ]
        data["tags"] = self.tags + other.tags
        data["meme_ids"] = list(dict.fromkeys(self.meme_ids + other.meme_ids))
        seen_images = {i.sha256 for i in self.images}
        data["images"] = [i.model_dump() for i in self.images] + [
            i.model_dump() for i in other.images if i.sha256 not in seen_images and not seen_images.add(i.sha256)
        ]
        seen_audio = {a.sha256 for a in self.audio}
        data["audio"] = [a.model_dump() for a in self.audio] + [
            a.model_dump() for a in other.audio if a.sha256 not in seen_audio and not seen_audio.add(a.sha256)
        ]
        data["updated_at"] = max(self.updated_at, other.updated_at)
        return Entity.model_validate(data)

    def to_payload(self) -> dict[str, Any]:
        """The stored payload: the record plus indexed matching fields."""
        payload = self.model_dump(mode="json")
        payload["match_keys"] = self.match_keys
        payload["sites"] = self.sites
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any], trusted: bool = False) -> "Entity":
        """Rebuild a record from a stored payload.

        ``trusted``: the payload is one :meth:`to_payload` wrote (a validated record), so it is rebuilt
        without validating it again (grounding rebuilds a hundred candidates a query); a payload that
        does not have that shape is validated as usual."""
        data = {k: v for k, v in payload.items() if k in cls.model_fields}
        if trusted:
            try:
                return cls._rebuilt(data)
            except (TypeError, ValueError, KeyError, AttributeError):
                pass
        return cls.model_validate(data)

    @classmethod
    def _rebuilt(cls, data: dict[str, Any]) -> "Entity":
        if not data.get("id") or not data.get("name"):
            raise ValueError("not a stored record")
        data["sources"] = [
            Source.model_construct(site=s["site"], url=s["url"], retrieved_at=_stored_time(s.get("retrieved_at")))
            for s in data.get("sources") or []
        ]
        data["images"] = [EntityImage.model_construct(**i) for i in data.get("images") or []]
        data["audio"] = [EntitySound.model_construct(**a) for a in data.get("audio") or []]
        data["constituents"] = [
            Constituent.model_construct(**{**c, "joined_at": _stored_time(c.get("joined_at"))}) for c in data.get("constituents") or []
        ]
        if "updated_at" in data:
            data["updated_at"] = _stored_time(data["updated_at"])
        return cls.model_construct(**data)

    @classmethod
    def from_release(cls, record: dict[str, Any]) -> "Entity":
        """Import one record of the MemeBench release's ``kb_entries.json`` as is."""
        if not isinstance(record, dict):
            raise ValueError("record must be a JSON object")
        data = dict(record)
        if "source" in data and "source_work" not in data:
            data["source_work"] = data.pop("source") or ""
        data["meme_ids"] = [str(m) for m in data.get("meme_ids") or []]
        for key in ("aliases", "tags"):
            if data.get(key) is None:
                data.pop(key, None)
        if "id" in data and not isinstance(data["id"], str):
            data["id"] = str(data["id"])
        # fields the release may add later are ignored rather than rejected
        data = {k: v for k, v in data.items() if k in cls.model_fields}
        if "language" not in data:
            data["language"] = detect_language(str(data.get("name", "")) + str(data.get("description", "")))
        return cls.model_validate(data)
