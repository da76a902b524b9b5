"""Bad input to /v1/explain: each case a clear 4xx ``{"error": {"code", "message"}}``; the server stays
healthy and nothing stored changes.  Plus the accepted formats (GIF first frame, WebP, JPEG, image_url)."""

from __future__ import annotations

import base64
import ipaddress
import io
import json

import pytest

from services.images import UrlFetcher, default_policy
from tests.services.conftest import assert_healthy, png_bytes, store_fingerprint
from tests.services.urlserver import ImageServer


async def expect_error(client, services, status: int, code: str, **request) -> dict:
    before = store_fingerprint(services)
    calls_before = len(services.vlm.calls)
    r = await client.post("/v1/explain", **request)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert len(services.vlm.calls) == calls_before, "the pipeline must not run on bad input"
    await assert_healthy(client)
    assert store_fingerprint(services) == before
    return body["error"]


def upload(data: bytes, name: str = "meme.png", ctype: str = "image/png", **fields) -> dict:
    return {"files": {"image": (name, data, ctype)}, "data": {"condition": "kar", **fields}}


# -- uploads -------------------------------------------------------------------------------
async def test_upload_over_the_size_limit_is_refused_by_content_length(make_client):
    async with make_client(max_upload_mb=0.25, media_max_mb=0.25) as (client, services):
        big = b"\x89PNG\r\n\x1a\n" + b"\0" * 600_000
        err = await expect_error(client, services, 413, "upload_too_large", **upload(big))
        assert "limit" in err["message"]


async def test_upload_over_the_size_limit_is_refused_while_reading(make_client):
    async with make_client(max_upload_mb=0.25, media_max_mb=0.25) as (client, services):
        async def chunks():  # no Content-Length: the limit must hold while the body streams in
            yield b'{"image_base64": "'
            for _ in range(100):
                yield b"A" * 8192
            yield b'"}'

        await expect_error(client, services, 413, "upload_too_large", content=chunks(), headers={"Content-Type": "application/json"})


async def test_decoded_image_over_the_byte_limit(make_client):
    async with make_client(max_upload_mb=0.25, media_max_mb=0.25) as (client, services):
        data = b"\x89PNG\r\n\x1a\n" + b"\0" * 280_000  # body fits the transport slack, the image does not
        await expect_error(client, services, 413, "image_too_large", **upload(data))


