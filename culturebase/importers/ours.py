"""Our own JSONL (one ``Entity`` record a line) and the MemeBench release's ``kb_entries.json`` (a JSON list)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from culturebase.importers.base import DumpEntry, first_bytes, stream_array_items, stream_lines


def _entries(items: Iterator, errors_stop: bool) -> Iterator[DumpEntry]:
    for where, rec, err in items:
        if err is not None:
            yield DumpEntry(where, error=err, stopped=errors_stop)
        elif not isinstance(rec, dict):
            what = "record" if errors_stop else "line"
            yield DumpEntry(where, error=f"{what} {where} is {type(rec).__name__}, expected a JSON object")
        else:
            yield DumpEntry(where, rec, category=None)


def read_jsonl(path: Path, fetch_images: bool = True) -> Iterator[DumpEntry]:
    """Our JSONL (line numbers); a file that starts with ``[`` is read as the release's list (indexes)."""
    if first_bytes(path, 4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        yield from _entries(stream_array_items(path), errors_stop=True)
    else:
        yield from _entries(stream_lines(path), errors_stop=False)


def read_release(path: Path, fetch_images: bool = True) -> Iterator[DumpEntry]:
    """The MemeBench release's ``kb_entries.json`` (a JSON list), streamed."""
    yield from read_jsonl(path, fetch_images)
