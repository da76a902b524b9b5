"""POST /v1/entities/import with an archive of a dump folder (the Moegirlpedia maps as zip and tar.gz),
dry runs, and archives that must be refused: path traversal, links, the unpacked-size limit."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile

from tests.services.conftest import rw, store_fingerprint

MAPS = {
    "moegirl/char2subject.json": {"米拉(空洞骑士)": ["澳大利亚作品", "空洞骑士"], "泉此方": ["日本作品", "幸运星"], "碧蓝航线:瑞凤": ["中国作品", "碧蓝航线"]},
    "moegirl/char2cv.json": {"泉此方": ["平野绫"]},
    "moegirl/subject_index.json": ["空洞骑士", "幸运星", "碧蓝航线"],
}


def zip_of(files: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, value in files.items():
            zf.writestr(name, value if isinstance(value, (bytes, str)) else json.dumps(value, ensure_ascii=False))
    return buf.getvalue()


def targz_of(files: dict[str, object], link: tuple[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, value in files.items():
            data = value if isinstance(value, bytes) else json.dumps(value, ensure_ascii=False).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link[0])
            info.type, info.linkname = tarfile.SYMTYPE, link[1]
            tf.addfile(info)
    return buf.getvalue()


async def test_moegirl_folder_as_zip_and_tar_gz_is_imported(api):
    client, services = api
    count = services.kb.store.count()
    r = await client.post("/v1/entities/import", params={"category": "日本作品,中国作品"}, content=zip_of(MAPS),
                          headers={**rw(), "Content-Type": "application/zip"})
    assert r.status_code == 200, r.text
    rep = r.json()
    assert (rep["format"], rep["unit"], rep["read"], rep["stored"], rep["dry_run"]) == ("moegirl", "entry", 3, 2, False)
    assert rep["skipped_by_category"] == {"澳大利亚作品": 1} and rep["total_entities"] == count + 2
    (ruifeng,) = [e for e in services.kb.store.find_by_name(["瑞凤"]) if e.source_work == "碧蓝航线"]
    assert "moegirl" in ruifeng.sites
    # the same folder as tar.gz, format named: the two characters again (merged with the stored ones), and 米拉
    r = await client.post("/v1/entities/import", params={"format": "moegirl"}, content=targz_of(MAPS),
                          headers={**rw(), "Content-Type": "application/gzip"})
    assert r.status_code == 200, r.text
    assert (r.json()["read"], r.json()["stored"], r.json()["total_entities"]) == (3, 3, count + 3)


async def test_dry_run_reports_without_storing(api):
    client, services = api
    before = store_fingerprint(services)
    r = await client.post("/v1/entities/import", params={"dry_run": "true"}, content=zip_of(MAPS),
                          headers={**rw(), "Content-Type": "application/zip"})
    assert r.status_code == 200, r.text
    assert (r.json()["stored"], r.json()["dry_run"]) == (3, True)
    lines = [json.dumps({"name": "干跑梗", "description": "a dry run", "language": "zh"}, ensure_ascii=False), "{not json"]
    r = await client.post("/v1/entities/import", params={"dry_run": "true"}, content="\n".join(lines).encode(),
                          headers={**rw(), "Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    assert (r.json()["format"], r.json()["read"], r.json()["stored"], [x["line"] for x in r.json()["rejected"]]) == ("jsonl", 2, 1, [2])
    assert store_fingerprint(services) == before


async def test_unsafe_or_wrong_archives_are_refused_and_change_nothing(api):
    client, services = api
    before = store_fingerprint(services)
    zip_headers = {**rw(), "Content-Type": "application/zip"}
    r = await client.post("/v1/entities/import", content=zip_of({**MAPS, "../escape.json": {}}), headers=zip_headers)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_archive"
    assert "'../escape.json'" in r.json()["error"]["message"] and "outside" in r.json()["error"]["message"]
    r = await client.post("/v1/entities/import", content=zip_of({"/etc/evil.json": {}}), headers=zip_headers)
    assert r.status_code == 422 and "'/etc/evil.json'" in r.json()["error"]["message"]
    r = await client.post("/v1/entities/import", content=targz_of(MAPS, link=("moegirl/extra_info.json", "/etc/passwd")),
                          headers={**rw(), "Content-Type": "application/gzip"})
    assert r.status_code == 422 and "link" in r.json()["error"]["message"] and "extra_info.json" in r.json()["error"]["message"]
    r = await client.post("/v1/entities/import", content=b"plain text, not a zip", headers=zip_headers)
    assert r.status_code == 422 and "not a zip or tar" in r.json()["error"]["message"]
    r = await client.post("/v1/entities/import", content=zip_of({"notes/readme.txt": "hello"}), headers=zip_headers)
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_format" and "moegirl" in r.json()["error"]["message"]
    r = await client.post("/v1/entities/import", params={"format": "moegirl"}, content=json.dumps(MAPS["moegirl/char2cv.json"]).encode(),
                          headers={**rw(), "Content-Type": "application/json"})
    assert r.status_code == 422 and "archive of the folder" in r.json()["error"]["message"]
    assert store_fingerprint(services) == before


async def test_an_archive_over_the_unpacked_limit_answers_413_naming_it(make_client):
    async with make_client(import_archive_max_mb=1) as (client, services):
        before = store_fingerprint(services)
        bomb = zip_of({**MAPS, "moegirl/extra_info.json": b"0" * (3 * 2**20)})  # 3 MB of zeros: a few KB zipped
        assert len(bomb) < 64 * 1024
        r = await client.post("/v1/entities/import", content=bomb, headers={**rw(), "Content-Type": "application/zip"})
        assert r.status_code == 413, r.text
        err = r.json()["error"]
        assert err["code"] == "archive_too_large" and "limit of 1 MB" in err["message"] and "KAR_IMPORT_ARCHIVE_MAX_MB" in err["message"]
        assert store_fingerprint(services) == before
