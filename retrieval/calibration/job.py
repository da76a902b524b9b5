"""``kar calibrate``: fit the calibration record of a knowledge base and its embedder, report, store it.

:func:`calibrate` runs the steps: probes (:mod:`.probes`), grounding features and the accept rule
(:mod:`.fit`), the corpus floors when the KB holds crawled pages (:mod:`.corpus`), the record, the
figures before and after on the held-out split, and whether the refit reproduces the record in use
(:func:`_reproduces`: its figures always, its values when it read the record's own probes).  It refuses a KB
too small to say anything (:data:`MIN_ENTITIES`) and warns when the negatives are too few for the target
(:func:`fit.min_negatives`).
"""

from __future__ import annotations

import hashlib
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval.calibration import corpus as corpus_fit
from retrieval.calibration import fit
from retrieval.calibration.probes import Probe, caption_languages, caption_probes, entity_probes, label_probes
from retrieval.calibration.record import CalibrationRecord, EmbedderId, Thresholds
from retrieval.calibration.resolve import Calibration, resolve_calibration, write_kb_record

__all__ = [
    "CalibrateOptions", "CalibrationTooSmallError", "MIN_ENTITIES", "TOLERANCE", "VALUE_TOLERANCE", "calibrate", "calibration_probes",
    "probe_digest", "probe_languages",
]

#: fewer entities than this and there is nothing to calibrate on (refused)
MIN_ENTITIES = 20
#: how far a refit's held-out figures may land from the record's (points of top-1 / of false rate / of captions
#: given evidence / of pages found first), read on the same held-out probes
TOLERANCE = {"top1": 0.03, "false_rate": 0.01, "captions_given_evidence_rate": 0.01, "own_page_first": 0.03}
#: how far a refit's values may land from the record's when it read the same probes (their digest) on a KB of the
#: same size: one step of each value's grid (:mod:`.fit`, :mod:`.corpus`; the evidence grid's widest), so a tie the
#: embedder's float noise breaks the other way still reproduces
VALUE_TOLERANCE = {"tau": 0.0025, "min_height": 0.005, "min_evidence": 0.02, "corpus_floor": 0.0025, "corpus_ordinary_floor": 0.005}
_GROUNDING_VALUES = ("tau", "min_height", "min_evidence")
_CORPUS_VALUES = ("corpus_floor", "corpus_ordinary_floor")
#: the fit's grounder keeps every candidate (no threshold): its rule is read offline
_OPEN = Thresholds(tau=-10.0, min_height=-10.0, min_evidence=-10.0, corpus_floor=0.0, corpus_ordinary_floor=0.0)
Progress = Callable[[str, int, int], None]


class CalibrationTooSmallError(ValueError):
    """The knowledge base is too small to calibrate on (the message says how small and what is needed)."""


@dataclass
class CalibrateOptions:
    """What ``kar calibrate`` is asked to do."""

    target_false_rate: float = 0.01
    labels: Path | None = None
    corpus: bool | None = None  # None: when the KB holds crawled pages
    max_entities: int = 400
    max_pages: int = 300
    dry_run: bool = False
    max_captions: int | None = None  # per language, drawn by hash (None: every packaged caption)


def _method(target: float) -> str:
    return (
        "kar calibrate: Learn then Test, fixed sequence: rules ordered strictest first from the positives alone (τ down "
        "its grid, at each τ the margins with the best top-1), tested on the calibration split's negatives in that order, "
        f"stopping at the first whose one-sided {fit.CONFIDENCE:.0%} Clopper-Pearson upper bound of false grounding exceeds "
        f"{target:g}; the certified rule with the best top-1 is kept. Guarantee: with {fit.CONFIDENCE:.0%} confidence every "
        "certified rule grounds at most that share of text like the negatives. Corpus floors the same way on captions "
        "given evidence and pages found first; split by sha1 parity of the entity id / URL / text, fixed before fitting"
    )


def probe_digest(probes: list[Probe]) -> str:
    """sha1 of a probe set, whatever order the store streamed it in: two fits that read the same digest on a KB of
    the same size read the same data."""
    rows = sorted("\x1f".join((p.text, p.expected or "", p.kind, p.cue, p.split)) for p in probes)
    return hashlib.sha1("\n".join(rows).encode("utf-8")).hexdigest()


def _counts(probes: list[Probe]) -> dict[str, Any]:
    out: dict[str, Any] = {"probes_sha1": probe_digest(probes)}
    for split in ("calibration", "held-out"):
        part = [p for p in probes if p.split == split]
        out[split] = {
            "positives": sum(p.expected is not None for p in part),
            "negatives": sum(p.expected is None for p in part),
            "by_kind": {k: sum(p.kind == k for p in part) for k in sorted({p.kind for p in part})},
            "by_language": {k: sum(p.language == k for p in part) for k in sorted({p.language for p in part})},
        }
    return out


