"""Benchmark: retrieval diagnostics (`kar report --run`); prints JSON.

1. **Sample benchmark** (``examples/bench_sample.json``, 4 items; CultureBase: the sample entities
   named by tests/fakes/corpus.py plus its crawled pages, local search; Doge's description made as long
   as a crawled one, :data:`LONG_DOGE`, so that "popular since 2013" lies past the prompt's
   600-character cut): `kar run` vanilla, search_cot, kar with the fake OpenAI-compatible VLM (scripted
   per item: answers and what the extraction names), `kar judge` with the fake checklist judge, then
   `kar report --run`; prints the diagnostics table per condition, read from the recorded prompts, and
   the same run's table as a run recorded before prompts were would show it (its traces without
   ``prompts``: the reconstruction), with every knowledge unit counted differently (``changed``).
   Then the same report with the fake knowledge judge (``--knowledge-judge``) and the proxy's agreement
   with it.  The VLM and the judges are test doubles: the figures show what the diagnostics read off a
   run, not how good a model is, and the fake knowledge judge is a verbatim-substring matcher.
2. **The proxy against hand labels** (``bench/queries/knowledge_labels.jsonl``: 112 (knowledge unit,
   prompt text) pairs, English and Chinese units, labelled by hand before the proxy ran on them:
   paraphrases, partial facts, facts past a cut, lookalike entities, negations, translations): the
   proxy's agreement and Cohen's κ (``sklearn.metrics.cohen_kappa_score``), overall, per language and
   per kind.  With a judge configured (``KAR_JUDGE_BASE_URLS`` and ``KAR_JUDGE_MODEL``: an
   OpenAI-compatible endpoint, as the eval judges use), the knowledge judge's verdicts on the same pairs
   are compared too; otherwise the output says the judge comparison was skipped and why.
3. **Cost**: `kar report` (defaults: 10,000 bootstrap resamples, plots) over synthetic judged files
   and traces of ``--items`` items × 4 conditions (Search-CoT's and KAR's evidence blocks at about the
   default 3,000-token budget, 5 pieces; KAR's 3 grounded entries; each trace with its recorded prompt, as
   ``kar run`` writes them, so the diagnostics read the recorded prompts), without ``--run``, with it as a first
   report (diagnostics computed: proxy, no judge; CultureBase of one entity per item for ``gold_in_kb``;
   the diagnostics cache emptied before each), as the first report of another run over the same benchmark
   and KB (``new_run``: only the items' gold table is cached, not the diagnostics nor the causes plot) and
   repeated (the cache holds them), in rotating order, median of ``--rounds``; in-process (the command alone) and as its own process (what a user
   waits for: interpreter start and imports included).  Each is timed in wall-clock and in CPU seconds
   (this process and every child it waited for, the forked diagnostics worker included): on a shared
   machine the wall clock measures the neighbours' load as much as the report (the load average is
   printed), CPU time what the report itself costs.  The added percentages are what diagnostics add.

    python bench/diagnostics.py [--items 1253] [--rounds 3] [--skip-sample] [--skip-labels] [--skip-cost]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CONDITIONS = ("vanilla", "search_cot", "kar")


def kar(*args: str) -> str:
    """One `kar` command in-process; its output (exit code 0 asserted)."""
    from typer.testing import CliRunner

    from culturebase.settings import get_settings
    from services.cli import app

    get_settings.cache_clear()
    result = CliRunner().invoke(app, list(args))
    if result.exit_code != 0:
        raise SystemExit(f"kar {' '.join(args)} → {result.exit_code}\n{result.output}")
    return result.output


def set_env(**values: str) -> None:
    for key in [k for k in os.environ if k.startswith("KAR_")]:
        del os.environ[key]
    os.environ.update(values)


# -- 1. the sample benchmark ------------------------------------------------------------------

SAMPLE = ROOT / "examples" / "bench_sample.json"
# per sample item: what the fake extraction names (item 3 names a wrong entity), and the layers each condition's answer covers
SAMPLE_SCRIPT: list[dict[str, Any]] = [
    {"entities": ["诸葛亮", "王司徒"], "query": "诸葛亮 骂死王朗",
     "covers": {"vanilla": "visual identity", "search_cot": "visual identity knowledge reasoning", "kar": "visual identity knowledge reasoning"}},
    {"entities": ["Doge"], "query": "Doge meme",
     "covers": {"vanilla": "visual identity knowledge reasoning", "search_cot": "visual identity knowledge reasoning",
                "kar": "visual identity knowledge reasoning"}},
    {"entities": ["鲁迅"], "query": "鲁迅说过",
     "covers": {"vanilla": "visual", "search_cot": "visual identity", "kar": "visual identity knowledge reasoning"}},
    {"entities": ["Pepe the Frog"], "query": "sad frog meme",
     "covers": {"vanilla": "visual identity knowledge reasoning", "search_cot": "visual identity knowledge reasoning",
                "kar": "visual identity"}},
]


def sample_vlm(images: list[Path]):
    """The fake VLM's responder: the item is told by its image (nearest 8×8 thumbnail), the condition by the prompt."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    from tests.eval.diagnostics_bench import EXTRACT_MARKER, KB_BLOCK, REASON_MARKERS
    from tests.fakes.openai_server import FakeReply

    def thumb(data: bytes) -> Any:
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize((8, 8)), dtype=float)

    thumbs = [thumb(p.read_bytes()) for p in images]

    def respond(request: Any) -> Any:
        shown = thumb(base64.b64decode(request.image_urls()[0].split(",", 1)[1]))
        i = min(range(len(thumbs)), key=lambda j: float(((thumbs[j] - shown) ** 2).sum()))
        script, text = SAMPLE_SCRIPT[i], request.user_text()
        if EXTRACT_MARKER in text:
            return FakeReply(text=json.dumps({"ocr_text": "", "visual_handle": "", "suggested_queries": [script["query"]],
                                              "entities": [{"name": n, "source": "", "confidence": "high"} for n in script["entities"]]},
                                             ensure_ascii=False))
        condition = ("kar" if KB_BLOCK in text else "search_cot") if any(m in text for m in REASON_MARKERS) else "vanilla"
        return FakeReply(text=f"answer {i} ({condition}). covers: {script['covers'][condition]}. flags: none.")

    return respond


