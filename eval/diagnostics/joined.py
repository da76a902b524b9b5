"""Diagnostics joined with the judgments: why a condition repaired or damaged an item, per VIKR layer.

Against its baseline (the pairing of :func:`eval.report.vikr.build_report`), per layer (V, I, K, R
and Success):

* a **repair** (baseline fails, condition passes) falls in one of four cells by whether a gold
  entity was grounded and whether the knowledge reached the prompt (``knowledge_in_prompt`` ≥
  ``PARAMS.knowledge_reached``): ``repair.grounded.knowledge``,
  ``repair.grounded.no_knowledge``, ``repair.ungrounded.knowledge``, ``repair.ungrounded.no_knowledge``;
* a **damage** (baseline passes, condition fails) by its first cause: ``damage.extra_entity`` (an
  entity that is not gold passed τ and was injected), ``damage.off_entity`` (the evidence is mostly,
  > ``PARAMS.off_entity``, about no gold entity), ``damage.neither`` (the
  reasoner's own doing).

Each cell lists its items.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from eval.diagnostics.params import PARAMS

REPAIR_CELLS: tuple[str, ...] = (
    "repair.grounded.knowledge", "repair.grounded.no_knowledge", "repair.ungrounded.knowledge", "repair.ungrounded.no_knowledge",
)
DAMAGE_CELLS: tuple[str, ...] = ("damage.extra_entity", "damage.off_entity", "damage.neither")
CELLS: tuple[str, ...] = (*REPAIR_CELLS, *DAMAGE_CELLS)
JOIN_LAYERS: tuple[str, ...] = ("V", "I", "K", "R", "Success")


def repair_cell(row: Mapping[str, Any]) -> str:
    grounded = "grounded" if row.get("identity_grounded") else "ungrounded"
    reached = (row.get("knowledge_in_prompt") or 0.0) >= PARAMS.knowledge_reached
    return f"repair.{grounded}.{'knowledge' if reached else 'no_knowledge'}"


def damage_cell(row: Mapping[str, Any]) -> str:
    if row.get("n_extra"):
        return "damage.extra_entity"
    off = row.get("evidence_off_entity")
    if off is not None and off > PARAMS.off_entity:
        return "damage.off_entity"
    return "damage.neither"


def join(base: Any, cond: Any, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Per layer: the repaired and damaged items of ``cond`` against ``base`` (two aligned
    :class:`eval.metrics.vikr.VikrMatrix`), each in its cell; ``rows`` are ``cond``'s diagnostics rows."""
    by_id = {r["id"]: r for r in rows}
    ids = cond.ids
    layers: dict[str, Any] = {}
    for layer in JOIN_LAYERS:
        b, c = np.asarray(base.layer(layer), bool), np.asarray(cond.layer(layer), bool)
        cells: dict[str, list[str]] = {cell: [] for cell in CELLS}
        # only the items whose verdict changed are placed (in item order, each list as the items come)
        for i in np.flatnonzero(c != b).tolist():
            item_id = ids[i]
            row = by_id.get(item_id, {})
            cells[repair_cell(row) if c[i] else damage_cell(row)].append(item_id)
        layers[layer] = {
            "repaired": sum(len(cells[k]) for k in REPAIR_CELLS),
            "damaged": sum(len(cells[k]) for k in DAMAGE_CELLS),
            "cells": cells,
        }
    return layers


def join_all(diagnostics: dict[str, dict[str, Any]], matrices: Mapping[str, Any], paired: Mapping[str, Mapping[str, Any]]) -> None:
    """Add ``joined`` (baseline name and per-layer cells) to each paired condition's diagnostics, in place."""
    for name, entry in paired.items():
        base_name = entry["baseline"]
        if name not in diagnostics or name not in matrices or base_name not in matrices:
            continue
        diagnostics[name]["joined"] = {"baseline": base_name,
                                       "layers": join(matrices[base_name], matrices[name], diagnostics[name]["rows"])}
