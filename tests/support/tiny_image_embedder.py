"""Tiny randomly initialised CLIP / SigLIP models in the real Hugging Face format, built offline for tests.

``save_pretrained`` writes ``config.json``, the weights and ``preprocessor_config.json``
exactly as a downloaded checkpoint has them, so :mod:`retrieval.images.embedder` loads them
through its real path (``CLIPModel`` / ``SiglipModel`` + ``AutoImageProcessor``).
"""

from __future__ import annotations

from pathlib import Path

IMAGE_SIZE = 32


def build_tiny_image_embedder(out_dir: Path, kind: str = "clip", hidden: int = 32, seed: int = 0) -> Path:
    """Write a tiny ``kind`` (clip | siglip) model with its image processor to ``out_dir`` and return it."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, SiglipConfig, SiglipImageProcessor, SiglipModel

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    text = dict(vocab_size=64, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=1,
                num_attention_heads=2, max_position_embeddings=16)
    vision = dict(hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE_SIZE, patch_size=8, num_channels=3)
    if kind == "clip":
        config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=hidden)
        model = CLIPModel(config)
        processor = CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    elif kind == "siglip":
        config = SiglipConfig(text_config=text, vision_config=vision)
        model = SiglipModel(config)
        processor = SiglipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    else:
        raise ValueError(f"kind {kind!r} is not clip or siglip")
    model.save_pretrained(str(out_dir))
    processor.save_pretrained(str(out_dir))
    return out_dir
