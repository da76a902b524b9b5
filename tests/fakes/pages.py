"""A small page corpus (JSONL page records, as `kar corpus import` reads them) for search and import tests.

Fourteen short entry bodies written for the tests (English and Chinese), enough pages for each
query to have a background (retrieval.websearch.params.HybridParams.k_background = 10).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PAGES: list[dict[str, Any]] = [
    {"url": "https://knowyourmeme.com/memes/doge", "title": "Doge", "site": "knowyourmeme",
     "text": "Doge is a meme of Kabosu the Shiba Inu with colourful Comic Sans phrases such as such wow, much meme, very culture. It spread on Tumblr and Reddit in 2013."},
    {"url": "https://knowyourmeme.com/memes/distracted-boyfriend", "title": "Distracted Boyfriend", "site": "knowyourmeme",
     "text": "Distracted Boyfriend is a 2015 stock photo by Antonio Guillem of a man looking at another woman while his girlfriend glares at him. Captions label the three people."},
    {"url": "https://knowyourmeme.com/memes/potion-seller", "title": "Potion Seller", "site": "knowyourmeme",
     "text": "Potion Seller is a 2010 animated sketch by Tom Ridgewell in which a knight asks a merchant for his strongest potions and the merchant refuses: you can't handle my strongest potions."},
    {"url": "https://knowyourmeme.com/memes/trollface", "title": "Trollface", "site": "knowyourmeme",
     "text": "Trollface is a rage comic face drawn in MS Paint in 2008 by Carlos Ramirez, with a wide mischievous grin, used to mark trolling on forums and imageboards."},
    {"url": "https://knowyourmeme.com/memes/nyan-cat", "title": "Nyan Cat", "site": "knowyourmeme",
     "text": "Nyan Cat is a 2011 animated GIF of a pixel-art cat with a Pop-Tart body flying through space and leaving a rainbow trail, set to a Japanese pop song."},
    {"url": "https://knowyourmeme.com/memes/rickroll", "title": "Rickroll", "site": "knowyourmeme",
     "text": "Rickrolling is a bait-and-switch prank: a link that promises something else leads to the music video of Rick Astley's 1987 song Never Gonna Give You Up."},
    {"url": "https://knowyourmeme.com/memes/stonks", "title": "Stonks", "site": "knowyourmeme",
     "text": "Stonks is a deliberate misspelling of stocks shown beside Meme Man, a 3D-rendered bald head, in front of a rising market chart, mocking bad financial decisions."},
    {"url": "https://knowyourmeme.com/memes/grumpy-cat", "title": "Grumpy Cat", "site": "knowyourmeme",
     "text": "Grumpy Cat was Tardar Sauce, a cat from Arizona whose permanently frowning face, caused by feline dwarfism, became an image macro for pessimistic captions in 2012."},
    {"url": "https://knowyourmeme.com/memes/this-is-fine", "title": "This Is Fine", "site": "knowyourmeme",
     "text": "This Is Fine is a two-panel excerpt of KC Green's 2013 webcomic Gunshow in which a dog in a hat sits calmly in a burning room and says this is fine."},
    {"url": "https://knowyourmeme.com/memes/success-kid", "title": "Success Kid", "site": "knowyourmeme",
     "text": "Success Kid is a 2007 photo of a toddler on a beach clenching a fistful of sand with a determined face, captioned with small everyday victories."},
    {"url": "https://zh.moegirl.org.cn/王司徒", "title": "王司徒", "site": "moegirl",
     "text": "王司徒（王朗）出自《三国演义》第九十三回，诸葛亮阵前骂死王朗：我从未见过有如此厚颜无耻之人。后成为鬼畜素材。"},
    {"url": "https://zh.moegirl.org.cn/鲁迅说过", "title": "鲁迅说过", "site": "moegirl",
     "text": "“鲁迅说过”是网络上把编造的名言安到鲁迅头上的梗，常见回应是鲁迅：我没说过这句话。"},
    {"url": "https://zh.moegirl.org.cn/真香", "title": "真香", "site": "moegirl",
     "text": "真香出自综艺《变形计》，王境泽先说我就是饿死也不吃你们一点东西，随后端起饭碗说真香，用来嘲讽打脸的行为。"},
    {"url": "https://zh.moegirl.org.cn/葛优躺", "title": "葛优躺", "site": "moegirl",
     "text": "葛优躺出自情景喜剧《我爱我家》中葛优瘫坐在沙发上的剧照，用来形容颓废放松的生活状态。"},
]


def write_pages(path: Path, pages: list[dict[str, Any]] | None = None) -> Path:
    """Write pages as JSONL (one page a line)."""
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in (pages or PAGES)), "utf-8")
    return path
