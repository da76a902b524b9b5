"""The README's quickstart blocks, run as written, in order, in one bash session, so the README
cannot drift from the CLI.

What cannot run here is replaced by what the tests already use, at the addresses the README names:
the VLM and judge at ``http://localhost:8001/v1`` are the fake OpenAI-compatible server, KnowYourMeme
is the crawl fixture site, ``kar serve``'s port 8000 is a free port.  Only those addresses are
rewritten.  The working directory is a scratch folder laid out as a checkout after ``make demo``:
``examples/`` (the repository's), ``data/demo/culturebase`` (the sample KB the demo builds) and a
``.venv/bin/activate`` that puts ``kar`` (this checkout's CLI) and ``python`` on PATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

from tests.conftest import REPO
from tests.crawlers.crawl_fixture_server import FixtureServer
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply, RecordedRequest
from tests.services.memebench_release import EXTRACT_MARKER, _checklist

ORDER = ("first", "explain", "explain-vlm", "explain-http", "crawl", "ablation")
EXTRACTION = {"ocr_text": "such wow", "visual_handle": "a shiba inu", "entities": [{"name": "Doge", "source": "", "confidence": "high"}],
              "suggested_queries": ["doge meme"]}


def quickstart_blocks(text: str) -> dict[str, str]:
    """``<!-- quickstart: NAME -->`` followed by a fenced bash block → {NAME: block}."""
    found = re.findall(r"<!-- quickstart: ([\w-]+) -->\n```bash\n(.*?)```", text, flags=re.S)
    return {name: body for name, body in found}


def responder(request: RecordedRequest) -> FakeReply:
    """The VLM (extraction JSON, then an explanation) and the judge (every checklist item passes)."""
    text = request.user_text()
    if EXTRACT_MARKER in text:
        return FakeReply(text=json.dumps(EXTRACTION))
    if "## Checklist" in text:
        items = {dim: [{"index": n, "pass": 1, "reason": "ok"} for n in numbers] for dim, numbers in _checklist(text).items()}
        return FakeReply(text=json.dumps({"item_results": items}))
    return FakeReply(text="EXPLANATION-FROM-THE-VLM: such doge, much culture.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_blocks_are_marked_in_order():
    blocks = quickstart_blocks((REPO / "README.md").read_text("utf-8"))
    assert tuple(blocks) == ORDER
    readme = (REPO / "README.md").read_text("utf-8").splitlines()
    first = next(i for i, line in enumerate(readme) if line.startswith("kar "))
    assert first < 30 and len(readme) <= 300  # the first quickstart command on the first screen; a short README


def test_readme_exit_codes_match_the_cli():
    from services.cli.console import EXIT_CODES

    text = (REPO / "README.md").read_text("utf-8")
    table = text.split("<!-- exit-codes:begin -->")[1].split("<!-- exit-codes:end -->")[0]
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.+) \|$", table, flags=re.M)}
    assert rows == {int(k): v for k, v in EXIT_CODES.items()}


def test_readme_quickstarts_run_as_written(tmp_path, sample_kb_path):
    blocks = quickstart_blocks((REPO / "README.md").read_text("utf-8"))
    work = tmp_path / "checkout"
    (work / "data" / "demo").mkdir(parents=True)
    (work / "examples").symlink_to(REPO / "examples")
    shutil.copytree(sample_kb_path, work / "data" / "demo" / "culturebase")
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "kar").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m services.cli "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for exe in ("kar", "python"):
        (bin_dir / exe).chmod(0o755)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')

    api_port = free_port()
    with FakeOpenAIServer(responder=responder) as vlm, FixtureServer() as kym:
        swaps = [
            ("http://localhost:8001/v1", vlm.base_url),
            ("http://localhost:8000", f"http://127.0.0.1:{api_port}"),
            ("--port 8000", f"--port {api_port}"),
            ("https://knowyourmeme.com", kym.url),
        ]
        script = "set -e\n"
        for name in ORDER:
            body = blocks[name]
            for old, new in swaps:
                body = body.replace(old, new)
            script += f"echo '=== quickstart {name}' >&2\n{body}\n"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAR_")}
        env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", KAR_CRAWL_DELAY_S="0")
        proc = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=1500)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-6000:]
        vlm_calls = len(vlm.requests)

    sections = dict(re.findall(r"=== quickstart ([\w-]+)\n(.*?)(?==== quickstart |\Z)", proc.stderr, flags=re.S))
    # 1. offline explain: the demo KB is found (entities pass τ), no VLM is said plainly, the empty corpus is warned about
    assert "王司徒" in proc.stdout and "No explanation was generated" in proc.stdout
    assert "warning: no web evidence: the local search corpus is empty" in sections["first"]
    # explain with the VLM given on the command line, then over HTTP with it in the environment
    assert proc.stdout.count("EXPLANATION-FROM-THE-VLM") >= 2 and vlm_calls > 0
    # 2. the crawl said where it starts and its limit, succeeded, and grew the corpus the local search reads
    assert f"crawling knowyourmeme from {kym.url}/memes/confirmed; limit 20 entity pages" in sections["crawl"]
    assert re.search(r"job \S+: succeeded · \d+ stored", proc.stdout)
    chunks = re.search(r"crawled page chunks\s+([\d,]+)", proc.stdout)
    assert chunks and int(chunks.group(1).replace(",", "")) > 0
    # 3. the ablation ran with evidence, was judged and reported
    run = work / "runs" / "quickstart"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["models"]["evidence"]["available"] is True and manifest["models"]["evidence"]["corpus_chunks"] > 0
    metrics = json.loads((run / "report" / "metrics.json").read_text())
    assert metrics and (run / "report" / "report.html").exists()
    for cond in ("vanilla", "search_cot", "kar"):
        judged = json.loads((run / "judged" / f"{cond}.json").read_text())
        assert judged and all(j["evaluation"]["parse_success"] for j in judged)
