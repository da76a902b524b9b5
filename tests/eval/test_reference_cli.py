"""kar report-refs (reference_command) through typer's CliRunner, and kar report --human/--judge-file.

Cosine uses a deterministic keyword embedder (cat / dog / fish axes) so every expected value
is checkable by hand; the rubric goes through the real OpenAICompatibleVLM against the
FakeOpenAIServer.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from services.cli.report import reference_command, report_command
from eval.verdicts import evaluation_from_vector
from tests.eval.evalkit import make_item, write_bench
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply

app = typer.Typer()
app.command("report-refs")(reference_command)
app.command("report")(report_command)
runner = CliRunner()

VOCAB = ("cat", "dog", "fish")


@dataclass
class Batch:
    dense: np.ndarray


class KeywordEmbedder:
    """A text → unit vector of its counts of 'cat', 'dog', 'fish' (every test text has one)."""

    name = "keywords"
    dim = 3
    has_sparse = False

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode_documents(self, texts):
        self.calls.append(list(texts))
        rows = np.array([[t.count(w) for w in VOCAB] for t in texts], dtype=np.float32)
        return Batch(rows / np.linalg.norm(rows, axis=1, keepdims=True))

    def encode_queries(self, texts):  # pragma: no cover - not used by the reference metrics
        return self.encode_documents(texts)


# references:  a.png (hi): cat, dog    b.png (hi): cat    c.png (ta): dog, dog    d.png (ta): fish
ROWS = [
    {"Filename": "a.png", "Language": "hi", "Context": "post about pets", "Explanation_1": "cat", "Explanation_2": "dog", "Explanation_3": ""},
    {"Filename": "b.png", "Language": "hi", "Context": "", "Explanation_1": "cat", "Explanation_2": "", "Explanation_3": ""},
    {"Filename": "c.png", "Language": "ta", "Context": "", "Explanation_1": "dog", "Explanation_2": "dog", "Explanation_3": ""},
    {"Filename": "d.png", "Language": "ta", "Context": "", "Explanation_1": "fish", "Explanation_2": "", "Explanation_3": ""},
]
VANILLA = {"a.png": "dog", "b.png": "dog", "c.png": "cat", "d.png": None}  # cos 0.5, 0, 0, 0 (missing)
KAR = {"a.png": "cat", "b.png": "cat", "c.png": "dog", "d.png": "fish"}  # cos 0.5, 1, 1, 1


def write_csv(folder, rows, name="memecult.csv"):
    path = folder / name
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_pred(folder, name, responses, by="id"):
    path = folder / f"{name}.json"
    key = "id" if by == "id" else "image_path"
    value = (lambda f: f) if by == "id" else (lambda f: f"some/where/{f}")
    path.write_text(json.dumps([{key: value(f), "response": r} for f, r in responses.items()]))
    return path


@pytest.fixture
def refs(tmp_path, monkeypatch):
    """The MemeCULT CSV, real PNGs next to it, two prediction files and the keyword embedder."""
    for row in ROWS:
        Image.new("RGB", (8, 6), (200, 100, 50)).save(tmp_path / row["Filename"])
    embedder = KeywordEmbedder()
    monkeypatch.setattr("retrieval.embedders.build_embedder", lambda settings: embedder)
    for name in ("KAR_JUDGE_BASE_URLS", "KAR_JUDGE_MODEL", "KAR_JUDGE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KAR_JUDGE_MAX_PARSE_RETRIES", "2")
    monkeypatch.setenv("KAR_VLM_MAX_RETRIES", "0")
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    yield {
        "dataset": write_csv(tmp_path, ROWS),
        # vanilla matched by id, kar by image path (file name), as `kar run` may write either
        "vanilla": write_pred(tmp_path, "vanilla", VANILLA),
        "kar": write_pred(tmp_path, "kar", KAR, by="image_path"),
        "embedder": embedder,
        "out": tmp_path / "refs_out",
    }
    get_settings.cache_clear()


def base_args(r, *extra):
    return ["report-refs", "--dataset", str(r["dataset"]), "--pred", f"vanilla={r['vanilla']}",
            "--pred", f"kar={r['kar']}", "--out", str(r["out"]), "--bootstrap", "2000", *extra]


def test_cosine_paired_and_holm_by_hand(refs):
    result = runner.invoke(app, base_args(refs, "--json"))
    assert result.exit_code == 0, result.output
    m = json.loads(result.stdout)
    assert m["format"] == "memecult" and m["n_items"] == 4 and m["languages"] == {"hi": 2, "ta": 2}
    assert m["baseline"] == "vanilla" and m["embedder"] == "keywords" and m["rubric_judge"] is None
    van, kar = m["conditions"]["vanilla"], m["conditions"]["kar"]
    assert van["cosine"]["mean"] == pytest.approx(0.5 / 4) and van["n_missing"] == 1
    assert kar["cosine"]["mean"] == pytest.approx(3.5 / 4) and kar["n_missing"] == 0
    assert van["cosine"]["by_language"] == {"hi": {"n": 2, "mean": pytest.approx(0.25)}, "ta": {"n": 2, "mean": 0.0}}
    assert kar["cosine"]["by_language"]["hi"]["mean"] == pytest.approx(0.75)
    assert kar["cosine"]["by_language"]["ta"]["mean"] == pytest.approx(1.0)
    assert "rubric" not in kar and "vanilla" not in m["paired"]
    paired = m["paired"]["kar"]["cosine"]
    assert paired["overall"]["delta"] == pytest.approx(0.75) and paired["overall"]["n"] == 4
    # hi: diffs [0, 1] → Δ 0.5, resampled means ∈ {0, .5, 1} → CI [0, 1]; p = 2·P(mean ≤ 0) ≈ 2·¼
    hi, ta = paired["by_language"]["hi"], paired["by_language"]["ta"]
    assert hi["delta"] == pytest.approx(0.5) and hi["ci"] == pytest.approx([0.0, 1.0])
    assert 0.4 < hi["p"] < 0.6
    # ta: diffs [1, 1] → Δ 1, CI [1, 1], p 0; Holm over {ta: 0, hi: p}: ta 2·0 = 0, hi max(0, 1·p) = p
    assert ta["delta"] == pytest.approx(1.0) and ta["ci"] == pytest.approx([1.0, 1.0]) and ta["p"] == 0.0
    assert ta["p_holm"] == 0.0 and hi["p_holm"] == pytest.approx(hi["p"])
    # each distinct text embedded once: 5 distinct references + 'dog'/'cat' are already refs + 'fish'
    assert sorted(t for call in refs["embedder"].calls for t in call) == ["cat", "dog", "fish"]
    assert m["item_scores"]["b.png"] == {"language": "hi", "cosine/vanilla": 0.0, "cosine/kar": pytest.approx(1.0)}
    on_disk = json.loads((refs["out"] / "reference_metrics.json").read_text())
    assert on_disk["conditions"]["kar"]["cosine"]["mean"] == pytest.approx(0.875)
    md = (refs["out"] / "reference_metrics.md").read_text()
    assert "| kar | 4 | 0 | 0.875 | +0.750 [" in md and "| vanilla | 4 | 1 | 0.125 | (baseline) |" in md
    assert "| kar | cosine | ta | 2 | +1.000 [+1.000, +1.000] | 0.000 | 0.000 |" in md
    rows = list(csv.DictReader((refs["out"] / "reference_items.csv").open()))
    assert [r["id"] for r in rows] == ["a.png", "b.png", "c.png", "d.png"]
    assert float(rows[0]["cosine/vanilla"]) == pytest.approx(0.5)


def test_baseline_option_flips_the_sign(refs):
    result = runner.invoke(app, base_args(refs, "--baseline", "kar", "--json"))
    assert result.exit_code == 0, result.output
    m = json.loads(result.stdout)
    assert list(m["paired"]) == ["vanilla"]
    assert m["paired"]["vanilla"]["cosine"]["overall"]["delta"] == pytest.approx(-0.75)


def test_human_output_prints_the_table(refs):
    result = runner.invoke(app, base_args(refs))
    assert result.exit_code == 0, result.output
    assert "| kar | 4 | 0 | 0.875 |" in result.output and "reference_metrics.json" in result.output


def rubric_responder(request):
    """cat → 5/4/3, dog → 2/2/2, fish → never parseable; the candidate is read from the prompt."""
    candidate = re.search(r"<<<CANDIDATE\n(.*)\nCANDIDATE>>>", request.user_text(), flags=re.S).group(1)
    scores = {"cat": (5, 4, 3), "dog": (2, 2, 2)}.get(candidate)
    if scores is None:
        return FakeReply(text="I would rather not say.")
    return FakeReply(text=json.dumps(dict(zip(("fluency", "cultural_correctness", "humor_relevance"), scores))))


def test_rubric_through_the_real_client(refs):
    with FakeOpenAIServer(responder=rubric_responder) as server:
        result = runner.invoke(app, base_args(refs, "--rubric", "--judge-model", "judge-m",
                                              "--judge-base-url", server.base_url, "--json"))
        assert result.exit_code == 0, result.output
        requests = list(server.requests)
    m = json.loads(result.stdout)
    assert m["rubric_judge"] == "judge-m"
    # vanilla: 3 answered items (d has no response) → 3 calls; kar: 3 + 'fish' asked 1 + 2 retries → 6
    assert len(requests) == 9
    assert {r.json["model"] for r in requests} == {"judge-m"}
    first = next(r for r in requests if "- cat\n- dog" in r.user_text())
    assert "post about pets" in first.user_text() and first.image_urls()[0].startswith("data:image/")
    van, kar = m["conditions"]["vanilla"]["rubric"], m["conditions"]["kar"]["rubric"]
    # vanilla a dog, b dog, c cat, d unscored (no response)
    assert van["n"] == 4 and van["n_unscored"] == 1
    assert van["fluency"] == pytest.approx(3.0) and van["cultural_correctness"] == pytest.approx(8 / 3)
    assert van["humor_relevance"] == pytest.approx(7 / 3)
    # kar a cat, b cat, c dog, d unscored (judge reply never parseable)
    assert kar["n_unscored"] == 1 and kar["fluency"] == pytest.approx(4.0)
    assert kar["cultural_correctness"] == pytest.approx(10 / 3) and kar["humor_relevance"] == pytest.approx(8 / 3)
    assert kar["by_language"]["ta"] == {"n": 2, "n_unscored": 1, "fluency": 2.0, "cultural_correctness": 2.0,
                                        "humor_relevance": 2.0}
    # paired on items scored in both (a, b, c): fluency diffs 3, 3, −3 → Δ 1; hi diffs 3, 3 → Δ 3, CI [3, 3]
    fluency = m["paired"]["kar"]["rubric"]["fluency"]
    assert fluency["overall"]["n"] == 3 and fluency["overall"]["delta"] == pytest.approx(1.0)
    assert fluency["by_language"]["hi"]["delta"] == 3.0 and fluency["by_language"]["hi"]["ci"] == [3.0, 3.0]
    assert fluency["by_language"]["ta"]["n"] == 1 and fluency["by_language"]["ta"]["delta"] == -3.0
    md = (refs["out"] / "reference_metrics.md").read_text()
    assert "| kar | 4 | 0 | 0.875 | +0.750 [" in md and "| 4.00 | 3.33 | 2.67 | 1 |" in md
    assert "| kar | fluency | hi | 2 | +3.000 [+3.000, +3.000] |" in md
    assert m["item_scores"]["d.png"]["fluency/kar"] is None and m["item_scores"]["a.png"]["fluency/kar"] == 5


def test_memecap_json(tmp_path, monkeypatch):
    monkeypatch.setattr("retrieval.embedders.build_embedder", lambda settings: KeywordEmbedder())
    dataset = tmp_path / "memes-test.json"
    dataset.write_text(json.dumps([
        {"post_id": "p1", "img_fname": "p1.png", "title": "t", "meme_captions": ["a cat", "a cat and a dog"]},
        {"post_id": "p2", "img_fname": "p2.png", "title": "t", "meme_captions": ["fish"]},
    ]))
    base = write_pred(tmp_path, "base", {"p1": "dog", "p2": "fish"})
    new = write_pred(tmp_path, "new", {"p1": "cat", "p2": "fish"})
    result = runner.invoke(app, ["report-refs", "--dataset", str(dataset), "--pred", f"base={base}",
                                 "--pred", f"new={new}", "--out", str(tmp_path / "o"), "--json", "--bootstrap", "100"])
    assert result.exit_code == 0, result.output
    m = json.loads(result.stdout)
    assert m["format"] == "memecap" and m["languages"] == {"en": 2}
    # p1: base dog vs (cat, cat+dog) → (0 + 1/√2)/2; new cat → (1 + 1/√2)/2; p2 both 1
    assert m["conditions"]["base"]["cosine"]["mean"] == pytest.approx((1 / math.sqrt(2) / 2 + 1) / 2, rel=1e-6)
    assert m["paired"]["new"]["cosine"]["overall"]["delta"] == pytest.approx(0.25, rel=1e-6)


def bad(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_bad_input(refs, tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[2]["Filename"] = ""
    broken = write_csv(tmp_path, rows, "no_filename.csv")
    msg = bad(["report-refs", "--dataset", str(broken), "--pred", f"v={refs['vanilla']}", "--out", str(tmp_path / "o")])
    assert "no_filename.csv: row 4: field 'Filename' is empty" in msg
    rows = [dict(r) for r in ROWS]
    rows[1]["Explanation_1"] = ""
    noref = write_csv(tmp_path, rows, "noref.csv")
    msg = bad(["report-refs", "--dataset", str(noref), "--pred", f"v={refs['vanilla']}", "--out", str(tmp_path / "o")])
    assert "noref.csv: row 3 (b.png): no reference explanation" in msg
    dup = write_csv(tmp_path, [ROWS[0], ROWS[1], ROWS[0]], "dup.csv")
    msg = bad(["report-refs", "--dataset", str(dup), "--pred", f"v={refs['vanilla']}", "--out", str(tmp_path / "o")])
    assert "dup.csv: row 4: field 'Filename' duplicates" in msg
    msg = bad(["report-refs", "--dataset", str(tmp_path / "nope.csv"), "--pred", f"v={refs['vanilla']}", "--out", "o"])
    assert "nope.csv: file not found" in msg
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{"id": "a.png", "response": "x"}, {"id": "b.png", "response": 3}]))
    msg = bad(base_args(refs)[:3] + ["--pred", f"w={wrong}", "--out", str(tmp_path / "o")])
    assert "wrong.json: item 1 (id=b.png): field 'response' must be a string or null" in msg
    other = write_pred(tmp_path, "other", {"zzz.png": "cat"})
    msg = bad(base_args(refs)[:3] + ["--pred", f"o={other}", "--out", str(tmp_path / "o")])
    assert "other.json: no prediction matches an item of" in msg
    assert "NAME=FILE" in bad(base_args(refs)[:3] + ["--pred", str(refs["kar"]), "--out", "o"])
    assert "'vanilla' given twice" in bad(base_args(refs) + ["--pred", f"vanilla={refs['kar']}"])
    assert "--baseline 'cot' is not one of the --pred names (vanilla, kar)" in bad(base_args(refs, "--baseline", "cot"))
    assert "--format must be" in bad(base_args(refs, "--format", "xlsx"))
    # --rubric with no judge configured, then with a missing image
    assert "KAR_JUDGE_BASE_URLS" in bad(base_args(refs, "--rubric"))
    (refs["dataset"].parent / "c.png").unlink()
    msg = bad(base_args(refs, "--rubric", "--judge-model", "m", "--judge-base-url", "http://127.0.0.1:9/v1"))
    assert "item c.png: field 'image_path': image file not found" in msg
    assert not (refs["out"] / "reference_metrics.json").exists()


def test_report_command_judge_reliability(tmp_path):
    """kar report --human COND=FILE --judge-file JUDGE:COND=FILE puts κ, agreement and ρ in metrics.json."""
    bench = write_bench(tmp_path, [make_item(i) for i in range(4)])

    def judged(name, vectors):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([{"id": f"m{i}", "evaluation": evaluation_from_vector(v)} for i, v in enumerate(vectors)]))
        return path

    human = judged("human", [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])
    g = judged("g", [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])
    o = judged("o", [[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", "--bench", str(bench), "--judged", f"vanilla={g}", "--out", str(out),
                                 "--no-plots", "--bootstrap", "100", "--human", f"vanilla={human}",
                                 "--judge-file", f"g:vanilla={g}", "--judge-file", f"o:vanilla={o}", "--json"])
    assert result.exit_code == 0, result.output
    rel = json.loads(result.stdout)["reliability"]
    assert rel["vs_human"]["g"]["V"]["kappa"] == pytest.approx(1.0) and rel["vs_human"]["g"]["n"] == 4
    # o on V: human [1,1,0,1] vs o [1,1,0,0]: po 3/4, pe 3/4·1/2 + 1/4·1/2 = 1/2 → κ 0.5
    assert rel["vs_human"]["o"]["V"]["kappa"] == pytest.approx(0.5)
    assert rel["vs_human"]["intersection"]["V"]["kappa"] == pytest.approx(0.5)
    # g and o agree on Success for all 4 items (only item 0 passes in both)
    assert rel["inter_judge"]["g|o"]["Success"]["agreement"] == 1.0
    assert rel["spearman"]["g|o"]["n_conditions"] == 1 and rel["spearman"]["g|o"]["rho"] is None
    on_disk = json.loads((out / "metrics.json").read_text())["reliability"]
    assert on_disk["vs_human"]["o"]["V"]["agreement"] == 0.75
    msg = runner.invoke(app, ["report", "--bench", str(bench), "--judged", f"vanilla={g}", "--out", str(out),
                              "--judge-file", f"g={g}"])
    assert msg.exit_code == 2 and "JUDGE:COND=FILE" in msg.output
