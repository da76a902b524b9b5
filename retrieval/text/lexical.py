"""Embedder-independent lexical index: our zh/en tokenizer + Qdrant's BM25 weighting.

Tokens (:func:`lexical_tokens`), after NFKC and case folding:

- Latin (and other non-CJK) words: ``doge``, ``such``, ``wow``;
- CJK characters as unigrams and bigrams inside each CJK run: ``诸``, ``葛``, ``诸葛`` ...;
- Latin character 4-grams over each run of Latin letters/digits with spaces and punctuation
  removed (prefixed ``~``), so that the n-grams cross word boundaries: OCR that drops the
  spaces (``SUCHWOW``) shares ``~such ~uchw ~chwo ~hwow`` with ``such wow``.

Why our own tokenizer: qdrant-edge 0.9's ``Bm25`` has word, whitespace, prefix and
multilingual (dictionary word segmentation for Chinese) tokenizers, but none emits CJK
character n-grams (robust to OCR errors and unsegmented names) or Latin character n-grams
across word boundaries.  What it does have we use: the tokens are joined by spaces and given
to ``qdrant_edge.Bm25`` with its ``Whitespace`` tokenizer (no stop words, no stemming, no
lower-casing: the tokens are already normalised), which hashes them to sparse indices and
applies BM25's term-frequency saturation and length normalisation (``k``, ``b``,
``avg_len``) at indexing time; queries weigh each distinct token 1.0.  The collection's
sparse vector carries Qdrant's IDF modifier, so the engine supplies the IDF at query time:
score = Σ_{t ∈ q ∩ d} idf(t) · tf_bm25(t, d), in both store backends.

The same module holds the caption route's matching (:func:`catchphrases` of an entity and
:func:`caption_score` of OCR lines against them) and the word knowledge the exact and caption
routes use: :func:`name_in_text` finds a name in a text only where jieba's segmentation of
the text has word boundaries (``天天`` is not in ``今天天气``), and :func:`commonness` says how
common a name is as an ordinary word (wordfreq's Zipf frequency, 0 for a word it has never seen,
about 5 for ``老板`` or ``problem``; remembered in the data directory: :mod:`retrieval.text.word_frequency`); a name at least :data:`COMMON_ZIPF` common needs
corroboration before its appearance in a sentence counts (:func:`needs_corroboration`).
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SparseVec = dict[int, float]

#: BM25 parameters: the usual k and b; avg_len is the mean token count of the sample's lexical texts.
BM25_K = 1.2
BM25_B = 0.75
BM25_AVG_LEN = 225.0
NGRAM = 4
#: OCR text longer than this is cut before tokenizing (the cue routes cut at 1000 characters too).
MAX_LEXICAL_CHARS = 4000
#: Caption lines shorter than this (after normalisation) are ignored: too short to identify anything.
MIN_CAPTION_CJK = 4
MIN_CAPTION_LATIN = 8
#: Fuzzy containment below this is no match (one wrong OCR character in five, or two in ten, still passes;
#: 0.75 let "such meme" match unrelated "… meme" aliases).
MIN_CONTAINMENT = 0.8
#: The shorter side must be at least this share of the longer one (a short alias inside a long
#: unrelated sentence, or a line that is a small piece of a long catchphrase, is no caption match).
MIN_COVERAGE = 0.4

_CJK_CHAR = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK_CHAR}]+")
_IS_CJK = re.compile(f"[{_CJK_CHAR}]")
_WORD = re.compile(rf"[^\W_{_CJK_CHAR}]+")
_ALNUM_RUN = re.compile(rf"[^\W_{_CJK_CHAR}]+(?:[\W_]+[^\W_{_CJK_CHAR}]+)*")
_NOT_ALNUM = re.compile(r"[\W_]+")
_QUOTED = re.compile(
    r"“([^“”]{2,120})”|「([^「」]{2,120})」|『([^『』]{2,120})』|‘([^‘’]{2,120})’|\"([^\"]{2,120})\"|(?<![A-Za-z])'([^']{2,120})'(?![A-Za-z])"
)


#: Zipf frequency (wordfreq: log10 of occurrences per billion words) from which a name counts as an
#: ordinary word: 3.5 is about one use in 300,000 words (天天 4.8, 老板 5.0, 火车 4.7, 烧麦 3.1,
#: 诸葛亮 3.8, 鲁迅 4.2; yes 5.5, spirit 4.8, loss 5.1, doge 3.0, stonks 1.3).
COMMON_ZIPF = 3.5


def _jieba() -> Any:
    from retrieval.text.jieba_dict import tokenizer  # its dictionary cached in the data directory

    return tokenizer()


@lru_cache(maxsize=4096)
def word_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Character spans of the words of a normalised text: jieba's segmentation of each CJK run,
    Latin/digit words as they are (spaces and punctuation are not words)."""
    spans: list[tuple[int, int]] = []
    for m in re.finditer(rf"[{_CJK_CHAR}]+|[^\W_{_CJK_CHAR}]+", text):
        if _IS_CJK.match(m.group()):
            pos = m.start()
            for w in _jieba().cut(m.group(), HMM=False):
                spans.append((pos, pos + len(w)))
                pos += len(w)
        else:
            spans.append((m.start(), m.end()))
    return tuple(spans)


