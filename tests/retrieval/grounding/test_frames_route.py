"""A clip is read as a picture: the image route looks at its sampled frames, an entity's best frame counts once."""

from __future__ import annotations

import io

from PIL import Image

from agents.media.explain import prepare_media, sniff_file
from culturebase.settings import Settings
from retrieval.grounding import EntityGrounder, GroundingCues
from tests.retrieval.images.test_route import INDEXED, OTHERS, _import_file, _kb
from tests.support.clips import make_video
from tests.support.images import meme_of, template_image


def _frames_of(tmp_path, name: str, pictures: list[Image.Image]) -> list[bytes]:
    path = make_video(tmp_path / name, "mp4", seconds=3.0, frames=pictures, size=(320, 240))
    media = prepare_media(path, sniff_file(path), Settings(media_audio="none"))
    return media.extras["frames"]


def test_a_video_whose_frames_show_a_template_grounds_it_once(tmp_path):
    kb = _kb("embedded", tmp_path)
    try:
        kb.import_file(_import_file(tmp_path))
        grounder = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=kb.image_route)
        unrelated = Image.new("RGB", (320, 240), (90, 90, 90))
        for seed in INDEXED:
            meme = Image.open(io.BytesIO(meme_of(template_image(seed), seed)))
            frames = _frames_of(tmp_path, f"t{seed}.mp4", [unrelated, meme, meme, unrelated])
            result = grounder.ground(GroundingCues(frames=frames))
            assert result.routes["image"] == "ran"
            names = [h.entity.name for h in result.hits]
            assert names[:1] == [f"Template {seed}"] and names.count(f"Template {seed}") == 1, names
            assert result.hits[0].route == "image"
        for seed in OTHERS[:3]:  # a clip of a template the KB does not hold claims nothing
            meme = Image.open(io.BytesIO(meme_of(template_image(seed), seed)))
            assert grounder.ground(GroundingCues(frames=_frames_of(tmp_path, f"o{seed}.mp4", [meme]))).hits == []
    finally:
        kb.close()


def test_a_clip_is_one_match_many_call_and_a_bad_frame_is_left_out(tmp_path, monkeypatch):
    kb = _kb("embedded", tmp_path)
    try:
        kb.import_file(_import_file(tmp_path))
        route = kb.image_route
        calls = {"match_many": 0, "frames": []}
        real_many = route.match_many

        def counted(queries, language=None, limit=None):
            calls["match_many"] += 1
            calls["frames"].append(len(queries))
            return real_many(queries, language=language, limit=limit)

        monkeypatch.setattr(route, "match_many", counted)
        grounder = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=route)
        seed = INDEXED[0]
        meme = Image.open(io.BytesIO(meme_of(template_image(seed), seed)))
        frames = _frames_of(tmp_path, "clip.mp4", [meme, meme, Image.new("RGB", (320, 240), (20, 20, 20))])
        result = grounder.ground(GroundingCues(frames=[b"not a frame", *frames]))
        assert calls["match_many"] == 1 and calls["frames"] == [len(frames)]
        assert [h.entity.name for h in result.hits][:1] == [f"Template {seed}"]
        nothing = grounder.ground(GroundingCues(frames=[b"junk", b"more junk"]))
        assert nothing.hits == [] and nothing.routes["image"].startswith("skipped: no frame could be decoded (frame 0:")
        assert calls["match_many"] == 1  # nothing decodable: nothing matched
    finally:
        kb.close()
