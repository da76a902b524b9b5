"""The image route through the service: the upload is matched to an entity image, shown in the trace; images served."""

from __future__ import annotations

from tests.support.images import meme_of, template_image, to_bytes


async def test_explain_trace_has_the_image_route_and_the_thumbnail_is_served(api):
    client, services = api
    kb = services.kb
    (doge,) = kb.store.find_by_name(["Doge"])
    img = kb.image_store.put(to_bytes(template_image(42)), url="https://example.org/doge.png")
    kb.add([doge.model_copy(update={"images": [img]})])

    r = await client.post("/v1/explain", files={"image": ("m.jpg", meme_of(template_image(42), 5), "image/jpeg")}, data={"condition": "kar"})
    assert r.status_code == 200, r.text
    hits = r.json()["trace"]["grounding"]["hits"]
    hit = next(h for h in hits if h["name"] == "Doge")
    assert hit["route"] == "image" and 0 <= hit["image_distance"] <= 32 and hit["image"]["sha256"] == img.sha256

    r = await client.get(f"/v1/images/{img.sha256}")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png" and r.content == to_bytes(template_image(42))
    assert (await client.get("/v1/images/" + "0" * 64)).status_code == 404
    assert (await client.get("/v1/images/not-a-hash")).status_code == 422

    r = await client.get("/v1/entities", params={"q": "Doge"})
    assert r.status_code == 200 and r.json()["hits"][0]["name"] == "Doge"


async def test_api_import_never_fetches_image_urls(api):
    import json

    from tests.services.conftest import RW_KEY

    client, services = api
    body = json.dumps({"name": "Remote Pic", "description": "A record naming an image URL on a private host.",
                       "image": "http://169.254.169.254/latest/meta-data/x.png"}) + "\n"
    r = await client.post("/v1/entities/import", content=body, headers={"Content-Type": "application/x-ndjson", "Authorization": f"Bearer {RW_KEY}"})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["stored"] == 1 and data["image_problems"][0]["reason"].startswith("not_fetched")