def name_in_text(name_key: str, text_key: str) -> bool:
    """Whether a (normalised) name occurs in a (normalised) text as whole words: it starts where a
    word of the text starts and ends where one ends (jieba for CJK, word boundaries for Latin)."""
    if not name_key or name_key not in text_key:
        return False
    spans = word_spans(text_key)
    starts = {a for a, _ in spans}
    ends = {b for _, b in spans}
    start = text_key.find(name_key)
    while start >= 0:
        if start in starts and start + len(name_key) in ends:
            return True
        start = text_key.find(name_key, start + 1)
    return False


@lru_cache(maxsize=65536)
def commonness(name: str) -> float:
    """How common a name is as an ordinary word or phrase: wordfreq's Zipf frequency in the name's script
    (Chinese for CJK names, English otherwise; a Latin phrase as its words' frequencies multiplied);
    0.0 for a name wordfreq has never seen.  wordfreq's answers are remembered in the data directory
    (:mod:`retrieval.text.word_frequency`), so a process asking about names asked before does not import it."""
    from retrieval.text.word_frequency import zipf_frequency

    key = normalize(name).strip()
    if not key:
        return 0.0
    if _IS_CJK.search(key):
        return float(zipf_frequency(key, "zh"))
    words = _WORD.findall(key)
    if len(words) <= 1:
        return float(zipf_frequency(key, "en"))
    # a phrase: the frequency of its words together as if independent (Zipf is log10 per 10⁹ words),
    # not wordfreq's estimate for a phrase (about that of its rarest word): "such wow" is no ordinary phrase
    return max(0.0, sum(float(zipf_frequency(w, "en")) for w in words) - 9.0 * (len(words) - 1))


#: digits OCR reads in place of look-alike letters (rapidocr: ``5TONKS`` for ``STONKS``, ``W0W`` for ``WOW``);
#: ``1`` is read for both ``l`` and ``i``
_OCR_DIGIT_LETTERS: tuple[dict[str, str], ...] = (
    {"0": "o", "1": "l", "2": "z", "5": "s", "6": "g", "8": "b"},
    {"0": "o", "1": "i", "2": "z", "5": "s", "6": "g", "8": "b"},
)
_MIXED_WORD = re.compile(rf"[^\W_{_CJK_CHAR}]*(?:[a-z][^\W_{_CJK_CHAR}]*\d|\d[^\W_{_CJK_CHAR}]*[a-z])[^\W_{_CJK_CHAR}]*")


