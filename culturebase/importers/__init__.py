"""Importers for the published meme dumps: KnowYourMeme (IMKG, the 2023 Scrapy export, KYMKB),
Moegirlpedia maps, the MemeBench release and our own JSONL — streamed, entry by entry, into
records of our shape with a report by reason (see docs/import.md for the field mapping)."""

from culturebase.importers.base import DumpEntry, DumpError, EntryError
from culturebase.importers.detect import FORMATS, detect_format, formats_help, open_dump
from culturebase.importers.report import ImportReport, Note, Rejected, format_validation_error

__all__ = [
    "FORMATS",
    "DumpEntry",
    "DumpError",
    "EntryError",
    "ImportReport",
    "Note",
    "Rejected",
    "detect_format",
    "format_validation_error",
    "formats_help",
    "open_dump",
]
