"""The descriptor index (faiss, binary ORB descriptors): votes, removal, IVF, disk round trip (generated images)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from retrieval.images import features as feats
from retrieval.images.descriptor_index import DescriptorIndex, ImageKey
from retrieval.images import descriptor_support
from retrieval.images.descriptor_support import spread
from tests.retrieval.images.test_verification import textured


def _features(seed: int, size=(400, 300)) -> feats.Features:
    return feats.describe(textured(seed, size))


def _index(tmp_path, seeds=range(1, 9), **kw) -> DescriptorIndex:
    index = DescriptorIndex(tmp_path / "desc", **kw)
    for seed in seeds:
        f = _features(seed)
        index.add(ImageKey(f"e{seed}", f"sha{seed}", 0, "en"), f.points, f.descriptors, f.width, f.height)
    return index


def test_votes_rank_the_template_inside_a_bigger_picture_first(tmp_path):
    index = _index(tmp_path)
    assert index.images == 8 and 0 < index.size <= 8 * index.per_image
    # the template at a third of a wider picture, next to another picture: no crop, no layout detection
    from PIL import Image

    page = Image.new("RGB", (1200, 500), "white")
    page.paste(textured(5).resize((400, 300)), (700, 120))
    page.paste(textured(42).resize((400, 300)), (40, 60))  # not indexed
    q = feats.describe_query(page)
    votes = index.vote(q.descriptors, top=3)
    assert votes[0].key.entity_id == "e5" and votes[0].votes > 1.5 * max([v.votes for v in votes[1:]] or [0])
    # a picture of nothing indexed gets only chance votes
    noise = index.vote(feats.describe_query(textured(77)).descriptors, top=1)
    assert not noise or noise[0].votes < votes[0].votes / 2


def test_language_filter_and_removal(tmp_path):
    index = _index(tmp_path, seeds=(1, 2))
    q = _features(2).descriptors
    assert index.vote(q, language="zh") == []
    assert index.vote(q, language="en")[0].key.entity_id == "e2"
    assert index.remove_entities(["e2"]) == 1 and index.images == 1
    assert all(v.key.entity_id != "e2" for v in index.vote(q))
    # the freed slot is reused and the other image keeps its votes
    f = _features(3)
    index.add(ImageKey("e3", "sha3", 0), f.points, f.descriptors, f.width, f.height)
    assert index.vote(f.descriptors)[0].key.entity_id == "e3" and index.vote(_features(1).descriptors)[0].key.entity_id == "e1"


def test_descriptors_per_image_are_capped_and_spread_over_the_picture():
    f = _features(4)
    chosen = spread(f.points, 64, f.width, f.height)
    assert len(chosen) == 64 and len(set(chosen.tolist())) == 64
    pts = f.points[chosen]
    # every quarter of the picture keeps some of them (not the first 64 of one pyramid level in one corner)
    quarters = {(int(x >= f.width / 2), int(y >= f.height / 2)) for x, y in pts}
    assert len(quarters) == 4


def test_an_ivf_index_answers_like_the_exact_one(tmp_path):
    exact = _index(tmp_path / "a", seeds=range(1, 13))
    ivf = _index(tmp_path / "b", seeds=range(1, 13), ivf_from=1000, nprobe=8)
    assert exact.kind == "flat" and ivf.kind == "ivf"
    for seed in (3, 7, 11):
        q = feats.describe_query(textured(seed)).descriptors
        assert exact.vote(q)[0].key.entity_id == ivf.vote(q)[0].key.entity_id == f"e{seed}"
    # removal works on the IVF too
    ivf.remove_entities(["e7"])
    assert all(v.key.entity_id != "e7" for v in ivf.vote(feats.describe_query(textured(7)).descriptors))


def test_saved_index_loads_back_and_a_torn_one_is_refused(tmp_path):
    index = _index(tmp_path, seeds=(1, 2, 3))
    assert index.save()
    again = DescriptorIndex(tmp_path / "desc")
    assert again.load() and again.images == 3 and again.size == index.size
    q = _features(2).descriptors
    assert again.vote(q)[0].key == ImageKey("e2", "sha2", 0, "en")
    (tmp_path / "desc" / "index.faissb").write_bytes(b"not an index")
    assert DescriptorIndex(tmp_path / "desc").load() is False
    assert DescriptorIndex(tmp_path / "missing").load() is False


def test_a_frames_mirrored_codes_get_the_votes_of_a_mirrored_copy_and_go_with_the_frame(tmp_path):
    """Each frame's mirrored codes sit beside its own (id | MIRRORED): one search gives a flipped copy's votes to the
    frame's mirrored codes and an upright copy's to its own, each kind counted among its own codes; removing the
    frame removes both; the mirrored counts load back; an index saved before them (format 2) is rebuilt."""
    import json

    from PIL import ImageOps

    from retrieval.images.descriptor_index import FORMAT

    index = DescriptorIndex(tmp_path / "desc")
    for seed in range(1, 7):
        f, m = feats.describe_entity_mirrored(textured(seed, (400, 300)))
        assert m.descriptors.shape == f.descriptors.shape and m.ok.mean() > 0.9
        index.add(ImageKey(f"e{seed}", f"sha{seed}", 0, "en"), f.points, f.descriptors, f.width, f.height, mirrored=m)
    assert index.mirrored_frames == 6 and index.size > 6 * 300  # own and mirrored codes
    upright = feats.describe_query(textured(4, (400, 300))).descriptors
    flipped = feats.describe_query(ImageOps.mirror(textured(4, (400, 300)))).descriptors
    (own,), (mirrored,) = index.vote_both([flipped], top=3)
    # (a generated picture's round and square shapes look alike mirrored: the upright codes get some votes too)
    assert mirrored[0].key.entity_id == "e4" and mirrored[0].votes > 1.5 * max([v.votes for v in own if v.key.entity_id == "e4"] or [0])
    (own,), (mirrored,) = index.vote_both([upright], top=3)
    assert own[0].key.entity_id == "e4" and own[0].votes > 1.5 * max([v.votes for v in mirrored if v.key.entity_id == "e4"] or [0])
    assert index.vote(upright, top=3) == own  # vote() counts a frame's own codes only
    assert index.save()
    again = DescriptorIndex(tmp_path / "desc")
    assert again.load() and again.mirrored_frames == 6 and again.vote_both([flipped], top=3)[1][0] == index.vote_both([flipped], top=3)[1][0]
    size = index.size
    index.remove_entities(["e4"])
    assert index.size < size - 300 and index.mirrored_frames == 5
    assert all(v.key.entity_id != "e4" for kind in index.vote_both([flipped], top=6) for v in kind[0])
    table = json.loads((tmp_path / "desc" / "slots.json").read_text("utf-8"))
    (tmp_path / "desc" / "slots.json").write_text(json.dumps({**table, "format": FORMAT - 1}), "utf-8")
    assert DescriptorIndex(tmp_path / "desc").load() is False


@pytest.mark.parametrize("n", [0, 1])
def test_empty_inputs_vote_for_nothing(tmp_path, n):
    index = _index(tmp_path, seeds=range(1, 1 + n))
    assert index.vote(np.zeros((0, 32), np.uint8)) == []


def test_a_large_index_is_mapped_read_only_and_read_into_memory_on_the_first_write(tmp_path):
    index = _index(tmp_path, seeds=range(1, 11), ivf_from=1000, mmap_from=1000)
    assert index.kind == "ivf" and index.save()
    mapped = DescriptorIndex(tmp_path / "desc", ivf_from=1000, mmap_from=1000)
    assert mapped.load() and mapped.mapped and mapped.memory_bytes() < index.memory_bytes() / 10
    q = feats.describe_query(textured(4)).descriptors
    assert mapped.vote(q)[0].key.entity_id == "e4"
    f = _features(20)
    mapped.add(ImageKey("e20", "sha20", 0), f.points, f.descriptors, f.width, f.height)
    assert not mapped.mapped and mapped.vote(f.descriptors)[0].key.entity_id == "e20"
    assert mapped.vote(q)[0].key.entity_id == "e4"


def test_coarse_keypoints_let_a_template_shown_small_vote_and_verify(tmp_path):
    """A template at ~150 px in a page (a grid cell) meets the keypoints its 200 px copy gave; without them
    (the fine 480 px description alone) it gets fewer votes and fewer inliers."""
    from PIL import Image

    big = {seed: textured(seed, (480, 360)) for seed in range(1, 7)}
    fine, both = DescriptorIndex(None), DescriptorIndex(None)
    described = {seed: feats.describe_entity(img) for seed, img in big.items()}
    for seed, f in described.items():
        assert f.coarse > 0 and f.fine + f.coarse == f.count
        assert (f.points[f.fine :] >= 0).all() and (f.points[f.fine :, 0] <= f.width).all() and (f.points[f.fine :, 1] <= f.height).all()
        key = ImageKey(f"e{seed}", f"sha{seed}", 0)
        fine.add(key, f.points[: f.fine], f.descriptors[: f.fine], f.width, f.height)
        added = both.add(key, f.points, f.descriptors, f.width, f.height, coarse=f.coarse)
        assert added <= both.per_image + both.per_image_coarse and added > fine.size / max(1, fine.images)
    page = Image.new("RGB", (900, 700), "white")
    for i, seed in enumerate((3, 42, 43, 44)):  # a 2×2 grid of 150 px cells, one indexed template in it
        page.paste(big[seed].resize((150, 112)) if seed == 3 else textured(seed, (150, 112)), (300 + (i % 2) * 156, 200 + (i // 2) * 118))
    q = feats.describe_query(page)
    votes_both = next((v.votes for v in both.vote(q.descriptors, top=6) if v.key.entity_id == "e3"), 0)
    votes_fine = next((v.votes for v in fine.vote(q.descriptors, top=6) if v.key.entity_id == "e3"), 0)
    assert votes_both > votes_fine
    f3 = described[3]
    fine_only = feats.Features(f3.points[: f3.fine], f3.descriptors[: f3.fine], f3.width, f3.height)
    assert feats.verify(q, f3).inliers > feats.verify(q, fine_only).inliers


def test_a_mirrored_picture_verifies_through_its_mirrored_keypoints():
    """The query's keypoints described mirrored (no second detection) verify a flipped template far better
    than the picture as it is (where only symmetric shapes match), and place it in the flipped picture."""
    from PIL import Image, ImageOps

    template = textured(80)
    page = Image.new("RGB", (900, 700), "white")
    page.paste(ImageOps.mirror(template).resize((300, 225)), (480, 220))
    q = feats.describe_query(page)
    stored = feats.describe_entity(template)
    direct = feats.verify(q, stored)
    mirrored = feats.mirrored_query(q)
    assert mirrored.count == q.count
    v = feats.verify(mirrored, stored)
    assert v.verified and v.inliers > 2 * direct.inliers and v.quad is not None and v.quad[:, 0].max() < 0.5 * page.width  # the flipped picture's left half


def test_several_descriptor_sets_vote_in_one_search_as_they_would_apart(tmp_path):
    index = _index(tmp_path)
    a, b, empty = _features(3).descriptors, _features(6).descriptors, np.zeros((0, 32), np.uint8)
    together = index.vote_many([a, empty, b], top=3)
    assert len(together) == 3 and together[1] == []
    assert together[0] == index.vote(a, top=3) and together[2] == index.vote(b, top=3)
    assert together[0][0].key.entity_id == "e3" and together[2][0].key.entity_id == "e6"
    # each set's voters index into that set
    assert max(together[2][0].voters) < len(b)


def test_a_search_split_over_query_threads_finds_the_same_votes(tmp_path):
    from retrieval.images.descriptor_index import PARAMS
    from retrieval.images.query_threads import QueryThreads

    index = _index(tmp_path, seeds=range(1, 13), ivf_from=1000)
    a = feats.describe_query(textured(3)).descriptors
    b = feats.describe_query(textured(9)).descriptors
    assert len(a) + len(b) >= 2 * PARAMS.split_rows
    jobs: list[int] = []

    class Counted(QueryThreads):
        def run(self, work):
            jobs.append(len(work))
            return super().run(work)

    threads = Counted(2)
    try:
        assert index.vote_many([a, b], top=5, threads=threads) == index.vote_many([a, b], top=5)
        assert jobs == [2]  # split in two parts
        assert index.vote_many([a[: PARAMS.split_rows // 2]], top=5, threads=threads) == index.vote_many([a[: PARAMS.split_rows // 2]], top=5)
        assert jobs == [2]  # too few rows to split: searched in the caller
    finally:
        threads.close()


def test_the_ivf_is_retrained_as_it_grows_and_answers_like_the_exact_one(tmp_path):
    from retrieval.images import descriptor_index as di

    index = _index(tmp_path, seeds=range(1, 13), ivf_from=1000)
    assert index.kind == "ivf" and len(index.retrains) >= 2
    # each retrain came once the index had grown retrain_growth× past the last, with the lists its size asks for
    sizes = [int(r["descriptors"]) for r in index.retrains]
    assert all(b >= di.PARAMS.retrain_growth * a for a, b in zip(sizes, sizes[1:]))
    assert all(int(r["lists"]) == index.lists_for(int(r["descriptors"])) for r in index.retrains)
    assert index.size < di.PARAMS.retrain_growth * sizes[-1]
    assert set(index.last_retrain) >= {"train_s", "fill_s", "locked_s"}
    exact = _index(tmp_path / "exact", seeds=range(1, 13))
    for seed in (2, 6, 12):
        q = feats.describe_query(textured(seed)).descriptors
        assert exact.vote(q)[0].key.entity_id == index.vote(q)[0].key.entity_id == f"e{seed}"
    # the index on disk is the retrained one, and loads back to the same answers
    assert index.save()
    again = DescriptorIndex(tmp_path / "desc", ivf_from=1000)
    assert again.load() and again.kind == "ivf" and again.size == index.size
    assert int(again._index.nlist) == int(index._index.nlist)
    assert again.vote(_features(5).descriptors)[0].key.entity_id == "e5"


def test_a_retrain_gives_the_same_index_whatever_order_the_images_came_in(tmp_path):
    """The same images added in another order (another crawl, a rebuild from the stored features) train the same
    centroids and fill the same lists in the same order."""
    import faiss

    seeds = list(range(1, 13))
    forward = _index(tmp_path / "a", seeds=seeds, ivf_from=10**9)
    backward = _index(tmp_path / "b", seeds=seeds[::-1], ivf_from=10**9)
    assert forward.kind == backward.kind == "flat" and forward.size == backward.size
    # the slots differ (added in another order): the retrain must not read them as the order
    assert forward._slots != backward._slots
    assert forward.retrain() and backward.retrain()
    a, b = forward._index, backward._index

    def centroids(ivf) -> np.ndarray:
        return faiss.vector_to_array(faiss.downcast_IndexBinary(ivf.quantizer).xb)

    def lists(index) -> list[list[tuple[str, bytes]]]:
        inv, out = index._index.invlists, []
        for lst in range(index._index.nlist):
            n = inv.list_size(lst)
            codes = faiss.rev_swig_ptr(inv.get_codes(lst), n * 32).copy().reshape(n, 32)
            ids = faiss.rev_swig_ptr(inv.get_ids(lst), n).copy()
            out.append([(index._slots[int(i)].entity_id, c.tobytes()) for i, c in zip(ids, codes)])
        return out

    assert a.nlist == b.nlist and np.array_equal(centroids(a), centroids(b))
    assert lists(forward) == lists(backward)
    # the votes: the same, but for neighbours at equal Hamming distance, which faiss orders by id (the slot)
    for seed in (2, 7):
        q = feats.describe_query(textured(seed)).descriptors
        ahead, behind = forward.vote(q, top=3), backward.vote(q, top=3)
        assert ahead[0].key == behind[0].key and ahead[0].key.entity_id == f"e{seed}"
        assert abs(ahead[0].votes - behind[0].votes) <= 0.05 * ahead[0].votes


def test_faiss_runs_in_the_calling_thread_of_every_thread_that_searches_adds_or_retrains(tmp_path):
    """OpenMP keeps its thread count per thread: a service's request threads and an indexing job's thread each
    run faiss in themselves, not only the first thread that ever searched."""
    import threading

    import faiss

    index = _index(tmp_path, seeds=range(1, 9), ivf_from=1000)
    index.vote(_features(2).descriptors)  # this thread is set: the others must set themselves
    f = _features(31)
    work = {
        "search": lambda: index.vote(_features(3).descriptors),
        "add": lambda: index.add(ImageKey("e31", "sha31", 0, "en"), f.points, f.descriptors, f.width, f.height),
        "retrain": index.retrain,
    }
    threads_after: dict[str, int] = {}

    def run(name: str) -> None:
        faiss.omp_set_num_threads(descriptor_support.SEARCH_THREADS + 3)  # what a fresh thread has on a machine with more cores
        work[name]()
        threads_after[name] = faiss.omp_get_max_threads()

    for name in work:
        worker = threading.Thread(target=run, args=(name,))
        worker.start()
        worker.join(timeout=300)
    assert threads_after == {name: descriptor_support.SEARCH_THREADS for name in work}


def test_a_retrain_lets_queries_run_and_keeps_what_was_written_meanwhile(tmp_path, monkeypatch):
    """The centroids are trained outside the lock: a query from another thread answers meanwhile (from the old
    index), and an image added meanwhile is in the retrained index."""
    import threading

    import faiss

    index = _index(tmp_path, seeds=range(1, 9), ivf_from=1000)
    train = faiss.IndexBinaryIVF.train
    seen: dict[str, object] = {}

    def train_and_meddle(self, x):
        q = _features(3).descriptors
        worker = threading.Thread(target=lambda: seen.setdefault("vote", index.vote(q)))
        worker.start()
        worker.join(timeout=120)
        seen["answered"] = not worker.is_alive()
        f = _features(30)
        index.add(ImageKey("e30", "sha30", 0, "en"), f.points, f.descriptors, f.width, f.height)  # no second retrain
        return train(self, x)

    monkeypatch.setattr(faiss.IndexBinaryIVF, "train", train_and_meddle)
    figures = index.retrain()
    monkeypatch.setattr(faiss.IndexBinaryIVF, "train", train)
    assert seen["answered"] and seen["vote"][0].key.entity_id == "e3"
    assert figures["descriptors"] == index.size and index.kind == "ivf"
    assert index.vote(_features(30).descriptors)[0].key.entity_id == "e30"
    assert index.vote(_features(3).descriptors)[0].key.entity_id == "e3"


def test_a_retrain_of_too_few_descriptors_leaves_the_index_as_it_is(tmp_path):
    index = DescriptorIndex(tmp_path / "desc")
    assert index.retrain() == {}  # nothing indexed
    f = _features(1)
    index.add(ImageKey("e1", "sha1", 0), f.points, f.descriptors, f.width, f.height, limit=20, coarse_limit=0)
    assert index.size == 20 and index.retrain() == {} and index.kind == "flat"
    assert index.vote(f.descriptors)[0].key.entity_id == "e1"


def test_probes_follow_the_index_lists_unless_given(tmp_path, monkeypatch):
    from retrieval.images import descriptor_index as di

    assert di.probes_for(di.PARAMS.nprobe_large_from - 1) == di.PARAMS.nprobe
    assert di.probes_for(di.PARAMS.nprobe_large_from) == di.PARAMS.nprobe_large < di.PARAMS.nprobe
    index = _index(tmp_path, seeds=range(1, 13), ivf_from=1000)
    lists = int(index._index.nlist)
    assert index.probes() == di.PARAMS.nprobe and index._index.nprobe == di.PARAMS.nprobe
    # an index with as many lists as the large-index rule asks for is searched with fewer probes
    monkeypatch.setattr(di, "PARAMS", dataclasses.replace(di.PARAMS, nprobe_large_from=lists))
    index.vote(_features(5).descriptors)
    assert index.probes() == di.PARAMS.nprobe_large and index._index.nprobe == di.PARAMS.nprobe_large
    # and loads back so; probes given to the index win over the rule
    assert index.save()
    again = DescriptorIndex(tmp_path / "desc", ivf_from=1000)
    assert again.load() and again._index.nprobe == di.PARAMS.nprobe_large
    fixed = DescriptorIndex(tmp_path / "desc", ivf_from=1000, nprobe=5)
    assert fixed.load() and fixed._index.nprobe == 5 and fixed.vote(_features(5).descriptors)[0].key.entity_id == "e5"


def test_a_large_retrain_fills_its_lists_through_a_coarse_quantizer_and_queries_probe_the_exact_one(tmp_path, monkeypatch):
    """From fill_coarse_from lists a retrain assigns codes through a coarse IVF over its centroids: nearly every
    code still goes to a centroid at the least distance, every code is kept, and the index that queries search
    probes through the exact quantizer (each indexed code finds itself)."""
    import faiss

    from retrieval.images import descriptor_index as di

    rng = np.random.default_rng(5)
    prototypes = rng.integers(0, 256, (300, di.CODE_BYTES), dtype=np.uint8)

    def codes(n: int) -> np.ndarray:  # clustered like real descriptors: a prototype with ~25 of 256 bits flipped
        flips = np.packbits(rng.random((n, di.CODE_BYTES * 8)) < 0.1, axis=1)
        return prototypes[rng.integers(0, len(prototypes), n)] ^ flips

    def build(coarse_from: int) -> tuple[DescriptorIndex, list[int]]:
        built = []
        real = di.coarse_quantizer
        monkeypatch.setattr(di, "PARAMS", dataclasses.replace(di.PARAMS, fill_coarse_from=coarse_from))
        monkeypatch.setattr(di, "coarse_quantizer", lambda exact, nlist: built.append(nlist) or real(exact, nlist))
        index = DescriptorIndex(None, ivf_from=10**9, per_image_coarse=0)
        local = np.random.default_rng(9)
        for i in range(80):
            points = local.random((256, 2)) * (400, 300)
            index.add(ImageKey(f"e{i}", f"sha{i}", 0, "en"), points.astype(np.float32), all_codes[i], 400, 300)
        assert index.retrain()
        return index, built

    all_codes = [codes(256) for _ in range(80)]
    index, built = build(100)
    nlist = int(index._index.nlist)
    assert built == [nlist] and nlist >= 100 and index.size == 80 * 256
    quantizer = faiss.downcast_IndexBinary(index._index.quantizer)
    assert isinstance(quantizer, faiss.IndexBinaryFlat) and quantizer.ntotal == nlist  # queries probe exactly
    held, _ = index._all_codes()
    inv, at_least = index._index.invlists, []
    for lst in range(nlist):
        n = inv.list_size(lst)
        if n:
            rows = faiss.rev_swig_ptr(inv.get_codes(lst), n * di.CODE_BYTES).copy().reshape(n, di.CODE_BYTES)
            nearest, _ = quantizer.search(rows, 1)
            own = quantizer.reconstruct(lst)
            at_least.append(np.unpackbits(rows ^ own, axis=1).sum(axis=1) == nearest[:, 0])
    assert len(held) == 80 * 256 and np.mean(np.concatenate(at_least)) >= 0.95
    sample = np.concatenate(all_codes)[::41]
    dist, _ = index._index.search(sample, 1)
    assert np.mean(dist[:, 0] == 0) >= 0.98
    # below fill_coarse_from the fill compares every centroid, as before
    exact_index, built = build(10**6)
    assert built == [] and int(exact_index._index.nlist) == nlist
