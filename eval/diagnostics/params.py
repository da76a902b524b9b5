"""The retrieval diagnostics' thresholds: one frozen parameters object.

All three define the diagnostics' cells and were set when the diagnostics were written; no bench chose
them, and every diagnostics report carries them (``thresholds``). ``python bench/diagnostics.py`` measures
how the proxy's calls agree with the 112 hand labels at ``proxy_threshold`` (``knowledge_labels``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DiagnosticsParams:
    #: a knowledge-unit share at or above this counts as "the knowledge reached the prompt" (half the units)
    knowledge_reached: float = 0.5
    #: evidence more off-entity than this share counts as "off-entity evidence" (more than half)
    off_entity: float = 0.5
    #: share of a unit's tokens the material must hold for the lexical proxy to call the unit stated (fixed a priori, not tuned)
    proxy_threshold: float = 0.6


PARAMS = DiagnosticsParams()
