"""A dump posted as one archive (zip, tar, tar.gz) — the multi-file Moegirlpedia folder or a KYMKB
folder through the API — unpacked safely into a temporary folder for the same streamed readers.

Refused with :class:`ArchiveError` naming the member: a path that leaves the folder (absolute,
``..``), a link, a device or other special file.  Refused with :class:`ArchiveTooLarge` naming the
limit: more than ``max_members`` members or more than ``max_bytes`` unpacked (counted while
copying, not trusted from the archive's headers, so a zip bomb stops at the limit).
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO

from culturebase.importers.base import DumpError

_CHUNK = 1 << 20


class ArchiveError(DumpError):
    """The archive cannot be unpacked safely (the message names the member and why)."""


class ArchiveTooLarge(ArchiveError):
    """The archive unpacks to more than the limit (the message names it)."""


def archive_kind(head: bytes) -> str | None:
    """``"zip"``, ``"tar"`` (plain, gzip, bz2 or xz) or None, from the first bytes of a file."""
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")) or head[257:262] == b"ustar":
        return "tar"
    return None


def _safe_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise ArchiveError(f"archive member {name!r} points outside the archive's folder (absolute or '..'): refused")
    return path


class _Budget:
    def __init__(self, max_bytes: int, max_members: int) -> None:
        self.max_bytes, self.max_members = max_bytes, max_members
        self.bytes = self.members = 0

    def member(self, name: str) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise ArchiveTooLarge(f"the archive has more than {self.max_members} members (the limit; at {name!r})")

    def copy(self, src: IO[bytes], dest: Path, name: str) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("wb") as out:
            while chunk := src.read(_CHUNK):
                self.bytes += len(chunk)
                if self.bytes > self.max_bytes:
                    raise ArchiveTooLarge(
                        f"the archive unpacks to more than the limit of {self.max_bytes // 2**20} MB (at member {name!r})"
                    )
                out.write(chunk)


def _unzip(archive: Path, dest: Path, budget: _Budget) -> None:
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(f"not a readable zip archive: {exc}") from None
    with zf:
        for info in zf.infolist():
            rel = _safe_name(info.filename)
            budget.member(info.filename)
            mode = (info.external_attr >> 16) & 0o170000
            if mode and mode not in (0o100000, 0o040000):  # a symlink or special file stored by a Unix zip
                raise ArchiveError(f"archive member {info.filename!r} is a link or special file: refused")
            if info.is_dir():
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            try:
                with zf.open(info) as src:
                    budget.copy(src, dest / rel, info.filename)
            except (zipfile.BadZipFile, OSError, EOFError, RuntimeError) as exc:  # corrupt, encrypted
                raise ArchiveError(f"archive member {info.filename!r} cannot be read: {exc}") from None


def _untar(archive: Path, dest: Path, budget: _Budget) -> None:
    try:
        tf = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"not a readable tar archive: {exc}") from None
    with tf:
        try:
            for member in tf:
                rel = _safe_name(member.name)
                budget.member(member.name)
                if member.isdir():
                    (dest / rel).mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise ArchiveError(f"archive member {member.name!r} is a link or special file: refused")
                src = tf.extractfile(member)
                if src is None:  # pragma: no cover - isfile() members have data
                    continue
                with src:
                    budget.copy(src, dest / rel, member.name)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"the archive is cut short or corrupt: {exc}") from None


def unpack_archive(archive: Path, dest: Path, max_bytes: int, max_members: int = 100_000) -> Path:
    """Unpack ``archive`` into the empty folder ``dest``; returns the dump inside: the one top-level folder
    or file when there is only one, else ``dest``."""
    with archive.open("rb") as fh:
        kind = archive_kind(fh.read(512))
    if kind is None:
        raise ArchiveError("not a zip or tar(.gz) archive")
    dest.mkdir(parents=True, exist_ok=True)
    budget = _Budget(max_bytes, max_members)
    try:
        (_unzip if kind == "zip" else _untar)(archive, dest, budget)
    except ArchiveError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    top = [p for p in dest.iterdir() if not p.name.startswith(("__MACOSX", "."))]
    if not top:
        raise ArchiveError("the archive is empty")
    return top[0] if len(top) == 1 else dest
