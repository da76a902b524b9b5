"""POST /v1/entities/by-sound: the sound route of the entity search, with a clip as the body."""

from __future__ import annotations

from tests.retrieval.sounds.test_route import SR, melody, wav_bytes
from tests.services.conftest import ro


async def test_a_clip_finds_the_entity_whose_sound_it_is_and_junk_is_refused(api, tmp_path):
    from retrieval.sounds.importing import import_audio_folder

    client, services = api
    folder = tmp_path / "sounds"
    folder.mkdir()
    (folder / "诸葛亮.wav").write_bytes(wav_bytes(melody(21)))
    with services.lock:
        report = import_audio_folder(services.kb, folder)
    assert report["stored"] == 1
    clip = wav_bytes(melody(21)[SR : SR * 4] + 0.3 * melody(5, 3.0))
    r = await client.post("/v1/entities/by-sound", content=clip, headers={**ro(), "Content-Type": "audio/wav"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["hits"][0]["name"] == "诸葛亮" and body["hits"][0]["route"] == "sound" and body["hits"][0]["passes_tau"]
    other = await client.post("/v1/entities/by-sound", content=wav_bytes(melody(22, 3.0)), headers={**ro(), "Content-Type": "audio/wav"})
    assert other.status_code == 200 and not [h for h in other.json()["hits"] if h["passes_tau"]]
    junk = await client.post("/v1/entities/by-sound", content=b"%PDF-1.4 not a sound", headers={**ro(), "Content-Type": "audio/wav"})
    assert junk.status_code == 415 and "no readable sound" in junk.json()["error"]["message"]
