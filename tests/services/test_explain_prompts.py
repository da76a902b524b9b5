"""`POST /v1/explain?include_prompts=true`: the trace carries what each VLM call was sent; by default it does not."""

from __future__ import annotations

import hashlib

from tests.services.test_explain import parse_sse


async def test_prompts_only_on_request(api, zhuge_png):
    client, services = api
    plain = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")}, data={"condition": "kar"})
    assert plain.status_code == 200 and "prompts" not in plain.json()["trace"]
    asked = await client.post("/v1/explain?include_prompts=true", files={"image": ("z.png", zhuge_png, "image/png")},
                              data={"condition": "kar"})
    assert asked.status_code == 200
    prompts = asked.json()["trace"]["prompts"]
    assert [c["stage"] for c in prompts] == ["extract", "reason"]
    sent = services.vlm.calls[-2:]
    for call, received in zip(prompts, sent, strict=True):
        image, text = call["messages"][0]["content"]
        assert text == {"type": "text", "text": received.messages[0].text}
        assert image["sha256"] == hashlib.sha256(received.messages[0].images[0].data).hexdigest()
    streamed = await client.post("/v1/explain?stream=true&include_prompts=true", files={"image": ("z.png", zhuge_png, "image/png")})
    final = dict(parse_sse(streamed.text))["final"]
    assert [c["stage"] for c in final["trace"]["prompts"]] == ["extract", "reason"]
    streamed = await client.post("/v1/explain?stream=true", files={"image": ("z.png", zhuge_png, "image/png")})
    assert "prompts" not in dict(parse_sse(streamed.text))["final"]["trace"]