# Doge's description as long as a crawled page's (KnowYourMeme's "About" runs to thousands of characters): the
# sample's own sentences after 600 characters of its history, so "popular since 2013" lies past the prompt's cut
LONG_DOGE = (
    "Doge is an image macro series built on a photograph of a Japanese dog glancing sideways with raised eyebrows, "
    "taken by a kindergarten teacher in Sakura and posted to her personal blog together with other pictures of her "
    "rescued pets. Posters on forums and imageboards surrounded the picture with multicoloured Comic Sans phrases "
    "written as the animal's inner monologue, a modifier such as such, much, very or so followed by a single noun, "
    "closed with a bare interjection. Reaction blogs collected the edits, and the captions spread to "
    "advertisements, sports mascots and political campaigns as a shorthand for ironic praise. "
    "A meme built on a 2010 photo of Kabosu, a Japanese Shiba Inu owned by Atsuko Sato; it went viral and has been "
    "popular since 2013. Kabosu also became the face of Dogecoin."
)


def build_sample_kb(path: Path) -> None:
    """The sample CultureBase of tests/fakes/corpus.py with Doge's description replaced by :data:`LONG_DOGE`."""
    from culturebase.settings import Settings
    from retrieval.dump_import import record_to_entity
    from retrieval.embedders import build_embedder
    from retrieval.knowledge_base import KnowledgeBase
    from tests.fakes.corpus import CORPUS, sample_records

    records = [dict(r, description=LONG_DOGE) if r["name"] == "Doge" else r for r in sample_records()]
    with KnowledgeBase.open(Settings(kb_path=path), embedder=build_embedder(Settings())) as kb:
        kb.add([record_to_entity(r) for r in records])
        kb.add_corpus_chunks(CORPUS)


