"""A small CultureBase with a crawled-pages corpus, for search and CLI tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "culturebase_sample.jsonl"
KEEP = ("诸葛亮", "王司徒", "鲁迅", "Doge", "Distracted Boyfriend", "Pepe the Frog")

CORPUS: list[dict[str, Any]] = [
    {"id": "moegirl-wangsitu#0", "site": "moegirl", "url": "https://zh.moegirl.org.cn/王司徒", "title": "王司徒 - 萌娘百科",
     "text": "王司徒（王朗）出自《三国演义》第九十三回，诸葛亮阵前骂死王朗：我从未见过有如此厚颜无耻之人。后成为鬼畜素材。"},
    {"id": "moegirl-luxun#0", "site": "moegirl", "url": "https://zh.moegirl.org.cn/鲁迅", "title": "鲁迅 - 萌娘百科",
     "text": "“鲁迅说过”是网络上把编造的名言安到鲁迅头上的梗，鲁迅：我没说过这句话。"},
    {"id": "kym-doge#0", "site": "knowyourmeme", "url": "https://knowyourmeme.com/memes/doge", "title": "Doge | Know Your Meme",
     "text": "Doge is a meme of Kabosu the Shiba Inu with colourful Comic Sans phrases such as such wow, much meme, very culture."},
    {"id": "kym-distracted#0", "site": "knowyourmeme", "url": "https://knowyourmeme.com/memes/distracted-boyfriend",
     "title": "Distracted Boyfriend | Know Your Meme",
     "text": "Distracted Boyfriend is a 2015 stock photo by Antonio Guillem of a man looking at another woman while his girlfriend glares."},
]


def sample_records(names: tuple[str, ...] = KEEP) -> list[dict[str, Any]]:
    out = []
    for line in SAMPLE.read_text("utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            if rec["name"] in names:
                out.append(rec)
    return out


def build_corpus_kb(path: Path, embedder: Any) -> Path:
    """Embed a few sample entities plus :data:`CORPUS` into a new CultureBase at ``path``."""
    from culturebase.settings import Settings
    from retrieval.dump_import import record_to_entity
    from retrieval.knowledge_base import KnowledgeBase

    with KnowledgeBase.open(Settings(kb_path=path), embedder=embedder) as kb:
        kb.add([record_to_entity(r) for r in sample_records()])
        kb.add_corpus_chunks(CORPUS)
    return path
