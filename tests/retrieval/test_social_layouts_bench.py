"""The bench's generated feed layouts: a narrow grid draws small cells in any family (bench/social_layouts.py)."""

from __future__ import annotations

import importlib.util
import random
import sys

import pytest
from PIL import Image

from tests.conftest import REPO


@pytest.fixture(scope="module")
def layouts():
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("social_layouts", REPO / "bench" / "social_layouts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["social_layouts"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _picture(seed: int) -> Image.Image:
    rng = random.Random(seed)
    return Image.frombytes("RGB", (120, 90), bytes(rng.randrange(256) for _ in range(120 * 90 * 3)))


@pytest.mark.parametrize("grid, cols", [("2x2", 2), ("1x3", 3)])
def test_a_narrow_grid_keeps_its_block_within_the_narrow_share(layouts, grid, cols):
    lo, hi = layouts.NARROW_BLOCK
    for seed in range(6):
        _, narrow = layouts.draw_layout(_picture(seed), [_picture(seed + 10)], random.Random(seed), "x_en", grid, narrow=True)
        assert lo <= narrow.share * cols <= hi  # the whole block, in shares of the post's width
        assert narrow.grid == grid and narrow.family == "x_en"


def test_a_narrow_single_picture_is_drawn_as_before(layouts):
    a = layouts.draw_layout(_picture(1), [_picture(2)], random.Random(5), "weibo_zh", "single")
    b = layouts.draw_layout(_picture(1), [_picture(2)], random.Random(5), "weibo_zh", "single", narrow=True)
    assert a[1] == b[1] and a[0] == b[0]
