"""Templates found wherever they sit: descriptor votes over the whole picture (grids, small shares),
look-alikes told apart, mirrored reposts, several images in one call (generated images only)."""

from __future__ import annotations

import dataclasses
import io

from PIL import Image, ImageDraw, ImageOps

from retrieval.images.route import PARAMS as ROUTE_PARAMS, ImageRoute
from retrieval.knowledge_base import KnowledgeBase
from tests.retrieval.images.test_verification import add_entity, image_hits, kb, textured  # noqa: F401  (kb: fixture)
from tests.support.images import meme_of, to_bytes


def grid_post(cells: list[Image.Image], cols: int, width: int = 1000, dark: bool = True) -> bytes:
    """A post with a header band and an image grid (square cells) on a dark page: no plain picture region."""
    page_colour = (21, 32, 43) if dark else (255, 255, 255)
    gap = 6
    cw = (width - 40 - gap * (cols - 1)) // cols
    rows = -(-len(cells) // cols)
    page = Image.new("RGB", (width, 140 + rows * (cw + gap) + 80), page_colour)
    d = ImageDraw.Draw(page)
    d.ellipse((16, 16, 76, 76), fill=(200, 120, 40))
    d.text((90, 24), "someone @someone 3h: look at these", fill=(230, 230, 230))
    for i, cell in enumerate(cells):
        c, r = i % cols, i // cols
        page.paste(ImageOps.fit(cell.convert("RGB"), (cw, cw)), (20 + c * (cw + gap), 120 + r * (cw + gap)))
    return to_bytes(page, "JPEG", quality=60)


def test_a_template_in_one_cell_of_a_grid_is_found_by_votes(kb):
    ent = add_entity(kb, "Grid Template", to_bytes(textured(30)))
    for seed in (31, 32, 33):
        add_entity(kb, f"Other {seed}", to_bytes(textured(seed)))
    shot = grid_post([textured(40), textured(41), textured(30), textured(42)], cols=2)
    (hit,) = image_hits(kb, shot)
    assert hit.entity.id == ent.id and hit.image["signal"] == "verified"
    assert hit.image["votes"] and hit.image["votes"] > 0  # shortlisted by the descriptor index
    # the same in a 1×3 row: the template fills under a third of the width
    (hit,) = image_hits(kb, grid_post([textured(43), textured(44), textured(30)], cols=3, dark=False))
    assert hit.entity.id == ent.id
    # a grid of templates that are not in CultureBase claims nothing
    assert image_hits(kb, grid_post([textured(45), textured(46), textured(47), textured(48)], cols=2)) == []


def test_two_templates_in_different_cells_are_both_claimed(kb):
    a = add_entity(kb, "Left Template", to_bytes(textured(60)))
    b = add_entity(kb, "Right Template", to_bytes(textured(61)))
    hits = image_hits(kb, grid_post([textured(60), textured(61), textured(62), textured(63)], cols=2))
    assert {h.entity.id for h in hits} == {a.id, b.id}
    assert all(h.image["contest"] is None for h in hits)  # different places: no look-alike contest


def lookalike(base: int, other: int) -> Image.Image:
    """``base``'s picture with its right 35 % replaced by another's: two templates sharing a large part."""
    img = textured(base).copy()
    w, h = img.size
    img.paste(textured(other).crop((int(w * 0.65), 0, w, h)), (int(w * 0.65), 0))
    return img


def test_look_alikes_sharing_a_part_are_told_apart_and_the_trace_shows_both(kb):
    a = add_entity(kb, "Original", to_bytes(textured(70)))
    b = add_entity(kb, "Look Alike", to_bytes(lookalike(70, 71)))
    (hit,) = image_hits(kb, meme_of(textured(70), 70))
    assert hit.entity.id == a.id and hit.image["contest"] == "won"
    (rival,) = hit.image["runner_up"]
    assert rival["entity_id"] == b.id and rival["inliers"] >= 15 and rival["strength"] * ROUTE_PARAMS.lookalike_margin <= hit.image["inliers"] * hit.image["share"]
    (hit,) = image_hits(kb, meme_of(lookalike(70, 71), 71))
    # (its look-alike got under a quarter of its descriptor votes: not verified at all, nothing to contest)
    assert hit.entity.id == b.id and hit.image["contest"] in (None, "won")
    assert hit.image["contest"] is None or hit.image["runner_up"][0]["entity_id"] == a.id
    # only the shared part: both verify about as well, no margin, neither is claimed
    shared = textured(70).crop((0, 0, int(textured(70).width * 0.65), textured(70).height))
    assert image_hits(kb, to_bytes(shared.resize((shared.width * 2, shared.height * 2)), "JPEG", quality=80)) == []


def test_a_mirrored_repost_is_found_and_says_so(kb):
    ent = add_entity(kb, "Mirrored Template", to_bytes(textured(80)))
    add_entity(kb, "Other", to_bytes(textured(81)))
    flipped = to_bytes(ImageOps.mirror(Image.open(io.BytesIO(meme_of(textured(80), 80)))), "JPEG", quality=70)
    (hit,) = image_hits(kb, flipped)
    assert hit.entity.id == ent.id and hit.image["mirrored"] is True and hit.image["signal"] == "verified"


def test_a_query_split_over_threads_gets_what_one_thread_gets(kb):
    """``KAR_IMAGE_QUERY_THREADS``: a query's regions, whole picture, hashes, mirrored pass and lookups side by side
    give the same matches as one thread (a grid cell, a mirrored repost, a plain meme, a grid of unknown templates)."""
    from retrieval.images.query_threads import QueryThreads

    grid = add_entity(kb, "Threads Grid", to_bytes(textured(120)))
    flipped = add_entity(kb, "Threads Mirrored", to_bytes(textured(121)))
    plain = add_entity(kb, "Threads Plain", to_bytes(textured(122)))
    route = kb.image_route
    assert route.threads.threads == kb.settings.image_query_threads == 2
    serial = ImageRoute(kb.store, route.images, features=route.features, descriptors=route.descriptors, threads=1)
    queries = {
        grid.id: grid_post([textured(123), textured(120), textured(124), textured(125)], cols=2),
        flipped.id: to_bytes(ImageOps.mirror(Image.open(io.BytesIO(meme_of(textured(121), 121)))), "JPEG", quality=70),
        plain.id: meme_of(textured(122), 122),
        None: grid_post([textured(126), textured(127), textured(128)], cols=3),
    }
    jobs: list[int] = []
    run = route.threads.run
    route.threads.run = lambda work: jobs.append(len(work)) or run(work)  # type: ignore[method-assign]

    def seen(matches) -> list[tuple]:
        return [(m.entity_id, m.distance, m.crop, m.inliers, m.coverage, m.share, m.votes, m.mirrored, m.contest)
                for m in matches]

    for want, data in queries.items():
        one, split = serial.match(serial.prepare(data)), route.match(route.prepare(data))
        assert seen(split) == seen(one)
        accepted = [m.entity_id for m in split if m.signal(route.tau)]
        assert accepted == ([want] if want else [])
    assert 5 in jobs  # the grid's four regions and the whole picture went to the threads together


def test_several_images_in_one_call_count_each_template_once(kb):
    a = add_entity(kb, "Frame A", to_bytes(textured(90)))
    b = add_entity(kb, "Frame B", to_bytes(textured(91)))
    route = kb.image_route
    frames = [route.prepare(meme_of(textured(s), s)) for s in (90, 90, 91, 95)]
    matches = route.match_many(frames)
    accepted = [m for m in matches if m.signal(route.tau)]
    assert sorted(m.entity_id for m in accepted) == sorted([a.id, b.id])
    assert len({m.entity_id for m in matches}) == len(matches)


def test_the_descriptor_index_is_rebuilt_from_stored_features_when_missing(kb):
    ent = add_entity(kb, "Rebuilt", to_bytes(textured(100)))
    add_entity(kb, "Other", to_bytes(textured(101)))
    folder = kb.image_route.descriptors.root
    assert (folder / "index.faissb").is_file() and (folder / "slots.json").is_file()
    for f in folder.iterdir():
        f.unlink()
    fresh = ImageRoute(kb.store, kb.image_route.images)
    assert fresh.descriptors.size == 0
    shot = grid_post([textured(102), textured(100), textured(103), textured(104)], cols=2)
    accepted = [m for m in fresh.match(fresh.prepare(shot)) if m.signal(fresh.tau)]
    assert [m.entity_id for m in accepted] == [ent.id] and fresh.descriptors.images == 2
    assert (folder / "index.faissb").is_file()


def test_frames_described_before_mirrored_codes_were_kept_get_them_when_indexed_again(kb):
    """A KB whose features were stored before their mirrored codes: rebuilt from the stored features, its frames are
    indexed without them (counted ``unmirrored``) and a mirrored cell is not found; indexing the entity again
    describes them, and it is."""
    from retrieval.images import features as feats

    ent = add_entity(kb, "Old Mirror", to_bytes(textured(141)))
    add_entity(kb, "Old Mirror Other", to_bytes(textured(142)))
    stored = list(kb.image_route.features.root.rglob(f"*.{feats.MIRRORED_METHOD}.npz"))
    assert len(stored) == 2
    for f in stored:
        f.unlink()
    old = ImageRoute(kb.store, kb.image_route.images)
    assert old.rebuild_descriptors() == {"frames": 2, "missing": 0, "unmirrored": 2} and old.descriptors.mirrored_frames == 0
    cell = grid_post([textured(143), ImageOps.mirror(textured(141)), textured(144), textured(145)], cols=2)
    assert not [m for m in old.match(old.prepare(cell)) if m.signal(old.tau)]
    assert old.index_entities([ent])["frames"] == 1 and old.descriptors.mirrored_frames == 1
    (hit,) = [m for m in old.match(old.prepare(cell)) if m.signal(old.tau)]
    assert hit.entity_id == ent.id and hit.mirrored


def test_deleting_an_entity_removes_its_descriptors(kb: KnowledgeBase):
    ent = add_entity(kb, "Deleted", to_bytes(textured(110)))
    before = kb.image_route.descriptors.images
    kb.image_route.delete_entities([ent.id])
    assert kb.image_route.descriptors.images == before - 1
    assert kb.image_route.descriptors.vote(kb.image_route.prepare(to_bytes(textured(110))).features[-1][1].descriptors) == []


def test_query_keypoints_are_spread_so_a_small_cell_beside_busy_text_keeps_its_share():
    """The whole query is described near its own size with keypoints taken cell by cell: a template in
    one cell of a 1×3 row beside two cells of dense text still gets enough keypoints to verify."""
    from retrieval.images import features as feats

    page = Image.new("RGB", (1000, 420), (255, 255, 255))
    d = ImageDraw.Draw(page)
    for y in range(10, 410, 9):  # two thirds of the picture are small text: the strongest corners
        for x in range(10, 640, 60):
            d.text((x, y), "lorem ipsum", fill=(0, 0, 0))
    page.paste(textured(30).resize((320, 240)), (660, 90))
    query = feats.describe_query(page)
    in_cell = int(((query.points[:, 0] >= 660 * query.width / 1000) & (query.points[:, 1] >= 90 * query.height / 420)).sum())
    assert query.count <= feats.FEATURE_PARAMS.query_features and in_cell >= 0.15 * query.count
    assert feats.verify(query, feats.describe(textured(30))).verified


def test_a_contest_lead_within_inlier_noise_claims_nothing():
    """Two templates verified over one part: a clear lead wins, a lead of a few inliers is a tie."""
    import numpy as np

    from retrieval.images.route import ImageMatch

    quad = np.array([[0.1, 0.1], [0.6, 0.1], [0.6, 0.6], [0.1, 0.6]], np.float32)

    def verified(eid: str, inliers: int, share: float) -> ImageMatch:
        return ImageMatch(eid, 40, "full", {"sha256": eid}, inliers=inliers, keypoints=400, query_keypoints=900,
                          coverage=0.25, share=share, quad=quad)

    clear = ImageRoute._contest({"a": verified("a", 60, 0.6), "b": verified("b", 30, 0.6)})
    assert (clear["a"].contest, clear["b"].contest) == ("won", "outranked")
    assert clear["a"].rivals[0]["entity_id"] == "b" and clear["a"].rivals[0]["inliers"] == 30
    tie = ImageRoute._contest({"a": verified("a", 20, 0.3), "b": verified("b", 15, 0.3)})  # 1.33× but 5 inliers apart
    assert (tie["a"].contest, tie["b"].contest) == ("ambiguous", "ambiguous")
    assert tie["a"].signal(32) is None and tie["b"].signal(32) is None


def _inside(box, expected, tol=0.04) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(box, expected))


