"""`kar kb` end to end through the real CLI app (typer's CliRunner) on the sample CultureBase."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.conftest import SAMPLE

runner = CliRunner()


def kar(*args: str, env: dict | None = None):
    from culturebase.settings import get_settings

    get_settings.cache_clear()  # each invocation is a fresh process in real use
    return runner.invoke(app, list(args), env=env, catch_exceptions=False)


@pytest.mark.parametrize("query", ["Zhuge Liang", "诸葛亮"])
def test_search_returns_the_entity_first(sample_kb_copy, query):
    res = kar("kb", "--kb", str(sample_kb_copy), "search", query, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["hits"][0]["name"] == "诸葛亮" and data["hits"][0]["passes_tau"]
    assert data["hits"][0]["sources"][0]["url"].startswith("https://")


def test_search_lang_filter_and_table_output(sample_kb_copy):
    res = kar("kb", "--kb", str(sample_kb_copy), "search", "doge", "--lang", "en", "--top-k", "3", "--json")
    hits = json.loads(res.stdout)["hits"]
    assert len(hits) == 3 and all(h["language"] == "en" for h in hits) and hits[0]["name"] == "Doge"
    table = kar("kb", "--kb", str(sample_kb_copy), "search", "doge")
    assert table.exit_code == 0 and "Doge" in table.stdout


def test_stats_get_delete(sample_kb_copy):
    stats = json.loads(kar("kb", "--kb", str(sample_kb_copy), "stats", "--json").stdout)
    assert stats["entities"] == sum(1 for line in SAMPLE.read_text("utf-8").splitlines() if line.strip())
    assert set(stats["by_language"]) == {"en", "zh"}
    hit = json.loads(kar("kb", "--kb", str(sample_kb_copy), "search", "Doge", "--json").stdout)["hits"][0]
    got = json.loads(kar("kb", "--kb", str(sample_kb_copy), "get", hit["id"]).stdout)
    assert got["name"] == "Doge"
    deleted = kar("kb", "--kb", str(sample_kb_copy), "delete", hit["id"], "--json")
    assert deleted.exit_code == 0 and json.loads(deleted.stdout)["deleted"] == 1
    again = kar("kb", "--kb", str(sample_kb_copy), "delete", hit["id"])
    assert again.exit_code == 1 and "no entity with id" in again.stderr


def test_import_partial_exits_3_and_reports_lines(tmp_path, tiny_bge_m3_path):
    f = tmp_path / "in.jsonl"
    f.write_text('{"name": "Doge", "language": "en"}\n{"name": 5}\n', "utf-8")
    env = {"KAR_EMBEDDER": "bge-m3", "KAR_EMBEDDER_MODEL": str(tiny_bge_m3_path)}
    res = kar("kb", "--kb", str(tmp_path / "kb"), "import", str(f), "--json", env=env)
    assert res.exit_code == 3
    report = json.loads(res.stdout)
    assert report["stored"] == 1 and report["rejected"][0]["line"] == 2 and "field 'name'" in report["rejected"][0]["reason"]


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["import", "/nonexistent/file.jsonl"], {}, "no such file"),
        (["search", "x"], {"KAR_EMBEDDER": "bge-m3", "KAR_EMBEDDER_MODEL": "/nonexistent/bge-m3"}, "does not exist"),
        (["search", "   "], {}, "search text is empty"),
        (["get", "x"], {"KAR_HNSW_EF": "0"}, "invalid settings"),
    ],
)
def test_bad_input_is_one_line_error_with_exit_2(tmp_path, args, env, message):
    res = kar("kb", "--kb", str(tmp_path / "kb"), *args, env=env)
    assert res.exit_code == 2  # bad input or usage (the exit-code table of `kar --help`)
    assert message in res.stderr and res.stderr.strip().count("\n") <= 1, res.stderr


def test_embedder_mismatch_points_to_reindex(sample_kb_copy, tiny_bge_m3_path):
    env = {"KAR_EMBEDDER": "bge-m3", "KAR_EMBEDDER_MODEL": str(tiny_bge_m3_path)}
    res = kar("kb", "--kb", str(sample_kb_copy), "search", "doge", env=env)
    assert res.exit_code == 1 and "kar kb reindex" in res.stderr
    # nothing was lost: the original embedder still finds everything
    stats = json.loads(kar("kb", "--kb", str(sample_kb_copy), "stats", "--json").stdout)
    assert stats["entities"] > 150


def test_locked_store_is_a_clear_error(sample_kb_copy):
    from culturebase.store.edge import EdgeBackend

    holder = EdgeBackend(sample_kb_copy)
    try:
        res = kar("kb", "--kb", str(sample_kb_copy), "stats")
        assert res.exit_code == 1 and "already open in another process" in res.stderr
    finally:
        holder.close()


def test_export_to_file(sample_kb_copy, tmp_path):
    out = tmp_path / "export.jsonl"
    res = kar("kb", "--kb", str(sample_kb_copy), "export", "--lang", "zh", "--out", str(out))
    assert res.exit_code == 0
    rows = [json.loads(x) for x in out.read_text("utf-8").splitlines()]
    assert rows and all(r["language"] == "zh" for r in rows)


def test_kb_option_after_the_subcommand_wins(sample_kb_copy, tmp_path):
    after = kar("kb", "search", "Doge", "--kb", str(sample_kb_copy), "--json")
    assert after.exit_code == 0, after.output and json.loads(after.stdout)["hits"][0]["name"] == "Doge"
    empty = tmp_path / "empty-kb"
    both = kar("kb", "--kb", str(empty), "stats", "--kb", str(sample_kb_copy), "--json")
    assert json.loads(both.stdout)["entities"] > 150  # the one after the subcommand


def test_stats_human_output_is_text_not_python(sample_kb_copy):
    res = kar("kb", "stats", "--kb", str(sample_kb_copy))
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "{" not in text and "'" not in text.replace("'s", "")  # no dict reprs
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip():
            rows.setdefault(line.split()[0], line.split()[1:])  # the first row of that name
    assert rows["entities"][0] == "172"
    assert rows["en"][0].isdigit() and rows["zh"][0].isdigit()  # the by-language table
    assert int(rows["en"][0]) + int(rows["zh"][0]) <= 172
    assert "no sparse lexical weights, so the sparse route never runs" in text  # said once, here


def test_search_human_output_does_not_repeat_the_standing_sparse_note(sample_kb_copy):
    res = kar("kb", "search", "Zhuge Liang", "--kb", str(sample_kb_copy))
    assert res.exit_code == 0, res.output
    assert "诸葛亮" in res.stdout and "route sparse" not in res.stdout
    as_json = json.loads(kar("kb", "search", "Zhuge Liang", "--kb", str(sample_kb_copy), "--json").stdout)
    assert as_json["routes"]["sparse"].startswith("skipped")  # still in the machine-readable form