def _grounding(kb: Any, probes: list[Probe], opts: CalibrateOptions, before: Thresholds, progress: Progress | None) -> dict[str, Any]:
    from retrieval.grounding import EntityGrounder

    grounder = EntityGrounder(kb.store, kb.embedder, top_k=fit.TOP_M, candidates=20, calibration=Calibration(_OPEN, "kb"))
    feats = fit.probe_features(grounder, probes, len(probes), (lambda i, n: progress("grounding probes", i, n)) if progress else None)
    cal, held = feats.subset(feats.mask("calibration")), feats.subset(feats.mask("held-out"))
    chosen = fit.choose_rule(cal, opts.target_false_rate, before)
    after = chosen.thresholds
    return {
        "after": after, "admissible": chosen.certified > 0,
        "test": {"rules": chosen.tested, "certified": chosen.certified, "rate": round(chosen.rate, 4), "confidence": fit.CONFIDENCE},
        "calibration": {"before": fit.rule_figures(cal, before).to_dict(), "after": fit.rule_figures(cal, after).to_dict()},
        "held_out": {"before": fit.rule_figures(held, before).to_dict(), "after": fit.rule_figures(held, after).to_dict(),
                     "oracle": fit.oracle(held, opts.target_false_rate)},
        "held_out_by_kind": fit.figures_by(held, after, "kind"), "held_out_by_language": fit.figures_by(held, after, "language"),
    }


def _corpus(kb: Any, languages: list[str], opts: CalibrateOptions, rule: Thresholds, before: Thresholds, progress: Progress | None) -> dict[str, Any]:
    probes = corpus_fit.corpus_probes(kb.store, languages, opts.max_pages)
    feats = corpus_fit.corpus_features(kb, probes, (lambda i, n: progress("corpus probes", i, n)) if progress else None)
    cal, held = feats.subset("calibration"), feats.subset("held-out")
    after, admissible = corpus_fit.choose_floors(cal, opts.target_false_rate, rule)
    return {
        "after": after, "admissible": admissible, "probes": _counts(probes),
        "held_out": {"before": corpus_fit.corpus_figures(held, before), "after": corpus_fit.corpus_figures(held, after)},
        "calibration": {"after": corpus_fit.corpus_figures(cal, after)},
    }


def _check(record: float, refit: float, tolerance: float) -> dict[str, Any]:
    """One reproduction check: the record's figure or value, the refit's, and whether they are within ``tolerance``."""
    return {"record": record, "refit": refit, "within": abs(record - refit) <= tolerance + 1e-9}


def _digest(record: CalibrationRecord, part: str) -> str | None:
    """The digest of the ``part`` probes ``record`` was fitted on (None: it does not say)."""
    fitted = record.fitted_on.get(part)
    return fitted.get("probes_sha1") if isinstance(fitted, dict) else None


