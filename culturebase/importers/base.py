"""What every dump reader yields, and the streaming JSON readers they share.

A reader turns a dump into :class:`DumpEntry` items one at a time: a record in our shape
(``Entity`` fields, plus ``image`` for a template image URL), or the reason the entry cannot
be one.  Nothing reads a dump whole: JSON arrays (also several written one after the other,
as ``scrapy crawl -o`` appends them) and JSON objects are streamed with ``ijson``, JSON Lines
with a line reader.  A dump cut short yields what came before the cut, then one
``stopped`` entry that says where it ended.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO


class DumpError(ValueError):
    """The dump as a whole cannot be read (missing, not UTF-8, an unknown shape); the message says why."""


class EntryError(ValueError):
    """One entry cannot be imported: ``field`` names what is wrong."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"field {field_name!r}: {message}")
        self.field = field_name


@dataclass
class DumpEntry:
    """One entry of a dump: ``where`` is its line (JSON Lines) or 1-based index (JSON arrays, maps)."""

    where: int
    record: dict[str, Any] | None = None
    error: str | None = None
    category: str | None = None
    #: the page the site itself says this entry is (a crawl row's ``same_as``): joined to it by rule ``declared``
    same_as: str | None = None
    #: fields left out or shortened: (field, reason)
    notes: list[tuple[str, str]] = field(default_factory=list)
    #: the dump ends here (cut short or broken); ``error`` says how
    stopped: bool = False


def open_binary(path: Path) -> BinaryIO:
    """Open a dump file for streaming, with the errors a user can act on."""
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise DumpError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DumpError(f"{path}: is a directory, expected a file") from None
    except PermissionError:
        raise DumpError(f"{path}: permission denied") from None


def ijson_module() -> Any:
    """The ``ijson`` streaming JSON parser (imported on first use)."""
    import ijson

    return ijson


def stream_array_items(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(index, item, None)`` for every item of the top-level JSON array(s), in order; a dump cut short
    or broken ends with ``(index, None, message)`` naming the entry where reading stopped."""
    ijson = ijson_module()
    n = 0
    with open_binary(path) as fh:
        try:
            for item in ijson.items(fh, "item", multiple_values=True, use_float=True):
                n += 1
                yield n, item, None
        except ijson.IncompleteJSONError as exc:
            yield n + 1, None, f"the dump ends inside entry {n + 1} (cut short?): {exc}; the {n} entries before it were read"
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            yield n + 1, None, f"invalid JSON in entry {n + 1}: {exc}; the {n} entries before it were read"


def stream_object_items(path: Path) -> Iterator[tuple[int, str, Any, str | None]]:
    """``(index, key, value, None)`` for every member of a top-level JSON object; a cut ends like
    :func:`stream_array_items`."""
    ijson = ijson_module()
    n = 0
    with open_binary(path) as fh:
        try:
            for key, value in ijson.kvitems(fh, "", use_float=True):
                n += 1
                yield n, key, value, None
        except ijson.IncompleteJSONError as exc:
            yield n + 1, "", None, f"the file ends inside member {n + 1} (cut short?): {exc}; the {n} members before it were read"
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            yield n + 1, "", None, f"invalid JSON in member {n + 1}: {exc}; the {n} members before it were read"


def json_line(raw: bytes, byte_of: str = " of the line") -> tuple[Any, str | None]:
    """One JSON Lines line decoded: ``(value, None)``, or ``(None, reason)`` naming the bad byte or column."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start}{byte_of})"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON at column {exc.colno}: {exc.msg}"


def stream_lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(line, value, None)`` for every non-blank line of a JSON Lines file, ``(line, None, reason)`` for a bad one."""
    with open_binary(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            yield lineno, *json_line(raw)


def first_bytes(path: Path, size: int = 65536) -> bytes:
    """The start of a file (format detection)."""
    with open_binary(path) as fh:
        return fh.read(size)


def first_value(path: Path) -> tuple[str, Any]:
    """``("array", first item)``, ``("object", (first key, first value))``, ``("lines", first line's value)``
    or ``("other", None)``: what the file starts with, read as a stream."""
    head = first_bytes(path).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"["):
        for _, item, err in stream_array_items(path):
            return ("array", item) if err is None else ("other", None)
        return "array", None
    if head.startswith(b"{"):
        line = head.split(b"\n", 1)[0]
        try:
            return "lines", json.loads(line)
        except ValueError:
            pass
        for _, key, value, err in stream_object_items(path):
            return ("object", (key, value)) if err is None else ("other", None)
        return "object", None
    return "other", None