def ocr_letter_readings(text_key: str) -> list[str]:
    """The other readings of a normalised OCR text whose words mix letters and digits: each digit that
    OCR confuses with a letter read as that letter (``5tonks`` → ``stonks``).  Words of digits alone
    (``2024``, ``area 51``) are left as they are; [] when no word mixes the two."""
    if not _MIXED_WORD.search(text_key):
        return []
    readings = []
    for table in _OCR_DIGIT_LETTERS:
        folded = _MIXED_WORD.sub(lambda m: "".join(table.get(c, c) for c in m.group()), text_key)
        if folded != text_key and folded not in readings:
            readings.append(folded)
    return readings


#: jieba dictionary tags of proper nouns and non-words: a name tagged otherwise is a word of the language
#: (nr person, nrt/nrfg transliterated or full names, ns place, nt organisation, nz other proper noun)
PROPER_TAGS = frozenset({"nr", "nrt", "nrfg", "ns", "nt", "nz", "x", "eng"})


def _word_tags() -> Any:
    from retrieval.text.jieba_dict import word_tags  # jieba.posseg's table, without parsing dict.txt each start

    return word_tags()


@lru_cache(maxsize=65536)
def is_dictionary_word(name: str) -> bool:
    """Whether a Chinese name is an ordinary word of the language: an entry of jieba's dictionary tagged as a
    common word (noun, verb, adjective, time word, idiom ...), not as a proper noun (:data:`PROPER_TAGS`).
    Dishes, objects and everyday phrases (东坡肉, 烧麦, 火车, 老板) are, however rare wordfreq finds them;
    person and character names (诸葛亮, 鲁迅, 孙悟空) and names the dictionary lacks (琪露诺) are not."""
    key = normalize(name).strip()
    if not key or not _IS_CJK.search(key) or not all(_IS_CJK.match(c) for c in key):
        return False
    tag = _word_tags().get(key)
    return tag is not None and tag not in PROPER_TAGS


def needs_corroboration(name: str) -> bool:
    """A name that is also a common word (:data:`COMMON_ZIPF`, or a Chinese dictionary word:
    :func:`is_dictionary_word`): found inside a sentence it is no evidence alone."""
    return commonness(name) >= COMMON_ZIPF or is_dictionary_word(name)


def quoted_spans(text: str) -> list[str]:
    """The quoted parts of a text (“…”, 「…」, 『…』, ‘…’, "…", '…')."""
    return [next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)]


def normalize(text: str) -> str:
    """NFKC (full width → half width) and case folding."""
    return unicodedata.normalize("NFKC", text).casefold()


def squash(text: str) -> str:
    """Caption key: normalised, with spaces, punctuation, symbols and control characters removed."""
    return _NOT_ALNUM.sub("", normalize(text))


def lexical_tokens(text: str) -> list[str]:
    """Tokens of a text for the lexical index (words, CJK uni/bigrams, Latin 4-grams across words)."""
    text = normalize(text[:MAX_LEXICAL_CHARS])
    tokens: list[str] = []
    for run in _CJK_RUN.findall(text):
        tokens.extend(run)
        tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
    tokens.extend(_WORD.findall(text))
    for run in _ALNUM_RUN.findall(text):
        flat = _NOT_ALNUM.sub("", run)
        if len(flat) >= NGRAM and not flat.isdigit():
            tokens.extend("~" + flat[i : i + NGRAM] for i in range(len(flat) - NGRAM + 1))
    return tokens


def lexical_text(entity: Any) -> str:
    """What an entity is indexed by: name, aliases, source work, cultural usage, description."""
    return "\n".join(
        x for x in (entity.name, " ; ".join(entity.aliases), entity.source_work, entity.cultural_usage, entity.description) if x
    )


@lru_cache(maxsize=1)
def _bm25() -> Any:
    import qdrant_edge as qe

    config = qe.Bm25Config(
        k=BM25_K,
        b=BM25_B,
        avg_len=BM25_AVG_LEN,
        tokenizer=qe.TokenizerType.Whitespace,
        lowercase=False,
        stopwords=qe.StopwordsSet(languages=set(), custom=set()),
        stemmer=qe.DisabledStemmer(),
    )
    return qe.Bm25(config)


def _sparse(vec: Any) -> SparseVec:
    return {int(i): float(v) for i, v in zip(vec.indices, vec.values)}


