"""A tiny randomly initialised model in bge-m3's on-disk format, built offline for tests.

A SentencePiece tokenizer is trained on a few hundred generated zh/en lines, wrapped as an
XLM-RoBERTa tokenizer, and paired with a 2-layer XLMRobertaModel plus the
``colbert_linear.pt`` / ``sparse_linear.pt`` heads that ``BGEM3FlagModel`` loads, so
FlagEmbedding's real inference path (dense and sparse) runs without any download.
"""

from __future__ import annotations

import random
from pathlib import Path

EN_WORDS = (
    "doge shiba dog meme frog pepe sad happy cat yelling woman boyfriend distracted drake "
    "rick roll stonks fine fire room troll face chad brain galaxy harold pain success kid "
    "grumpy nyan pikachu surprised pigeon butterfly change mind internet image macro reaction "
    "anime character game novel strategist fan wise kingdom three romance moon cake spicy"
).split()
ZH_WORDS = (
    "诸葛亮 孔明 卧龙 三国演义 王司徒 厚颜无耻 蔡徐坤 鸡你太美 篮球 孙笑川 原神 派蒙 明日方舟 "
    "东方 博丽灵梦 鲁迅 我没说过 奥利给 真香 打工人 躺平 芜湖 起飞 熊猫头 表情包 梗 动漫 角色 游戏 小说"
).split()


def _lines(n: int = 600, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = EN_WORDS if i % 2 else ZH_WORDS
        k = rng.randint(3, 10)
        sep = " " if words is EN_WORDS else ""
        out.append(sep.join(rng.choice(words) for _ in range(k)))
    return out


def build_tiny_bge_m3(out_dir: Path, hidden: int = 32, seed: int = 0) -> Path:
    """Write a tiny bge-m3-format model to ``out_dir`` and return it."""
    import sentencepiece as spm
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = out_dir / "spm"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_lines()),
        model_prefix=str(prefix),
        vocab_size=400,
        model_type="unigram",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=-1,
        unk_id=0,
        minloglevel=2,
    )
    tokenizer = XLMRobertaTokenizer(vocab_file=str(prefix) + ".model")
    tokenizer.save_pretrained(str(out_dir))
    torch.manual_seed(seed)
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=hidden * 2,
        max_position_embeddings=600,
        type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        initializer_range=0.5,
    )
    XLMRobertaModel(config).save_pretrained(str(out_dir))
    torch.save(torch.nn.Linear(hidden, hidden).state_dict(), out_dir / "colbert_linear.pt")
    sparse = torch.nn.Linear(hidden, 1)
    # a random encoder gives near-identical hidden states, so a random head would zero every token:
    # a positive bias with small weights keeps every real token in the sparse vector (lexical overlap)
    torch.nn.init.normal_(sparse.weight, std=0.01)
    torch.nn.init.constant_(sparse.bias, 1.0)
    torch.save(sparse.state_dict(), out_dir / "sparse_linear.pt")
    for leftover in out_dir.glob("spm.*"):
        leftover.unlink()
    return out_dir
