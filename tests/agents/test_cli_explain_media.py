"""`kar explain` on a clip, a sound and what is neither (sniffed by content, not by name)."""

from __future__ import annotations

import zipfile

from typer.testing import CliRunner

from tests.agents.test_cli_runner import app, cli_kb, env  # noqa: F401  (fixtures)
from tests.support.clips import make_clip, make_sound


def test_explain_a_clip_shows_its_frames_and_grounds_them(env, tmp_path):  # noqa: F811
    clip = make_clip(tmp_path / "clip.dat", seconds=2.0, text="SUCH WOW")
    result = CliRunner().invoke(app, ["explain", str(clip)])
    assert result.exit_code == 0, result.output
    media_line = next(line for line in result.output.splitlines() if line.startswith("Media:"))
    assert media_line.startswith("Media: video (mp4), 2.0 s, ") and " frames at " in media_line
    assert "route image: skipped: the image cannot be decoded" not in result.output
    data = CliRunner().invoke(app, ["explain", str(clip), "--json"])
    trace = __import__("json").loads(data.stdout)["trace"]
    assert trace["media"]["kind"] == "video" and len(trace["media"]["frames"]) >= 2


def test_explain_a_sound_says_what_was_done_with_it(env, tmp_path):  # noqa: F811
    sound = make_sound(tmp_path / "sound.dat", "flac")
    result = CliRunner().invoke(app, ["explain", str(sound)])
    assert result.exit_code == 0, result.output
    assert "Media: audio (flac), 1.5 s; audio: none" in result.output
    assert "KAR_ASR_BASE_URL" in result.output  # how to have it transcribed


def test_explain_refuses_what_is_no_image_clip_or_sound(env, tmp_path):  # noqa: F811
    fake = tmp_path / "clip.mp4"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr("a.txt", "hello")
    result = CliRunner().invoke(app, ["explain", str(fake)])
    assert result.exit_code == 2
    assert "a ZIP archive" in result.output and "MP4" in result.output and "FLAC" in result.output