def test_picture_regions_are_the_cells_of_a_grid_and_none_for_a_plain_meme():
    from retrieval.images import features as feats

    cells = [textured(s) for s in (90, 91, 92, 93)]
    width, gap = 1000, 6
    cw = (width - 40 - gap) // 2
    height = 140 + 2 * (cw + gap) + 80
    boxes = feats.picture_regions(Image.open(io.BytesIO(grid_post(cells, cols=2, width=width, dark=False))))
    for c, r in ((0, 0), (1, 0), (0, 1), (1, 1)):  # each cell, found by the gutters between the cells
        x0, y0 = 20 + c * (cw + gap), 120 + r * (cw + gap)
        expected = (x0 / width, y0 / height, (x0 + cw) / width, (y0 + cw) / height)
        assert any(_inside(b, expected) for b in boxes), (expected, boxes)
    # a meme that fills the picture has no region to describe apart
    assert feats.picture_regions(Image.open(io.BytesIO(meme_of(textured(94), 94)))) == []


def test_grid_cells_are_found_on_a_card_a_few_grey_levels_off_its_page():
    """A light feed's white card on a 243 page, a dark one's 42 card on a 30 page (and the other way round):
    two flat colours, each inside the other's neighbourhood, each a large share of the picture; a row of three
    cells on the card is cut into its cells in a low-quality JPEG (neither level counted as flat before)."""
    from retrieval.images import features as feats

    cells = [textured(s) for s in (110, 111, 112)]
    for page_grey, card_grey in ((243, 254), (254, 243), (30, 42), (42, 30)):
        page = Image.new("RGB", (900, 700), (page_grey,) * 3)
        ImageDraw.Draw(page).rectangle((180, 40, 720, 660), fill=(card_grey,) * 3)
        for i, cell in enumerate(cells):
            page.paste(ImageOps.fit(cell, (170, 170)), (195 + i * 175, 250))
        boxes = feats.picture_regions(Image.open(io.BytesIO(to_bytes(page, "JPEG", quality=44))))
        for i in range(3):
            expected = ((195 + i * 175) / 900, 250 / 700, (195 + i * 175 + 170) / 900, 420 / 700)
            assert any(_inside(b, expected) for b in boxes), (page_grey, card_grey, expected, boxes)


