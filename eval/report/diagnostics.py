"""The diagnostics section of the VIKR report: tables (markdown), the repair/damage-by-cause plot, the
HTML section, and one cell's items (``kar report --items``).  Built from :mod:`eval.diagnostics`."""

from __future__ import annotations

import hashlib
import html
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.diagnostics.cache import write_entry
from eval.diagnostics.joined import CELLS, DAMAGE_CELLS, JOIN_LAYERS, REPAIR_CELLS
from eval.diagnostics.traces import PROMPTS_LABELS
from eval.report.common import markdown_table_html

CELL_LABELS = {
    "repair.grounded.knowledge": "grounded + knowledge",
    "repair.grounded.no_knowledge": "grounded, knowledge missing",
    "repair.ungrounded.knowledge": "not grounded + knowledge",
    "repair.ungrounded.no_knowledge": "not grounded, knowledge missing",
    "damage.extra_entity": "extra entity injected",
    "damage.off_entity": "off-entity evidence",
    "damage.neither": "neither (reasoner)",
}


def is_skipped(diagnostics: Mapping[str, Any] | None) -> bool:
    return not diagnostics or "skipped" in diagnostics


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def knowledge_label(diagnostics: Mapping[str, Any]) -> str:
    """``judge`` or ``proxy`` (``judge+proxy`` when mixed), as the knowledge column is headed."""
    methods = {e.get("knowledge_method") for e in diagnostics.values() if isinstance(e, dict) and e.get("knowledge_method")}
    joined = "+".join(sorted({m for method in methods for m in method.split("+")}))
    return joined or "proxy"