def without_prompts(run: Path, out: Path) -> Path:
    """A copy of the run folder's traces with the recorded prompts removed: the run as one made before prompts were."""
    (out / "traces").mkdir(parents=True)
    for path in (run / "traces").glob("*.jsonl"):
        records = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
        for record in records:
            record.get("trace", {}).pop("prompts", None)
        (out / "traces" / path.name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
    return out


def changed_units(items: list[dict[str, Any]], recorded: dict[str, Any], reconstructed: dict[str, Any]) -> list[dict[str, Any]]:
    """Every knowledge unit the recorded prompts and the reconstruction count differently, with both verdicts."""
    from eval.diagnostics.gold import knowledge_units

    units = {str(it["id"]): knowledge_units(it["knowledge"]) for it in items}
    found = []
    for name, entry in recorded.items():
        before = {r["id"]: r for r in reconstructed[name]["rows"]}
        for row in entry["rows"]:
            old = before[row["id"]]
            for unit, now, then in zip(units[row["id"]], row["knowledge_stated"] or [], old["knowledge_stated"] or []):
                if now != then:
                    found.append({"condition": name, "item": row["id"], "unit": unit, "reconstructed_stated": then, "recorded_stated": now})
            if row["evidence_off_entity"] != old["evidence_off_entity"]:
                found.append({"condition": name, "item": row["id"], "evidence_off_entity_reconstructed": old["evidence_off_entity"],
                              "evidence_off_entity_recorded": row["evidence_off_entity"]})
    return found


def sample_benchmark(tmp: Path) -> dict[str, Any]:
    from tests.eval.diagnostics_bench import knowledge_judge_responder
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.services.memebench_release import judge_responder

    set_env(KAR_KB_PATH=str(tmp / "kb"), KAR_DATA_DIR=str(tmp / "data"), KAR_OCR_ENABLED="false", KAR_SEARCH_BACKEND="local")
    build_sample_kb(tmp / "kb")
    items = json.loads(SAMPLE.read_text("utf-8"))
    images = [SAMPLE.parent / it["image_path"] for it in items]
    judged: list[str] = []
    with FakeOpenAIServer(responder=sample_vlm(images), model="fake-vl") as vlm, \
            FakeOpenAIServer(responder=judge_responder(strict=False)) as judge, \
            FakeOpenAIServer(responder=knowledge_judge_responder) as knowledge_judge:
        kar("run", "--dataset", str(SAMPLE), "--conditions", ",".join(CONDITIONS), "--out", str(tmp / "run"),
            "--model", "fake-vl", "--base-url", vlm.base_url, "--concurrency", "2")
        for cond in CONDITIONS:
            kar("judge", "--bench", str(SAMPLE), "--pred", str(tmp / "run" / "predictions" / f"{cond}.json"),
                "--out", str(tmp / "judged" / f"{cond}.json"), "--judge-model", "fake-judge", "--judge-base-url", judge.base_url)
            judged += ["--judged", f"{cond}={tmp / 'judged' / f'{cond}.json'}"]
        base = ["report", "--bench", str(SAMPLE), *judged, "--bootstrap", "0", "--no-plots"]
        printed = kar(*base, "--run", str(tmp / "run"), "--out", str(tmp / "report"))
        old = without_prompts(tmp / "run", tmp / "old-run")
        printed_old = kar(*base, "--run", str(old), "--out", str(tmp / "report-old"))
        kar(*base, "--run", str(tmp / "run"), "--out", str(tmp / "report-judge"), "--knowledge-judge", "--judge-model",
            "fake-knowledge-judge", "--judge-base-url", knowledge_judge.base_url)
    proxy = json.loads((tmp / "report" / "metrics.json").read_text("utf-8"))["diagnostics"]
    reconstructed = json.loads((tmp / "report-old" / "metrics.json").read_text("utf-8"))["diagnostics"]
    judged_diag = json.loads((tmp / "report-judge" / "metrics.json").read_text("utf-8"))["diagnostics"]
    prompts = {c: (tmp / "run" / "predictions" / f"{c}.prompts.jsonl").read_text("utf-8").splitlines() for c in CONDITIONS}
    longest = max(len(part["text"]) for lines in prompts.values() for line in lines
                  for m in json.loads(line)["messages"] for part in m["content"] if part["type"] == "text")
    return {"table": table(proxy), "table_reconstructed": table(reconstructed),
            "changed": changed_units(json.loads(SAMPLE.read_text("utf-8")), proxy, reconstructed),
            "prompts_files": {c: len(lines) for c, lines in prompts.items()}, "longest_recorded_text_chars": longest,
            "table_with_judge": table(judged_diag), "agreement": agreement(proxy, judged_diag),
            "causes_success": causes(proxy), "printed": printed.split("Rates in %", 1)[-1],
            "printed_reconstructed": printed_old.split("Rates in %", 1)[-1]}


def table(diagnostics: dict[str, Any]) -> dict[str, Any]:
    keys = ("gold_in_kb", "identity_grounded", "mean_gold_rank", "extra_entities", "knowledge_in_prompt", "knowledge_method",
            "evidence_off_entity", "evidence_status", "prompts")
    return {name: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in ((k, e[k]) for k in keys)}
            for name, e in diagnostics.items()}