def test_a_template_in_a_small_cell_is_verified_in_its_region_enlarged(kb):
    ent = add_entity(kb, "Small Cell Template", to_bytes(textured(95)))
    add_entity(kb, "Other Small", to_bytes(textured(96)))
    # a 1×3 row on a 600 px page: each cell ~180 px, the template shown at under half its stored size
    shot = grid_post([textured(97), textured(95), textured(98)], cols=3, width=600, dark=False)
    route: ImageRoute = kb.image_route
    query = route.prepare(shot)
    assert len(query.regions) >= 3
    (match,) = [m for m in route.match(query) if m.signal(route.tau)]
    assert match.entity_id == ent.id and match.verified and match.crop.startswith("region")
    # its outline (the whole template: the square cell crops its sides) is centred on the middle cell, in the
    # whole picture's fractions (not the region's)
    xs = [float(x) for x, _ in match.quad]
    assert 0.45 < sum(xs) / 4 < 0.55 and max(xs) - min(xs) < 0.5


def test_an_exif_rotated_upload_is_read_upright_for_every_crop(kb):
    from tests.retrieval.images.test_verification import screenshot_of

    upright = Image.open(io.BytesIO(screenshot_of(meme_of(textured(99), 99))))
    # the same screenshot stored on its side with an EXIF orientation tag that turns it upright (a phone photo)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    buf = io.BytesIO()
    upright.transpose(Image.Transpose.ROTATE_90).save(buf, "JPEG", quality=90, exif=exif.tobytes())
    route: ImageRoute = kb.image_route
    a, b = route.prepare(to_bytes(upright, "JPEG", quality=90)), route.prepare(buf.getvalue())
    assert (b.width, b.height) == (a.width, a.height)
    crops_a, crops_b = dict(a.variants), dict(b.variants)
    assert "picture_region" in crops_a and "picture_region" in crops_b
    # the crop of the post's picture is cut from the upright picture: the same hash within JPEG noise
    assert crops_a["picture_region"].distance(crops_b["picture_region"]) <= 8