def diagnostics_markdown(diagnostics: Mapping[str, Any]) -> str:
    """One row per condition: gold in KB, identity grounded, extra entities, knowledge in prompt, off-entity evidence."""
    if is_skipped(diagnostics):
        return f"Diagnostics skipped: {diagnostics.get('skipped') if diagnostics else 'no traces given'}\n"
    method = knowledge_label(diagnostics)
    lines = [
        f"| Condition | gold in KB | identity grounded | gold rank | extra entities | knowledge in prompt ({method}) | "
        "off-entity evidence | evidence | traced |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in diagnostics.items():
        status = ", ".join(f"{k} {v}" for k, v in e["evidence_status"].items()) or "–"
        grounded = _pct(e["identity_grounded"]) if e["grounds"] else "n/a"
        lines.append(
            f"| {name} | {_pct(e['gold_in_kb'])} | {grounded} | {_num(e['mean_gold_rank'])} | {_num(e['extra_entities'])} | "
            f"{_pct(e['knowledge_in_prompt'])} | {_pct(e['evidence_off_entity'])} | {status} | {e['counts']['traced']}/{e['counts']['items']} |"
        )
    note = ("Shares in % over the items where each is defined (gold in KB: items with a gold entity and a KB; identity "
            "grounded and extra entities (mean count): conditions that ground; off-entity evidence: items with evidence). ")
    if "proxy" in method:
        note += (f"knowledge in prompt ({method}): decided by lexical containment, a PROXY for a judge's reading "
                 "(no paraphrase or translation is seen).")
    return note + "\n\n" + "\n".join(lines) + "\n\n" + prompts_lines(diagnostics)


def prompts_label(entry: Mapping[str, Any]) -> str:
    """How a run's reasoning prompts were read: ``recorded``, ``reconstructed (run predates prompt recording)``,
    or both with their item counts (a run resumed across the change); ``–`` when nothing is traced."""
    ways = [w for w in (entry.get("prompts") or "").split("+") if w]
    if not ways:
        return "–"
    if len(ways) == 1:
        label = PROMPTS_LABELS.get(ways[0], ways[0])
    else:
        counts = entry.get("counts") or {}
        label = "; ".join(f"{PROMPTS_LABELS.get(w, w)} for {counts.get(f'prompts_{w}', '?')} item(s)" for w in ways)
    cut = (entry.get("counts") or {}).get("prompts_cut")
    return label + (f" ({cut} recorded prompt(s) cut by the record's cap)" if cut else "")


def prompts_lines(diagnostics: Mapping[str, Any]) -> str:
    """One line per run: ``NAME: prompts: recorded`` or ``... reconstructed (run predates prompt recording)``."""
    return "".join(f"- {name}: prompts: {prompts_label(e)}\n" for name, e in diagnostics.items())


def causes_markdown(diagnostics: Mapping[str, Any], layers: tuple[str, ...] = JOIN_LAYERS) -> str:
    """Repairs by (grounded?, knowledge reached?) and damages by cause, per condition and layer: item counts."""
    if is_skipped(diagnostics):
        return ""
    joined = {n: e["joined"] for n, e in diagnostics.items() if e.get("joined")}
    if not joined:
        return "No condition has a baseline to compare against (diagnostics are not joined).\n"
    lines = [
        "| Condition | vs | Layer | repaired | " + " | ".join(CELL_LABELS[c] for c in REPAIR_CELLS)
        + " | damaged | " + " | ".join(CELL_LABELS[c] for c in DAMAGE_CELLS) + " |",
        "|---|---|---|---|" + "---|" * len(REPAIR_CELLS) + "---|" + "---|" * len(DAMAGE_CELLS),
    ]
    for name, j in joined.items():
        for layer in layers:
            cells = j["layers"][layer]["cells"]
            lines.append(
                f"| {name} | {j['baseline']} | {layer} | {j['layers'][layer]['repaired']} | "
                + " | ".join(str(len(cells[c])) for c in REPAIR_CELLS)
                + f" | {j['layers'][layer]['damaged']} | " + " | ".join(str(len(cells[c])) for c in DAMAGE_CELLS) + " |"
            )
    return ("Items per cell (`kar report --items NAME:LAYER:CELL` lists them; cells: " + ", ".join(CELLS) + ").\n\n"
            + "\n".join(lines) + "\n")


def parse_cell(spec: str) -> tuple[str, str, str]:
    """``NAME:CELL`` or ``NAME:LAYER:CELL`` → (name, layer, cell); ValueError naming what is wrong."""
    parts = spec.rsplit(":", 2)
    if len(parts) == 3 and parts[1] in JOIN_LAYERS:
        name, layer, cell = parts
    else:
        name, _, cell = spec.rpartition(":")
        layer = "Success"
    if not name or cell not in CELLS:
        raise ValueError(f"--items expects NAME:CELL or NAME:LAYER:CELL with CELL one of {', '.join(CELLS)} "
                         f"and LAYER one of {', '.join(JOIN_LAYERS)}; got {spec!r}")
    return name, layer, cell


def cell_items(diagnostics: Mapping[str, Any], name: str, layer: str, cell: str) -> list[dict[str, Any]]:
    """The diagnostics rows of one cell's items (ValueError when the condition has no joined diagnostics)."""
    if is_skipped(diagnostics):
        raise ValueError(f"no diagnostics: {diagnostics.get('skipped') if diagnostics else 'no traces given'}")
    entry = diagnostics.get(name)
    if entry is None:
        raise ValueError(f"--items: no diagnostics for {name!r} (have: {', '.join(diagnostics) or 'none'})")
    if not entry.get("joined"):
        raise ValueError(f"--items: {name!r} is not paired with a baseline, so it has no repairs or damages")
    ids = entry["joined"]["layers"][layer]["cells"][cell]
    by_id = {r["id"]: r for r in entry["rows"]}
    return [by_id[i] for i in ids if i in by_id]


def items_markdown(rows: list[Mapping[str, Any]], name: str, layer: str, cell: str) -> str:
    """One line per item of a cell: its gold, what was grounded, knowledge and evidence figures."""
    head = f"{name} · {layer} · {cell} ({CELL_LABELS[cell]}): {len(rows)} item(s)"
    lines = [head]
    for r in rows:
        lines.append(
            f"- {r['id']}: gold {', '.join(r['gold']) or '(none)'} (in KB: {r['gold_in_kb']}); grounded "
            f"{', '.join(r['grounded']) or '(none)'}; extra {', '.join(r['extra_entities'] or []) or '(none)'}; "
            f"knowledge in prompt {_pct(r['knowledge_in_prompt'])}% ({r['knowledge_method']}); "
            f"off-entity evidence {_pct(r['evidence_off_entity'])}%; evidence {r['evidence_status']}"
            + (f"; prompt {r['prompts']}" if r.get("prompts") else "")
            + (f"; error {r['error']}" if r.get("error") else "")
        )
    return "\n".join(lines) + "\n"


_SOURCE = Path(__file__)
#: the causes plot's file in the report folder
CAUSES_PLOT = "diagnostics_causes.png"


def _plot_key(joined: Mapping[str, Mapping[str, list[Any]]], layer: str) -> str:
    """What the causes plot shows (each condition's count per cell, the layer), what draws it (this module's source)
    and with what (matplotlib's version): the plot's name in the plot cache."""
    import matplotlib

    digest = hashlib.sha256(f"causes plot\0{matplotlib.__version__}\0{layer}\0".encode())
    digest.update(_SOURCE.read_bytes())
    digest.update(json.dumps([[name, [len(cells[c]) for c in CELLS]] for name, cells in joined.items()]).encode())
    return digest.hexdigest()


def causes_plot(diagnostics: Mapping[str, Any], out_dir: Path, layer: str = "Success", cache: Path | None = None) -> Path | None:
    """Repairs (up) and damages (down) per condition, stacked by cell, for one layer; None when nothing is joined.
    ``cache``: a folder of plots drawn before, by what they show (:func:`_plot_key`): the same counts are copied
    from there instead of drawn again (matplotlib lays every text out: a tenth of a second)."""
    if is_skipped(diagnostics):
        return None
    joined = {n: e["joined"]["layers"][layer]["cells"] for n, e in diagnostics.items() if e.get("joined")}
    if not joined:
        return None
    path = out_dir / CAUSES_PLOT
    cached = cache / f"{_plot_key(joined, layer)}.png" if cache is not None else None
    if cached is not None:
        try:
            shutil.copyfile(cached, path)
            os.utime(cached)  # kept as recently used
            return path
        except OSError:  # not drawn yet (or unreadable): drawn here
            pass
    _draw_causes(joined, layer, path)
    if cached is not None:  # kept whole, the newest few (a cache that cannot be written costs a drawing next time)
        write_entry(cached.parent, cached.stem, path.read_bytes(), suffix=".png")
    return path


def _draw_causes(joined: Mapping[str, Mapping[str, list[Any]]], layer: str, path: Path) -> None:
    """Draw the causes plot of ``joined`` (per condition, its cells' items) into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(joined)
    x = np.arange(len(names))
    # laid out by hand (inches), not by tight_layout: that lays every text out once more before the drawing
    axes_w = max(2.0, 1.15 * len(names))
    bottom_in = min(3.0, 0.4 + 0.025 * max(len(n) for n in names))  # x labels at 30°, 8 pt
    left_in, legend_in, top_in, axes_h = 0.8, 2.8, 0.4, 3.3
    width, height = left_in + axes_w + legend_in, bottom_in + axes_h + top_in
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((left_in / width, bottom_in / height, axes_w / width, axes_h / height))
    bottom = np.zeros(len(names))
    for cell in REPAIR_CELLS:
        values = np.array([len(joined[n][cell]) for n in names], dtype=float)
        ax.bar(x, values, 0.6, bottom=bottom, label=f"repair: {CELL_LABELS[cell]}")
        bottom += values
    bottom = np.zeros(len(names))
    for cell in DAMAGE_CELLS:
        values = np.array([len(joined[n][cell]) for n in names], dtype=float)
        ax.bar(x, -values, 0.6, bottom=-bottom, label=f"damage: {CELL_LABELS[cell]}", hatch="//")
        bottom += values
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("items (repairs up, damages down)")
    ax.set_title(f"Repairs and damages by cause ({layer})")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def html_section(diagnostics: Mapping[str, Any] | None) -> str:
    """The report.html section: both tables and, per cell, its items."""
    if diagnostics is None:
        return ""
    if is_skipped(diagnostics):
        return f"<h2>Retrieval diagnostics</h2><p>{html.escape('Skipped: ' + str(diagnostics.get('skipped')))}</p>"
    lists = []
    for name, entry in diagnostics.items():
        for layer, data in (entry.get("joined") or {}).get("layers", {}).items():
            for cell, ids in data["cells"].items():
                if ids:
                    lists.append(f"<li>{html.escape(f'{name} · {layer} · {CELL_LABELS[cell]}')}: "
                                 f"{html.escape(', '.join(map(str, ids)))}</li>")
    return (
        "<h2>Retrieval diagnostics</h2>"
        f"{markdown_table_html(diagnostics_markdown(diagnostics))}"
        "<h3>Repairs and damages by cause</h3>"
        f"{markdown_table_html(causes_markdown(diagnostics))}"
        f"<details><summary>Items per cell</summary><ul>{''.join(lists) or '<li>none</li>'}</ul></details>"
    )
