"""The cross-lingual pass of the visual route (retrieval/crosslingual.py) on the real sample CultureBase
with the bundled multilingual-e5-small: descriptions in one language of entities recorded in the other."""

from __future__ import annotations

import pytest

from retrieval.grounding.crosslingual import CrossLingualPass, query_language, reference_texts
from retrieval.grounding import PARAMS, EntityGrounder, GroundingCues


@pytest.fixture(scope="module")
def grounder(sample_kb):
    return EntityGrounder(sample_kb.store, sample_kb.embedder)


# written for this test (not the bench's queries); without the pass the right entity ranked 2nd to 84th
@pytest.mark.parametrize(
    "text, expected",
    [
        ("a bald man sprawled lazily on a couch, a still from a 1990s Chinese family sitcom", "葛优躺"),
        ("a stern Chinese author with a short moustache, a writer of the 1920s", "鲁迅"),
        ("一个男人和女朋友走在街上，却回头看路过的另一个女人", "Distracted Boyfriend"),
        ("一个女人指着一只坐在餐桌前的猫大喊大叫", "Woman Yelling at a Cat"),
        ("一只表情暴躁、嘴角向下的猫", "Grumpy Cat"),
    ],
)
def test_description_in_the_other_language_ranks_the_entity_first(grounder, text, expected):
    result = grounder.ground(GroundingCues(visual_handle=text))
    top = result.candidates[0]
    assert top.entity.name == expected, [c.entity.name for c in result.candidates[:5]]
    assert top.route == "visual"
    assert top.entity.language != query_language(text)


def test_the_pass_is_what_ranks_it_first(sample_kb):
    text = "一个女人指着一只坐在餐桌前的猫大喊大叫"
    plain = EntityGrounder(sample_kb.store, sample_kb.embedder, crosslingual=False).ground(GroundingCues(visual_handle=text))
    names = [c.entity.name for c in plain.candidates]
    assert "Woman Yelling at a Cat" not in names[:3]


@pytest.mark.parametrize("text", ["my train was late again this morning", "今天加班到很晚，回家只想睡觉", "我们周末去爬山吧"])
def test_ordinary_captions_still_ground_nothing(grounder, text):
    assert grounder.search_text(text).candidates  # something is scored ...
    assert grounder.ground(GroundingCues.from_text(text)).hits == []  # ... but nothing passes the accept rule


def test_same_language_entities_are_left_to_the_plain_search(sample_kb):
    """A Chinese query against Chinese entities only: no other language, nothing for the pass to score."""
    xl = CrossLingualPass(sample_kb.embedder)
    vector = sample_kb.embedder.encode_queries(["瘫在沙发上的光头男人"]).dense[0]
    assert xl.score(sample_kb.store.entities, "visual", "瘫在沙发上的光头男人", vector, ["zh"], {}, 20) == []
    hits = xl.score(sample_kb.store.entities, "visual", "瘫在沙发上的光头男人", vector, ["zh", "en"], {}, 20)
    assert hits and all(h.entity.language == "en" for h in hits)
    # the K-th best candidate of the other language stands at height 0, better ones above it
    heights = sorted((h.height for h in hits), reverse=True)
    assert heights[9] == pytest.approx(0.0, abs=1e-9) and heights[0] > 0


def test_mapped_scores_live_on_the_plain_cosine_scale(sample_kb):
    """The map back to the plain scale is fitted on same-language reference passages: an English query's
    mapped score of a Chinese entity is a cosine-like number near the plain cosines of English entities."""
    text = "a bald man sprawled lazily on a couch"
    vector = sample_kb.embedder.encode_queries([text]).dense[0]
    hits = CrossLingualPass(sample_kb.embedder).score(sample_kb.store.entities, "visual", text, vector, ["zh", "en"], {}, 20)
    plain = [h.score for h in sample_kb.store.entities.search("visual", vector, 20, None)]
    assert max(h.score for h in hits) < 1.0
    assert abs(max(h.score for h in hits) - max(plain)) < 0.1


def test_query_language_by_script():
    assert query_language("葛优躺") == "zh"
    assert query_language("a lazy man") == "en"
    assert query_language("ドラえもん") == "ja"
    assert query_language("대박") == "ko"


def test_reference_texts_are_parallel_and_large_enough():
    refs = reference_texts()
    assert set(refs) >= {"en", "zh"}
    assert len(refs["en"]) == len(refs["zh"]) >= 2 * PARAMS.k_hub
    assert all(query_language(t) == "zh" for t in refs["zh"]) and all(query_language(t) == "en" for t in refs["en"])


class _CountingHashEmbedder:
    """Hashed trigrams (fast), counting the texts it embeds."""

    name = "test-crosslingual-cache"
    dim = 64

    def __init__(self) -> None:
        from tests.crawlers.hash_embedder import HashEmbedder

        self.inner = HashEmbedder()
        self.texts = 0

    def encode_queries(self, texts):
        self.texts += len(texts)
        return self.inner.encode_queries(texts)

    def encode_documents(self, texts):
        self.texts += len(texts)
        return self.inner.encode_documents(texts)


def test_reference_embeddings_are_kept_on_disk_between_processes(tmp_path, monkeypatch):
    import retrieval.grounding.crosslingual as xl

    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "data"))
    first = _CountingHashEmbedder()
    refs = xl.language_references(first)
    n = sum(len(t) for t in reference_texts().values())
    assert first.texts == 2 * n and list((tmp_path / "data" / "cache").glob("crosslingual-*.npz"))
    monkeypatch.delitem(xl._CACHE, (first.name, first.dim))  # a new process: memory cache empty
    second = _CountingHashEmbedder()
    again = xl.language_references(second)
    assert second.texts == 0  # read from disk
    for lang in refs:
        assert again[lang].mean_query == pytest.approx(refs[lang].mean_query)
        assert again[lang].passages_hub == pytest.approx(refs[lang].passages_hub)
    monkeypatch.delitem(xl._CACHE, (first.name, first.dim))
    for f in (tmp_path / "data" / "cache").glob("*.npz"):
        f.write_bytes(b"not an npz")  # a damaged cache file: embedded again, not an error
    third = _CountingHashEmbedder()
    xl.language_references(third)
    assert third.texts == 2 * n