def _values(record: CalibrationRecord, refit: CalibrationRecord, part: str, size: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The refit's ``part`` values held to the record's, when it read the same probes on a KB of the same ``size``
    (a record field: ``kb_entities``, ``corpus_chunks``); else why they are not compared."""
    theirs = _digest(record, part)
    if theirs is None:
        return {"compared": False, "why": f"the record does not say which {part} probes it was fitted on"}
    if theirs != _digest(refit, part) or getattr(record, size) != getattr(refit, size):
        what = f"{getattr(record, size):,} {size.split('_', 1)[1]}"
        return {"compared": False, "why": f"the record was fitted on other {part} probes or another size ({what})"}
    checks = {k: _check(getattr(record.thresholds, k), getattr(refit.thresholds, k), VALUE_TOLERANCE[k]) for k in names}
    return {"compared": True, "checks": checks}


def _reproduces(
    record: CalibrationRecord | None, refit: CalibrationRecord, ground: dict[str, Any], corpus: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Whether ``refit`` reproduces ``record``, the record in use: its held-out figures within :data:`TOLERANCE` of
    the record's rule on the same probes, and, where the refit read the record's own probes on a KB of its size, its
    values within :data:`VALUE_TOLERANCE` (values are per KB: on other data only the figures can be held to the record's)."""
    if record is None:
        return None
    held = {key: ground["held_out"] for key in ("top1", "false_rate")}
    if corpus:
        held.update({key: corpus["held_out"] for key in ("captions_given_evidence_rate", "own_page_first")})
    checks = {key: _check(h["before"][key], h["after"][key], TOLERANCE[key]) for key, h in held.items()}
    values = {
        "grounding": _values(record, refit, "grounding", "kb_entities", _GROUNDING_VALUES),
        "corpus": _values(record, refit, "corpus", "corpus_chunks", _CORPUS_VALUES) if corpus
        else {"compared": False, "why": "no corpus was fitted"},
    }
    figures_within = all(c["within"] for c in checks.values())
    values_within = all(c["within"] for part in values.values() if part["compared"] for c in part["checks"].values())
    return {"tolerance": TOLERANCE, "checks": checks, "figures_within": figures_within,
            "value_tolerance": VALUE_TOLERANCE, "values": values, "values_within": values_within,
            "within": figures_within and values_within}


def _captions(languages: list[str], limit: int | None) -> list[Probe]:
    captions = list(caption_probes(languages))
    if limit is None:
        return captions
    out: list[Probe] = []
    for lang in languages:
        mine = sorted((p for p in captions if p.language == lang), key=lambda p: hashlib.sha1(p.text.encode("utf-8")).hexdigest())
        out += mine[:limit]
    return out


def probe_languages(store: Any) -> tuple[dict[str, int], list[str]]:
    """The KB's entity counts in the languages with packaged captions, and the caption languages to use."""
    kb_languages = {lang: c for lang in caption_languages() if (c := store.count(language=lang))}
    return kb_languages, sorted(kb_languages) or caption_languages()


def calibration_probes(kb: Any, opts: CalibrateOptions, languages: list[str]) -> list[Probe]:
    """Every grounding probe of a run: the KB's positives, the packaged captions of ``languages``, the labels."""
    probes = list(entity_probes(kb.store, opts.max_entities)) + _captions(languages, opts.max_captions)
    if opts.labels is not None:
        probes += label_probes(opts.labels, kb.store)
    return probes


def calibrate(kb: Any, opts: CalibrateOptions, progress: Progress | None = None) -> dict[str, Any]:
    """Fit, report and (unless ``dry_run``) store the record of ``kb`` and its embedder (module docstring)."""
    started = time.perf_counter()
    store, emb = kb.store, kb.embedder
    n = store.count()
    if n < MIN_ENTITIES:
        raise CalibrationTooSmallError(
            f"the knowledge base holds {n} entities: at least {MIN_ENTITIES} are needed to calibrate on (its own "
            "entities are the positives); import more with `kar kb import FILE`"
        )
    before = resolve_calibration(store, emb.name, emb.dim)
    kb_languages, languages = probe_languages(store)
    probes = calibration_probes(kb, opts, languages)
    warnings = _warnings(probes, opts, n, kb_languages)
    ground = _grounding(kb, probes, opts, before.thresholds, progress)
    rule: Thresholds = ground["after"]
    corpus = None
    if opts.corpus is not False and getattr(store, "has_corpus", False) and store.corpus.count():
        corpus = _corpus(kb, languages, opts, rule, before.thresholds, progress)
        rule = corpus["after"]
    elif opts.corpus:
        warnings.append("--corpus: the knowledge base holds no crawled pages; the corpus floors are kept")
    if not ground["admissible"]:
        warnings.append(f"no rule is certified at a false rate of {ground['test']['rate']:g} on these probes: the strictest rule "
                        "is kept (it grounds next to nothing); add --labels with null entities")
    if corpus and not corpus["admissible"]:
        warnings.append(f"no corpus floors are certified at {opts.target_false_rate:g}: the strictest floors are kept")
    record = CalibrationRecord(
        embedder=EmbedderId(name=emb.name, dim=emb.dim), thresholds=rule, method=_method(opts.target_false_rate),
        target_false_rate=opts.target_false_rate, kb_entities=n, kb_languages=kb_languages,
        corpus_chunks=store.corpus.count() if corpus else 0,
        fitted_on={"grounding": _counts(probes), **({"corpus": corpus["probes"]} if corpus else {})},
        held_out={**ground["held_out"]["after"], "oracle_top1": ground["held_out"]["oracle"]["top1"],
                  **({"corpus": corpus["held_out"]["after"]} if corpus else {})},
        tolerance=TOLERANCE, source="kar calibrate",
    )
    if not opts.dry_run:
        write_kb_record(store, record)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the process's peak resident memory (Linux: KiB)
    return {
        "embedder": emb.name, "dim": emb.dim, "kb_entities": n, "target_false_rate": opts.target_false_rate,
        "before": {"source": before.source, "thresholds": before.thresholds.model_dump()},
        "after": rule.model_dump(), "changes": before.thresholds.changes(rule),
        "grounding": {k: v for k, v in ground.items() if k not in ("after",)},
        "corpus": {k: v for k, v in corpus.items() if k != "after"} if corpus else None,
        "reproduces": _reproduces(before.record, record, ground, corpus), "warnings": warnings,
        "stored": not opts.dry_run, "record": record.model_dump(mode="json"),
        "seconds": round(time.perf_counter() - started, 1), "peak_rss_mb": round(peak_kb / 1024, 1),
    }


def _warnings(probes: list[Probe], opts: CalibrateOptions, n: int, kb_languages: dict[str, int]) -> list[str]:
    out = []
    cal_neg = sum(p.expected is None and p.split == "calibration" for p in probes)
    need = fit.min_negatives(opts.target_false_rate)
    if cal_neg < need:
        out.append(
            f"{cal_neg} negatives in the calibration split: a false rate of {opts.target_false_rate:g} can only be bounded "
            f"with at least {need}; the rule is certified at {fit.certifiable_rate(opts.target_false_rate, cal_neg):.4f} instead "
            "(add --labels with null entities, or ask for a higher --target-false-rate)"
        )
    cal_pos = sum(p.expected is not None and p.split == "calibration" for p in probes)
    if cal_pos < 50:
        out.append(f"only {cal_pos} positives in the calibration split: top-1 figures are rough")
    if not kb_languages:
        out.append("no entity is in a language with packaged captions (en, zh): every caption file was used as negatives")
    return out