def encode_document(text: str) -> SparseVec:
    """BM25 document weights (tf saturation + length normalisation) of a text, keyed by token hash."""
    tokens = lexical_tokens(text)
    return _sparse(_bm25().embed_document(" ".join(tokens))) if tokens else {}


def encode_documents(texts: Iterable[str]) -> list[SparseVec]:
    """:func:`encode_document` for each text."""
    return [encode_document(t) for t in texts]


def encode_query(text: str) -> SparseVec:
    """Query weights: 1.0 per distinct token (the engine multiplies in the IDF)."""
    tokens = lexical_tokens(text)
    return _sparse(_bm25().embed_query(" ".join(tokens))) if tokens else {}


def idf_single(n_entities: int) -> float:
    """Qdrant's IDF of a term found in exactly one of ``n_entities`` entities."""
    n = max(n_entities, 1)
    return math.log(1.0 + (n - 1 + 0.5) / (1 + 0.5))


def normalized_bm25(score: float, query: SparseVec, n_entities: int) -> float:
    """BM25 score as a share of a perfect rare-term match: min(1, score / (|q| · idf_single(N)))."""
    if not query or score <= 0:
        return 0.0
    return min(1.0, score / (len(query) * idf_single(n_entities)))


# -- caption route ------------------------------------------------------------------------------
def catchphrases(entity: Any) -> list[str]:
    """An entity's catchphrases: the quoted lines of its cultural usage, its aliases and its name."""
    quoted = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(entity.cultural_usage or "")]
    out: dict[str, str] = {}
    for p in (*quoted, *entity.aliases, entity.name):
        if p.strip():
            out.setdefault(squash(p), p.strip())
    return [p for k, p in out.items() if k]


#: a whole OCR line equal to a catchphrase counts when its key has at least this many CJK characters (or,
#: without CJK, this many letters/digits): "真香", "yes", "sus" do; "ok", "f", "卷" are too short to name anything
MIN_WHOLE_LINE_CJK = 2
MIN_WHOLE_LINE_LATIN = 3


def whole_lines(ocr_text: str, max_lines: int = 50) -> set[str]:
    """Squashed keys of the OCR lines taken whole: case, spaces and punctuation drop out, so ``Yes.``,
    ``YES`` and ``yes!`` are one key, and an attribution line ``—— 鲁迅`` is ``鲁迅``; each line's OCR
    digit readings (``5TONKS`` → ``stonks``) too.  Lines too short to name anything are left out
    (:data:`MIN_WHOLE_LINE_CJK`, :data:`MIN_WHOLE_LINE_LATIN`).  A line equal to a catchphrase or an
    alias is how memes quote; the same words inside a sentence are no such line."""
    keys: set[str] = set()
    for raw in ocr_text[:MAX_LEXICAL_CHARS].splitlines()[:max_lines]:
        for key in (squash(raw), *(squash(r) for r in ocr_letter_readings(normalize(raw)))):
            cjk = len(_IS_CJK.findall(key))
            if cjk >= MIN_WHOLE_LINE_CJK or (cjk == 0 and len(key) >= MIN_WHOLE_LINE_LATIN):
                keys.add(key)
    return keys


def long_enough(key: str) -> bool:
    """Whether a squashed line is long enough to count: ≥ 4 CJK characters, or ≥ 8 Latin characters."""
    cjk = len(_IS_CJK.findall(key))
    return cjk >= MIN_CAPTION_CJK or (cjk == 0 and len(key) >= MIN_CAPTION_LATIN) or (cjk and len(key) - cjk >= MIN_CAPTION_LATIN)


def caption_lines(ocr_text: str, max_lines: int = 50) -> list[str]:
    """Squashed caption keys to match: each OCR line, each pair of adjacent lines, and all lines joined."""
    lines = [squash(x) for x in ocr_text[:MAX_LEXICAL_CHARS].splitlines()]
    lines = [x for x in lines if x][:max_lines]
    keys = list(lines)
    keys += [a + b for a, b in zip(lines, lines[1:])]
    if len(lines) > 2:
        keys.append("".join(lines))
    return [k for k in dict.fromkeys(keys) if long_enough(k)]