def causes(diagnostics: dict[str, Any]) -> dict[str, Any]:
    return {name: {c: ids for c, ids in e["joined"]["layers"]["Success"]["cells"].items() if ids}
            for name, e in diagnostics.items() if e.get("joined")}


def agreement_of(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    """Agreement and Cohen's κ (``sklearn.metrics.cohen_kappa_score``) of (decider, reference) verdicts; κ is None
    where it is undefined (one side gives a single answer throughout)."""
    import math

    from sklearn.metrics import cohen_kappa_score

    n = len(pairs)
    agree = sum(a == b for a, b in pairs)
    kappa = None
    if n and len({a for a, _ in pairs}) > 1 and len({b for _, b in pairs}) > 1:
        value = float(cohen_kappa_score([a for a, _ in pairs], [b for _, b in pairs]))
        kappa = None if math.isnan(value) else round(value, 3)
    return {"pairs": n, "agreement": round(agree / n, 3) if n else None, "cohen_kappa": kappa,
            "decider_yes": sum(a for a, _ in pairs), "reference_yes": sum(b for _, b in pairs)}


def agreement(proxy: dict[str, Any], judged: dict[str, Any]) -> dict[str, Any]:
    """Per knowledge unit of every (condition, item) whose prompt carried material (Search-CoT, KAR): the proxy
    against the fake knowledge judge."""
    vs_judge = []
    for name in ("search_cot", "kar"):
        judge_rows = {r["id"]: r for r in judged[name]["rows"]}
        for row in proxy[name]["rows"]:
            p, j = row["knowledge_stated"], judge_rows[row["id"]]["knowledge_stated"]
            if p is not None and j is not None:
                vs_judge += list(zip(p, j))
    return {"proxy_vs_fake_judge": agreement_of(vs_judge),
            "note": "the fake judge (tests/eval/diagnostics_bench.py) calls a unit stated only when the material holds its "
                    "exact text; the proxy against hand labels is under knowledge_labels"}


# -- 2. the proxy against hand labels -----------------------------------------------------------

LABELS = ROOT / "bench" / "queries" / "knowledge_labels.jsonl"


def read_labels(path: Path = LABELS) -> list[dict[str, Any]]:
    """The hand-labelled pairs; SystemExit naming the line and field of a malformed one."""
    rows = []
    for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        for key, kind in (("id", str), ("language", str), ("kind", str), ("unit", str), ("prompt", str), ("stated", bool)):
            if not isinstance(row.get(key), kind):
                raise SystemExit(f"{path}:{n}: field {key!r} must be a {kind.__name__}")
        rows.append(row)
    return rows


def judge_settings() -> Any:
    """The judge as configured (KAR_JUDGE_BASE_URLS, KAR_JUDGE_MODEL), read before the bench resets the KAR_ variables;
    the reason none is usable as a string otherwise."""
    from culturebase.settings import Settings

    settings = Settings()
    if not settings.judge_base_urls or not settings.judge_model:
        return "no judge configured: set KAR_JUDGE_BASE_URLS and KAR_JUDGE_MODEL (an OpenAI-compatible endpoint) to compare"
    return settings


def judge_labels(rows: list[dict[str, Any]], settings: Any) -> list[bool | None]:
    """The knowledge judge's verdict on each pair (None: its reply never parsed)."""
    import asyncio

    from agents.vlm import OpenAICompatibleVLM
    from eval.diagnostics.knowledge import KnowledgeJudge, judge_many

    async def run() -> list[tuple[list[bool] | None, str | None]]:
        vlm = OpenAICompatibleVLM.from_settings(settings, role="judge")
        try:
            return await judge_many(KnowledgeJudge(vlm), [(r["id"], [r["unit"]], r["prompt"]) for r in rows], settings.judge_concurrency)
        finally:
            await vlm.aclose()

    return [stated[0] if stated else None for stated, _ in asyncio.run(run())]


def label_agreement(judge: Any) -> dict[str, Any]:
    """The proxy (and the judge, when one is configured) against the hand labels: overall, per language, per kind."""
    from eval.diagnostics.knowledge import proxy_decide
    from eval.diagnostics.params import PARAMS

    rows = read_labels()
    proxy = [proxy_decide([r["unit"]], r["prompt"])[0] for r in rows]
    hand = [r["stated"] for r in rows]

    def split(verdicts: list[bool | None]) -> dict[str, Any]:
        kept = [(v, h, r) for v, h, r in zip(verdicts, hand, rows) if v is not None]
        out = agreement_of([(v, h) for v, h, _ in kept])
        out["per_language"] = {lang: agreement_of([(v, h) for v, h, r in kept if r["language"] == lang])
                               for lang in sorted({r["language"] for r in rows})}
        out["per_kind"] = {kind: {"pairs": sum(1 for *_, r in kept if r["kind"] == kind),
                                  "agreement": round(sum(v == h for v, h, r in kept if r["kind"] == kind)
                                                     / max(1, sum(1 for *_, r in kept if r["kind"] == kind)), 3)}
                           for kind in sorted({r["kind"] for r in rows})}
        return out

    result: dict[str, Any] = {"file": str(LABELS.relative_to(ROOT)), "pairs": len(rows),
                              "per_language_pairs": {lang: sum(1 for r in rows if r["language"] == lang) for lang in sorted({r["language"] for r in rows})},
                              "hand_yes": sum(hand), "proxy_threshold": PARAMS.proxy_threshold, "proxy_vs_hand": split(proxy),
                              "disagreements": [f"{r['id']} {r['kind']}: hand {'yes' if h else 'no'}, proxy {'yes' if p else 'no'}"
                                                for r, h, p in zip(rows, hand, proxy) if h != p]}
    if isinstance(judge, str):
        result["judge"] = {"skipped": judge}
    else:
        verdicts = judge_labels(rows, judge)
        result["judge"] = {"model": judge.judge_model, "undecided": sum(v is None for v in verdicts), "judge_vs_hand": split(verdicts),
                           "proxy_vs_judge": agreement_of([(p, v) for p, v in zip(proxy, verdicts) if v is not None])}
    return result


# -- 3. cost ------------------------------------------------------------------------------------

def synth_run(tmp: Path, n: int, seed: int = 0) -> tuple[Path, list[str], Path]:
    """A benchmark of ``n`` release-shape items, judged files and traces of 4 conditions, a KB of one entity per item."""
    import numpy as np

    from culturebase.entity import Entity
    from culturebase.store import CultureBaseStore, EmbedderInfo
    from culturebase.store.culturebase import ENTITY_DENSE, ENTITY_LEXICAL
    from culturebase.store.edge import EdgeBackend
    from retrieval.text.lexical import encode_documents, lexical_text

    rng = np.random.default_rng(seed)
    names = [f"Entity {i}" for i in range(n)]
    items = [{
        "id": f"m{i:05d}", "image_path": f"images/m{i:05d}.png",
        "visual": {"ocr": "caption"}, "identity": {"entities": [{"eid": "E1", "name": names[i], "source_work": "Work"}]},
        "knowledge": {"background": [f"{names[i]} comes from a story about fact {j} of the work" for j in range(3)],
                      "internet_usage": "used to mock someone"},
        "reasoning": {"mechanism": "irony"},
        "eval_checklist": {d: [f"{d} item"] for d in ("visual", "identity", "knowledge", "reasoning")},
    } for i in range(n)]
    bench = tmp / "bench.json"
    bench.write_text(json.dumps(items), "utf-8")
    info = EmbedderInfo("synthetic", 8)
    store = CultureBaseStore(EdgeBackend(tmp / "kb"), info)
    entities = [Entity(name=nm, aliases=[f"alias {i}"], description=f"{nm} is a figure", cultural_usage="mockery", language="en")
                for i, nm in enumerate(names) if i % 5]  # every fifth gold entity is missing from the KB
    dense = {v: rng.normal(size=(len(entities), info.dim)).astype(np.float32) for v in ENTITY_DENSE}
    store.upsert_entities(entities, dense, {ENTITY_LEXICAL: encode_documents(lexical_text(e) for e in entities)})
    store.close()
    judged: list[str] = []
    conditions = ("vanilla", "cot", "search_cot", "kar")
    for c, cond in enumerate(conditions):
        records, traces = [], []
        for i, item in enumerate(items):
            res = [int(x) for x in rng.random(4) < 0.5 + 0.08 * c]
            records.append({"id": item["id"], "image_path": item["image_path"], "response": "r",
                            "evaluation": {"checklist_result": res, "overall_correctness": "YES" if all(res[1:]) else "NO"}})
            trace: dict[str, Any] = {"models": {"search_backend": "local", "evidence": {"backend": "local", "available": True}}}
            if cond in ("search_cot", "kar"):
                pages = "\n".join(f"{k}. Page {k} about {names[(i + k) % n]}\n   URL: https://example.org/{i}/{k}\n   "
                                  + f"{names[(i + k) % n]} text " * 120 for k in range(1, 6))
                trace["evidence"] = {"text": f"<<<EVIDENCE\n[Search: {names[i]}]\n{pages}\nEVIDENCE>>>", "results_shown": 5}
            if cond == "kar":
                trace["grounding"] = {"hits": [{"id": f"x{k}", "name": names[(i + k) % n], "aliases": [], "description": "d " * 200,
                                                "cultural_usage": "u " * 200} for k in range(3)]}
            trace["prompts"] = synth_prompts(trace)
            traces.append({"id": item["id"], "condition": cond, "response": "r", "error": None, "trace": trace})
        (tmp / "judged").mkdir(exist_ok=True)
        (tmp / "judged" / f"{cond}.json").write_text(json.dumps(records), "utf-8")
        (tmp / "run" / "traces").mkdir(parents=True, exist_ok=True)
        (tmp / "run" / "traces" / f"{cond}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces), "utf-8")
        judged += ["--judged", f"{cond}={tmp / 'judged' / f'{cond}.json'}"]
    return bench, judged, tmp / "kb"


def synth_prompts(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompts a run records for a synthetic trace: the reasoning call's text (the CultureBase block as the pipeline
    writes it, fields cut at 600 characters, then the evidence block) with its sections; one answer call without them."""
    hits = (trace.get("grounding") or {}).get("hits") or []
    entries = "\n".join(f"{k}. {h['name']} (score 0.80)\n   description: {h['description'][:600]}\n   usage: {h['cultural_usage'][:600]}"
                        for k, h in enumerate(hits, 1))
    knowledge = f"\nCultureBase entries matched to this image:\n{entries}" if hits else ""
    evidence = (trace.get("evidence") or {}).get("text") or ""
    head = "Explain this image.\nWhat an extraction step read off the image:\n- OCR text: caption\n"
    text = f"{head}{knowledge}\nWeb search results follow.\n{evidence}\nExplain it."
    sections = {}
    if knowledge:
        sections["knowledge"] = [len(head), len(head) + len(knowledge)]
    if evidence:
        at = text.index(evidence)
        sections["evidence"] = [at, at + len(evidence)]
    stage = "reason" if evidence else "answer"
    image = {"type": "image", "sha256": "0" * 64, "bytes": 1000, "width": 64, "height": 48, "format": "png", "described": "request"}
    return [{"stage": stage, "replied": True, "max_chars": 32000, "messages": [{"role": "user", "content": [image, {"type": "text", "text": text}]}],
             **({"sections": sections} if sections else {})}]


MODES = ("without", "with_diagnostics", "with_diagnostics_new_run", "with_diagnostics_cached")


def cpu_seconds() -> float:
    """User + system CPU of this process and of every child it has waited for (the forked diagnostics
    worker and `kar` subprocesses included)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def children_cpu_seconds() -> float:
    """User + system CPU of the children this process has waited for (in-process: the diagnostics worker)."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def _figures(wall: dict[str, list[float]], cpu: dict[str, list[float]], worker: list[float] | None = None) -> dict[str, Any]:
    med = {m: statistics.median(v) for m, v in wall.items()}
    cmed = {m: statistics.median(v) for m, v in cpu.items()}
    out: dict[str, Any] = {}
    for m in MODES:
        out[f"{m}_wall_median_s"] = round(med[m], 3)
        out[f"{m}_cpu_median_s"] = round(cmed[m], 3)
    if worker:
        out["with_diagnostics_worker_cpu_median_s"] = round(statistics.median(worker), 3)
    for m in MODES[1:]:
        out[f"{m}_wall_added_pct"] = round(100 * (med[m] / med["without"] - 1), 1)
        out[f"{m}_cpu_added_pct"] = round(100 * (cmed[m] / cmed["without"] - 1), 1)
    return out


def cost(tmp: Path, n: int, rounds: int) -> dict[str, Any]:
    """`kar report` without and with diagnostics (a first report: the diagnostics cache emptied before each;
    and a repeated one: the cache holds them), in-process and as its own process, wall and CPU time."""
    import shutil

    bench, judged, kb = synth_run(tmp, n)
    data = tmp / "data"
    set_env(KAR_DATA_DIR=str(data), KAR_KB_PATH=str(kb))
    base = ["report", "--bench", str(bench), *judged]
    kar(*base, "--out", str(tmp / "warm"), "--run", str(tmp / "run"))  # imports warmed once
    kar_bin = Path(sys.executable).parent / "kar"
    for extra in ([], ["--run", str(tmp / "run")]):  # and once as its own process (bytecode written, where it is)
        subprocess.run([str(kar_bin), *base, "--out", str(tmp / "warm-process"), *extra], check=True, capture_output=True)
    results: dict[str, Any] = {"items": n, "conditions": 4, "rounds": rounds,
                               # set, every own-process run compiles the project's modules from source (baseline included)
                               "python_dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
                               "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    for where in ("in_process", "process"):
        wall: dict[str, list[float]] = {m: [] for m in MODES}
        cpu: dict[str, list[float]] = {m: [] for m in MODES}
        worker: list[float] = []
        for r in range(rounds):
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            for mode in order:
                extra = ["--run", str(tmp / "run")] if mode != "without" else []
                if mode == "with_diagnostics":
                    shutil.rmtree(data / "cache" / "diagnostics", ignore_errors=True)
                elif mode == "with_diagnostics_new_run":  # another run's first report: only the gold table is known
                    kar(*base, "--out", str(tmp / "prime"), *extra)
                    for entry in (data / "cache" / "diagnostics").glob("*.json"):
                        entry.unlink()
                    shutil.rmtree(data / "cache" / "diagnostics" / "plots", ignore_errors=True)
                elif mode == "with_diagnostics_cached":  # a repeated report: the cache holds this run's diagnostics
                    kar(*base, "--out", str(tmp / "prime"), *extra)
                out = str(tmp / f"{where}-{mode}-{r}")
                c, k, t = cpu_seconds(), children_cpu_seconds(), time.perf_counter()
                if where == "in_process":
                    kar(*base, "--out", out, *extra)
                else:
                    subprocess.run([str(kar_bin), *base, "--out", out, *extra], check=True, capture_output=True)
                wall[mode].append(time.perf_counter() - t)
                cpu[mode].append(cpu_seconds() - c)
                if where == "in_process" and mode == "with_diagnostics":
                    worker.append(children_cpu_seconds() - k)
        results[where] = _figures(wall, cpu, worker)
    results["first_report_parts_cpu_median_s"] = first_report_parts(bench, tmp / "run" / "traces", data, rounds)
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    first = json.loads((tmp / f"process-with_diagnostics-{rounds - 1}" / "metrics.json").read_text("utf-8"))["diagnostics"]
    cached = json.loads((tmp / f"process-with_diagnostics_cached-{rounds - 1}" / "metrics.json").read_text("utf-8"))["diagnostics"]
    new_run = json.loads((tmp / f"process-with_diagnostics_new_run-{rounds - 1}" / "metrics.json").read_text("utf-8"))["diagnostics"]
    results["cached_equals_computed"] = first == cached
    results["new_run_equals_computed"] = first == new_run
    results["check"] = {"kar_gold_in_kb": first["kar"]["gold_in_kb"], "kar_identity_grounded": first["kar"]["identity_grounded"]}
    return results


def first_report_parts(bench: Path, traces: Path, data: Path, rounds: int) -> dict[str, float]:
    """Where a first report's diagnostics spend their CPU, each step on its own in this process (the worker's
    steps, then what the report adds with the result: the join, the causes plot, the files), median of ``rounds``."""
    import shutil

    from culturebase.settings import get_settings
    from eval.diagnostics import cache
    from eval.diagnostics.diagnose import diagnose, gold_table
    from eval.diagnostics.kb import open_kb_names
    from eval.diagnostics.traces import gc_paused, read_manifest, read_traces
    from eval.records import load_judged
    from eval.report.diagnostics import causes_plot
    from eval.report.vikr import add_diagnostics, build_report, write_report
    from eval.tasks.memebench import load_benchmark

    get_settings.cache_clear()
    settings = get_settings()
    items = load_benchmark(bench, check_images=False)
    files = {c: traces / f"{c}.jsonl" for c in ("vanilla", "cot", "search_cot", "kar")}
    judged = {c: load_judged(bench.parent / "judged" / f"{c}.json") for c in files}
    parts: dict[str, list[float]] = {}

    def timed(name: str, call: Any) -> Any:
        c = cpu_seconds()
        value = call()
        parts.setdefault(name, []).append(cpu_seconds() - c)
        return value

    for r in range(rounds):
        shutil.rmtree(data / "cache" / "diagnostics", ignore_errors=True)
        key = timed("cache_key", lambda: cache.cache_key(items, files, settings))
        kb = timed("kb_open", lambda: open_kb_names(settings))
        names = timed("kb_open", kb.__enter__)
        golds = timed("gold_table", lambda: gold_table(items, names))
        timed("kb_close", lambda: kb.__exit__(None, None, None))
        records = timed("read_traces", lambda: {n: read_traces(p) for n, p in files.items()})
        with gc_paused():
            diagnostics = timed("rows", lambda: diagnose(items, records, golds, {n: read_manifest(p) for n, p in files.items()}))
        timed("cache_store", lambda: cache.store(settings, key, diagnostics, []))
        matrices: dict[str, Any] = {}
        report = build_report(items, judged, n_boot=0, matrices_out=matrices)
        joined = timed("join", lambda: add_diagnostics(dict(report), items, judged, diagnostics, matrices))
        out = data.parent / f"parts-{r}"
        out.mkdir(exist_ok=True)
        timed("causes_plot", lambda: causes_plot(diagnostics, out))
        # the files without plots, with the diagnostics (rows, tables, HTML section) and without
        timed("write_files_with_diagnostics", lambda: write_report(joined, out, plots=False))
        timed("write_files_without", lambda: write_report(report, out, plots=False))
    return {name: round(statistics.median(v), 3) for name, v in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1253)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-sample", action="store_true")
    ap.add_argument("--skip-labels", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    judge = judge_settings()  # before the samples reset the KAR_ variables
    if not args.skip_labels:
        out["knowledge_labels"] = label_agreement(judge)
    if not args.skip_sample:
        with tempfile.TemporaryDirectory() as tmp:
            out["sample"] = sample_benchmark(Path(tmp))
    if not args.skip_cost:
        with tempfile.TemporaryDirectory() as tmp:
            out["cost"] = cost(Path(tmp), args.items, args.rounds)
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