def test_a_mirrored_cell_is_named_by_the_first_search_and_its_region_described_flipped_when_reached(kb, monkeypatch):
    """The first search's votes for the frames' mirrored codes name a template shown mirrored: in a grid it is verified
    in its cell's flipped region, as one thread finds it; regions are described flipped only when a mirrored candidate
    reaches them, each once (the whole flipped picture too), and not at all when the first pass verifies.  A grid of templates not in the KB claims nothing;
    its flipped picture is hashed ahead on the other thread while the first pass verifies (unless a candidate has
    :attr:`ImageRouteParams.speculate_below_votes` votes), with the same matches either way."""
    from retrieval.images import features as image_features
    from retrieval.images import route as image_route
    from retrieval.images.query_threads import QueryThreads

    ent = add_entity(kb, "Mirrored Cell", to_bytes(textured(132)))
    add_entity(kb, "Mirrored Cell Other", to_bytes(textured(133)))
    route = kb.image_route
    assert route.descriptors.mirrored_frames == route.descriptors.images == 2
    serial = ImageRoute(kb.store, route.images, features=route.features, descriptors=route.descriptors, threads=1)
    started: list[str] = []  # the jobs started ahead, by where they were made
    flipped: list[int] = []
    ahead, mirrored_query = QueryThreads.ahead, image_features.mirrored_query
    monkeypatch.setattr(QueryThreads, "ahead", lambda self, jobs: started.extend(j.__qualname__ for j in jobs) or ahead(self, jobs))
    monkeypatch.setattr(image_features, "mirrored_query", lambda f, *a: flipped.append(f.count) or mirrored_query(f, *a))

    def seen(matches) -> list[tuple]:
        return [(m.entity_id, m.inliers, m.crop, m.votes, m.mirrored) for m in matches]

    query = route.prepare(grid_post([textured(134), textured(135), textured(136), textured(137)], cols=2))
    assert len(query.regions) >= 4
    answers = {}
    for gate in (10**6, 0):  # whatever the votes; never
        monkeypatch.setattr(image_route, "PARAMS", dataclasses.replace(image_route.PARAMS, speculate_below_votes=gate))
        started.clear()
        answers[gate] = seen(route.match(query))
        assert ("ImageRoute.match.<locals>.flipped_and_hashed" in started) == bool(gate)  # the flipped hash
    assert answers[0] == answers[10**6] == seen(serial.match(query))
    assert not [m for m in route.match(query) if m.signal(route.tau)]
    cell = route.prepare(grid_post([textured(138), ImageOps.mirror(textured(132)), textured(139), textured(140)], cols=2))
    flipped.clear()
    split = route.match(cell)
    (hit,) = [m for m in split if m.signal(route.tau)]
    assert hit.entity_id == ent.id and hit.mirrored and hit.crop.startswith("region")
    # each region described flipped once at most (when a mirrored candidate reaches it), the whole picture likewise
    assert 1 <= len(flipped) <= len(cell.regions) + 1 and flipped.count(cell.features[0][1].count) <= 1
    assert seen(split) == seen(serial.match(cell))
    upright = route.prepare(grid_post([textured(138), textured(132), textured(139), textured(140)], cols=2))
    flipped.clear()
    assert [m.entity_id for m in route.match(upright) if m.signal(route.tau)] == [ent.id] and flipped == []  # nothing flipped