_FUZZ_LOCK = threading.Lock()
_fuzz: Any = None


def fuzz_module() -> Any:
    """``rapidfuzz.fuzz``, imported once under a lock.  rapidfuzz's package imports its submodules in a
    cycle: two threads importing it at once (grounding and its warm-up thread, :mod:`retrieval.warmup`)
    made Python's import-deadlock check hand one of them a partially initialised module
    ("cannot import name 'WRatio' from partially initialized module 'rapidfuzz.fuzz'")."""
    global _fuzz
    if _fuzz is None:
        with _FUZZ_LOCK:
            if _fuzz is None:
                from rapidfuzz import fuzz

                _fuzz = fuzz
    return _fuzz


def containment(short: str, long: str) -> float:
    """How well ``short`` occurs inside ``long``: 1.0 as a substring, else rapidfuzz's ``partial_ratio``
    (the best-aligned substring of ``long``; one substituted character in n costs 1/n)."""
    if short in long:
        return 1.0
    return fuzz_module().partial_ratio(short, long) / 100.0


@dataclass
class CaptionMatch:
    """The best OCR line / catchphrase pair of one entity."""

    score: float
    line: str
    phrase: str


def caption_score(lines: Sequence[str], phrases: Sequence[str]) -> CaptionMatch | None:
    """Best normalised containment of an OCR line in a catchphrase or of a catchphrase in a line.

    Only pairs whose shorter side is long enough (:func:`long_enough`) and covers at least
    MIN_COVERAGE of the longer side count, and a match needs containment ≥ MIN_CONTAINMENT.
    The score is that containment times min(1, 2·len(shorter) / len(longer)): a verbatim line
    (or one covering at least half of the catchphrase, or a catchphrase filling at least half of
    the line) scores 1.0, a short alias inside a long unrelated sentence nothing.
    """
    best: CaptionMatch | None = None
    lines = sorted(lines, key=len, reverse=True)  # the longest matching line is reported
    for phrase in phrases:
        pkey = squash(phrase)
        if not pkey:
            continue
        for line in lines:
            short, long = (line, pkey) if len(line) <= len(pkey) else (pkey, line)
            if not long_enough(short) or len(short) < MIN_COVERAGE * len(long) or not _shares_bigram(short, long):
                continue
            c = containment(short, long)
            if c < MIN_CONTAINMENT:
                continue
            if c < 1.0 and short == pkey and not _distinct_words_present(phrase, line):
                continue
            if short == pkey and short != long and _IS_CJK.search(pkey) and needs_corroboration(phrase):
                continue  # an ordinary word (天气预报) inside a longer line: the exact route weighs it
            score = c * min(1.0, 2.0 * len(short) / len(long))
            if best is None or score > best.score:
                best = CaptionMatch(score, line, phrase)
                if score == 1.0:
                    return best
    return best


def _distinct_words_present(phrase: str, line: str) -> bool:
    """For a catchphrase found only approximately inside a longer line: it needs a Latin word that is no
    ordinary word (Zipf < COMMON_ZIPF, ≥ 3 letters), and each such word must itself occur in the line,
    approximately (≥ 0.75): the shared part must not be ordinary words alone ("Gru's Presentation" is
    not in "… the presentation", "Are you OK" not in "where are you")."""
    fuzz = fuzz_module()

    words = [w for w in _WORD.findall(normalize(phrase)) if not _IS_CJK.search(w)]
    if not words:
        return True
    distinct = [w for w in words if len(w) >= 3 and commonness(w) < COMMON_ZIPF]
    if not distinct:  # ordinary words only ("Are you OK"): an approximate match is no evidence
        return False
    return all(w in line or fuzz.partial_ratio(w, line) >= 75 for w in distinct)


def _shares_bigram(a: str, b: str) -> bool:
    return any(a[i : i + 2] in b for i in range(0, max(len(a) - 1, 1), 2))
