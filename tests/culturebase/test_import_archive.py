"""Unpacking a posted dump archive: the dump inside is returned; unsafe members and sizes are refused by name."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from culturebase.importers.archive import ArchiveError, ArchiveTooLarge, archive_kind, unpack_archive


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_the_one_top_level_folder_or_file_is_the_dump(tmp_path):
    folder = unpack_archive(_zip(tmp_path / "a.zip", {"maps/char2subject.json": b"{}", "maps/char2cv.json": b"{}"}), tmp_path / "a", 10**6)
    assert folder.name == "maps" and (folder / "char2subject.json").is_file()
    single = unpack_archive(_tar(tmp_path / "b.tgz", {"kym.json": b"[]"}), tmp_path / "b", 10**6)
    assert single.name == "kym.json" and single.is_file()
    several = unpack_archive(_tar(tmp_path / "c.tgz", {"x.json": b"[]", "y.json": b"[]"}), tmp_path / "c", 10**6)
    assert several == tmp_path / "c"


def test_members_leaving_the_folder_are_refused_by_name(tmp_path):
    with pytest.raises(ArchiveError, match=r"'a/\.\./\.\./etc/x'.*outside"):
        unpack_archive(_tar(tmp_path / "t.tgz", {"a/../../etc/x": b"1"}), tmp_path / "t", 10**6)
    assert not (tmp_path.parent / "etc" / "x").exists()
    with pytest.raises(ArchiveError, match="'/abs.json'"):
        unpack_archive(_tar(tmp_path / "u.tgz", {"/abs.json": b"1"}), tmp_path / "u", 10**6)


def test_size_and_member_limits_name_the_limit(tmp_path):
    with pytest.raises(ArchiveTooLarge, match="more than the limit of 1 MB"):
        unpack_archive(_zip(tmp_path / "z.zip", {"big.json": b"0" * (2 * 2**20)}), tmp_path / "z", 2**20)
    assert not (tmp_path / "z").exists()  # what was unpacked is removed
    with pytest.raises(ArchiveTooLarge, match="more than 2 members"):
        unpack_archive(_zip(tmp_path / "m.zip", {"a": b"1", "b": b"1", "c": b"1"}), tmp_path / "m", 10**6, max_members=2)


def test_not_an_archive_or_cut_short(tmp_path):
    plain = tmp_path / "p.json"
    plain.write_bytes(b"[1, 2]")
    assert archive_kind(plain.read_bytes()) is None
    with pytest.raises(ArchiveError, match="not a zip or tar"):
        unpack_archive(plain, tmp_path / "p", 10**6)
    cut = tmp_path / "cut.tgz"
    data = _tar(tmp_path / "whole.tgz", {"x.json": bytes(range(256)) * 4000}).read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArchiveError, match="cut short or corrupt"):
        unpack_archive(cut, tmp_path / "c", 10**7)