@pytest.mark.parametrize(
    ("name", "data", "what"),
    [
        ("svg", b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><script>alert(1)</script></svg>', "SVG"),
        ("html", b"<!DOCTYPE html><html><body><img src=x onerror=alert(1)></body></html>", "HTML"),
        ("pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF", "PDF"),
        ("text", "just some text, renamed to .png\n诸葛亮".encode(), "text"),
    ],
)
async def test_non_image_renamed_png_is_refused_by_sniffing(api, name, data, what):
    client, services = api
    err = await expect_error(client, services, 415, "unsupported_image_type", **upload(data, name="meme.png", ctype="image/png"))
    assert what in err["message"]


async def test_truncated_png(api):
    client, services = api
    data = png_bytes((200, 200))
    await expect_error(client, services, 422, "image_corrupt", **upload(data[: len(data) // 2]))


async def test_corrupt_jpeg(api):
    client, services = api
    data = bytearray(png_bytes((120, 90), fmt="JPEG"))
    data[200:] = b"\x00" * (len(data) - 200)
    await expect_error(client, services, 422, "image_corrupt", **upload(bytes(data[:400]), name="m.jpg", ctype="image/jpeg"))


async def test_decompression_bomb_is_refused_before_decoding(make_client):
    async with make_client(max_image_pixels=1_000_000) as (client, services):
        bomb = png_bytes((3000, 3000), color="white")  # 9 Mpx in a few KB
        assert len(bomb) < 100_000
        err = await expect_error(client, services, 422, "image_too_many_pixels", **upload(bomb))
        assert "3000x3000" in err["message"]


async def test_zero_byte_file(api):
    client, services = api
    await expect_error(client, services, 400, "empty_image", **upload(b""))


async def test_zero_byte_base64(api):
    client, services = api
    await expect_error(client, services, 400, "empty_image", json={"image_base64": ""})


async def test_invalid_base64(api):
    client, services = api
    await expect_error(client, services, 422, "invalid_base64", json={"image_base64": "not base64 at all!!"})


async def test_malformed_json(api):
    client, services = api
    await expect_error(client, services, 400, "malformed_json", content=b'{"image_url": "https://x', headers={"Content-Type": "application/json"})


async def test_unknown_condition(api, zhuge_png):
    client, services = api
    err = await expect_error(client, services, 422, "unknown_condition", **upload(zhuge_png, condition="magic"))
    assert "kar" in err["message"]


async def test_unknown_condition_json(api, zhuge_png):
    client, services = api
    await expect_error(client, services, 422, "unknown_condition", json={"image_base64": base64.b64encode(zhuge_png).decode(), "condition": "KAR2"})


async def test_oversized_context_text(make_client, zhuge_png):
    async with make_client(max_context_chars=100) as (client, services):
        err = await expect_error(client, services, 422, "context_too_long", **upload(zhuge_png, post_text="梗" * 101))
        assert "post_text" in err["message"]


async def test_missing_image(api):
    client, services = api
    await expect_error(client, services, 422, "missing_image", json={"condition": "kar"})


async def test_two_image_sources(api, zhuge_png):
    client, services = api
    await expect_error(
        client, services, 422, "multiple_images", json={"image_base64": base64.b64encode(zhuge_png).decode(), "image_url": "https://example.com/a.png"}
    )


async def test_wrong_content_type(api):
    client, services = api
    await expect_error(client, services, 415, "unsupported_content_type", content=b"hello", headers={"Content-Type": "text/plain"})


async def test_context_note_condition_without_note(api, zhuge_png):
    client, services = api
    await expect_error(client, services, 422, "missing_context_note", **upload(zhuge_png, condition="context_note"))


# -- image_url -----------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/a.png", "gopher://x/", "/relative.png", "http://user:pw@example.com/a.png"])
async def test_image_url_not_http(api, url):
    client, services = api
    await expect_error(client, services, 422, "invalid_image_url", json={"image_url": url})


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:9/a.png", "loopback"),
        ("http://[::1]:9/a.png", "loopback"),
        ("http://10.0.0.7/a.png", "private"),
        ("http://192.168.1.1/a.png", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fd00:ec2::254]/latest/meta-data/", "private"),
        ("http://100.100.100.200/latest/meta-data/", "not globally routable"),
        ("http://0.0.0.0/", "unspecified"),
    ],
)
async def test_image_url_to_internal_address(api, url, kind):
    client, services = api
    err = await expect_error(client, services, 422, "image_url_forbidden", json={"image_url": url})
    assert kind in err["message"]


async def test_image_url_dns_name_resolving_to_loopback(api):
    client, services = api
    with ImageServer(png_bytes()) as server:
        err = await expect_error(client, services, 422, "image_url_forbidden", json={"image_url": f"http://localhost:{server.port}/ok.png"})
        assert server.hits == [], "no connection may be made to a forbidden address"
    assert "loopback" in err["message"]


@pytest.mark.parametrize(("ip", "kind"), [("10.1.2.3", "private"), ("169.254.169.254", "link-local"), ("127.0.0.1", "loopback")])
async def test_image_url_dns_name_resolving_to_internal_address(make_client, ip, kind):
    fetcher = UrlFetcher(max_bytes=10 * 2**20, resolver=lambda host, port: [ip] if host == "memes.example" else [])
    async with make_client(fetcher=fetcher) as (client, services):
        err = await expect_error(client, services, 422, "image_url_forbidden", json={"image_url": "http://memes.example/a.png"})
        assert "memes.example" in err["message"] and kind in err["message"]


def public_loopback_policy(ip):
    """Tests stand 127.0.0.1 in for 'the public internet'; every other internal address stays forbidden."""
    return None if ip == ipaddress.ip_address("127.0.0.1") else default_policy(ip)


async def test_image_url_fetches_a_public_image(make_client, zhuge_png):
    with ImageServer(zhuge_png) as server:
        async with make_client(fetcher=UrlFetcher(max_bytes=10 * 2**20, policy=public_loopback_policy)) as (client, services):
            r = await client.post("/v1/explain", json={"image_url": server.url("/redirect?to=/ok.png"), "condition": "kar"})
            assert r.status_code == 200, r.text
            assert r.json()["response"] == "EXPLANATION" and r.json()["image"]["format"] == "png"
            assert server.hits == ["/redirect", "/ok.png"]


@pytest.mark.parametrize(
    "target",
    ["http://127.0.0.2:{port}/ok.png", "http://169.254.169.254/latest/meta-data/", "http://[::1]:{port}/ok.png", "http://internal.example:{port}/ok.png"],
)
async def test_image_url_redirect_to_internal_address(make_client, target):
    resolver = lambda host, port: ["192.168.0.10"] if host == "internal.example" else ["127.0.0.1"]  # noqa: E731
    fetcher = UrlFetcher(max_bytes=10 * 2**20, policy=public_loopback_policy, resolver=resolver)
    with ImageServer(png_bytes()) as server:
        async with make_client(fetcher=fetcher) as (client, services):
            url = server.url("/redirect?to=" + target.format(port=server.port))
            err = await expect_error(client, services, 422, "image_url_forbidden", json={"image_url": url})
            assert "after a redirect" in err["message"]
            assert server.hits == ["/redirect"]


async def test_image_url_too_slow(make_client):
    fetcher = UrlFetcher(max_bytes=10 * 2**20, timeout_s=0.5, policy=public_loopback_policy)
    with ImageServer(png_bytes()) as server:
        async with make_client(fetcher=fetcher) as (client, services):
            err = await expect_error(client, services, 422, "image_url_timeout", json={"image_url": server.url("/slow.png?s=3")})
            assert "0.5" in err["message"]


async def test_image_url_too_big(make_client):
    fetcher = UrlFetcher(max_bytes=1_000_000, policy=public_loopback_policy)
    with ImageServer(png_bytes()) as server:
        async with make_client(fetcher=fetcher) as (client, services):
            await expect_error(client, services, 413, "image_too_large", json={"image_url": server.url("/big.png?n=5000000")})


async def test_image_url_not_found(make_client):
    with ImageServer(png_bytes()) as server:
        async with make_client(fetcher=UrlFetcher(max_bytes=2**20, policy=public_loopback_policy)) as (client, services):
            await expect_error(client, services, 422, "image_url_unreachable", json={"image_url": server.url("/missing.png")})


# -- accepted formats ------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["GIF", "WEBP", "JPEG"])
async def test_accepted_formats(api, fmt):
    from PIL import Image

    client, services = api
    buf = io.BytesIO()
    if fmt == "GIF":
        frames = [Image.new("RGB", (40, 30), c) for c in ("red", "blue")]
        frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    else:
        Image.new("RGB", (40, 30), "green").save(buf, format=fmt)
    r = await client.post("/v1/explain", **upload(buf.getvalue(), name="x.bin", ctype="application/octet-stream"))
    assert r.status_code == 200, r.text
    info = r.json()["image"]
    assert (info["width"], info["height"]) == (40, 30)
    sent = services.vlm.calls[-1].messages[0].images[0]
    if fmt == "GIF":  # an animated GIF is a clip (issue 30): its sampled frames, as JPEG stills
        assert info["format"] == "gif" and r.json()["media"]["kind"] == "video" and sent.data.startswith(b"\xff\xd8\xff")
        first = Image.open(io.BytesIO(sent.data)).convert("RGB").getpixel((0, 0))  # the first frame is red
        assert max(abs(a - b) for a, b in zip(first, (255, 0, 0))) <= 8, first
    else:
        assert info["format"] == fmt.lower()
