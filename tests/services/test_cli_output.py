"""Output off a terminal: a pipe or a file gets each sentence on one line whatever COLUMNS says;
a terminal still gets rich's layout at its width, and a table too wide for it comes as records, nothing cut."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from services.cli.console import CliConsole

REPO = Path(__file__).resolve().parents[2]
SENTENCE = "moegirl: read 2 entries from " + "/a-very-long-folder-name" * 6 + "/dump.json: stored 2, 0 duplicates merged"


def test_a_pipe_gets_one_line_per_sentence_at_any_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    for stderr in (False, True):
        buffer = io.StringIO()  # not a terminal, like a pipe or a file
        console = CliConsole(file=buffer, stderr=stderr)
        console.print(SENTENCE, highlight=False, markup=False)
        assert buffer.getvalue() == SENTENCE + "\n"


def test_a_rule_off_a_terminal_is_as_wide_as_its_title():
    buffer = io.StringIO()
    CliConsole(file=buffer).rule(f"[bold]kar[/]  {SENTENCE}")
    (line,) = buffer.getvalue().splitlines()
    assert f"kar  {SENTENCE}" in line and len(line) <= len(SENTENCE) + 20


def test_a_terminal_still_gets_rich_layout(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    buffer = io.StringIO()
    console = CliConsole(file=buffer, force_terminal=True, color_system=None)
    console.print(SENTENCE, highlight=False, markup=False)
    lines = buffer.getvalue().splitlines()
    assert len(lines) > 1 and max(len(line) for line in lines) <= 40
    assert "".join(lines).replace(" ", "") == SENTENCE.replace(" ", "")  # every character is there, wrapped at 40


def _hits_table():
    from rich.table import Table

    table = Table(title="CultureBase: 'such wow'")
    for header in ("#", "name", "source work", "score", "route scores (winner first)", "matched"):
        table.add_column(header)
    table.add_row("1", "Doge", "Photo of Kabosu the Shiba Inu (2010)", "1.123", "caption 0.50 · lexical 1.00 · exact 1.00", "Such wow")
    table.add_row("2", "This Is Fine", "KC Green's webcomic Gunshow (2013)", "0.835", "name 0.83 · ocr 0.82", "")
    return table


def test_a_narrow_terminal_gets_a_table_as_records_nothing_cut():
    for width in (40, 200):
        buffer = io.StringIO()
        CliConsole(file=buffer, force_terminal=True, color_system=None, width=width).print(_hits_table())
        text = buffer.getvalue()
        assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
        flat = " ".join(text.split())
        for value in ("Doge", "Photo of Kabosu the Shiba Inu (2010)", "KC Green's webcomic Gunshow (2013)", "1.123"):
            assert value in flat, (width, text)  # every value whole, wrapped at most
        if width == 40:  # too narrow for the columns: one block per row, a line per cell
            assert "name: This Is Fine" in text and "source work: Photo of Kabosu the Shiba Inu (2010)" in flat
        else:
            assert "┃ name" in text  # wide enough: the grid


def test_kar_through_a_pipe_keeps_a_long_sentence_on_one_line(tmp_path):
    folder = tmp_path.joinpath(*(["a-folder-with-a-long-name"] * 5))
    folder.mkdir(parents=True)
    dump = folder / "entities.jsonl"
    dump.write_text(json.dumps({"name": "Doge", "source_work": "Internet", "language": "en"}) + "\n", "utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAR_")}
    env.update(COLUMNS="40", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", KAR_KB_PATH=str(tmp_path / "kb"),
               KAR_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli", "kb", "import", str(dump), "--dry-run"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    output = proc.stdout + proc.stderr
    lines = [line for line in output.splitlines() if "read 1 entries from" in line]
    assert len(lines) == 1, output
    assert f"read 1 entries from {dump}: would store 1 (dry run: nothing stored)" in lines[0]
    assert len(lines[0]) > 40 + len(str(dump))
