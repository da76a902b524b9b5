"""MemeReaCon: Reddit memes read in their post and comment context.

No data or scoring script of MemeReaCon is released, so the JSONL shape here is **ours**
(docs/evaluation.md, "MemeReaCon"), there is no converter, and ``kar bench convert
memereacon`` refuses.  Tasks: CMI-C (does the context explain the meme, CEM, or the meme
enhance the context, MEC), CSAC-C asked as two labels (the comment's stance CSAC-S, its
affect CSAC-A), PC-G and PI-G (generation, ROUGE-L against references).

CSAC-C: the paper does not say plainly whether it is scored over the six stance × affect
pairs or over the stance read through its matrix, so :func:`csac_c` reports both, named:
``pairs`` (a comment is right when its stance *and* affect are right; accuracy and macro-F1
over the six joint labels) and ``stance`` (the stance axis alone, over the same comments; no
matrix is published for us to map it through).  A CSAC-S and a CSAC-A line belong to one
comment when they share ``csac_id``, else the same image and comment text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from eval.tasks.base import BenchItem, Task, TaskKind, register, task_prompt

if TYPE_CHECKING:
    from agents.pipeline.state import ExplainContext


#: MemeReaCon tasks: classification label sets and generation tasks
MEMEREACON_LABELS: dict[str, tuple[str, ...]] = {
    "CMI-C": ("CEM", "MEC"),  # context explains meme / meme enhances context
    "CSAC-S": ("Support", "Deny", "Extension"),  # CSAC-C: the comment's stance
    "CSAC-A": ("Consistent", "Inconsistent"),  # CSAC-C: literal affect vs intended meaning
}


MEMEREACON_GENERATION = ("PC-G", "PI-G")  # post-meme-comment connection; poster's intent


class MemeReaConItem(BenchItem):
    """A Reddit meme with its post (and, for CSAC, one top-level comment)."""

    benchmark: Literal["memereacon"]
    task: Literal["CMI-C", "CSAC-S", "CSAC-A", "PC-G", "PI-G"]
    image: str = Field(min_length=1)
    post_text: str
    comment: str | None = None
    comments: list[str] = Field(default_factory=list)
    label: str | None = None
    refs: list[str] = Field(default_factory=list, alias="references")

    kind: ClassVar[dict[str, TaskKind]] = {t: "classify" for t in MEMEREACON_LABELS} | {
        t: "generate" for t in MEMEREACON_GENERATION
    }

    @model_validator(mode="after")
    def _task_fields(self) -> MemeReaConItem:
        if self.task in MEMEREACON_LABELS:
            labels = MEMEREACON_LABELS[self.task]
            if self.label is None:
                raise ValueError(f"field 'label': required for {self.task} (one of {', '.join(labels)})")
            match = {lab.lower(): lab for lab in labels}.get(self.label.strip().lower())
            if match is None:
                raise ValueError(f"field 'label': {self.label!r} is not one of {', '.join(labels)}")
            object.__setattr__(self, "label", match)
            if self.task.startswith("CSAC") and not (self.comment or "").strip():
                raise ValueError(f"field 'comment': required for {self.task}")
        elif not [r for r in self.refs if r.strip()]:
            raise ValueError(f"field 'references': {self.task} needs at least one reference text")
        return self

    @property
    def label_set(self) -> tuple[str, ...]:
        return MEMEREACON_LABELS.get(self.task, ())

    @property
    def references(self) -> list[str]:
        return [r for r in self.refs if r.strip()]

    def instruction(self) -> str | None:
        return task_prompt(self.task, comment=self.comment or "")

    def explain_context(self) -> ExplainContext:
        from agents.pipeline.state import ExplainContext

        return ExplainContext(post_text=self.post_text, top_comment=self.comment or "\n".join(self.comments[:5]) or None)


def _comment_key(item: MemeReaConItem) -> tuple[str, ...]:
    extra = item.model_extra or {}
    return (str(extra["csac_id"]),) if extra.get("csac_id") is not None else (item.image, (item.comment or "").strip())


def csac_c(items: dict[str, list[BenchItem]], rows: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """CSAC-C both ways (``pairs`` and ``stance``) per run, over the comments asked both CSAC-S and CSAC-A."""
    from eval.metrics.tasks import macro_f1

    if "CSAC-S" not in items or "CSAC-A" not in items:
        return {}
    stance_of = {_comment_key(i): n for n, i in enumerate(items["CSAC-S"])}  # type: ignore[arg-type]
    affect_of = {_comment_key(i): n for n, i in enumerate(items["CSAC-A"])}  # type: ignore[arg-type]
    both = [k for k in stance_of if k in affect_of]
    labels = [f"{s}/{a}" for s in MEMEREACON_LABELS["CSAC-S"] for a in MEMEREACON_LABELS["CSAC-A"]]
    out: dict[str, Any] = {"n_comments": len(both), "n_stance_only": len(stance_of) - len(both),
                           "n_affect_only": len(affect_of) - len(both), "runs": {}}
    for run in rows.get("CSAC-S", {}):
        s_rows, a_rows = rows["CSAC-S"][run], rows.get("CSAC-A", {}).get(run)
        if a_rows is None or not both:
            continue
        pairs = [(s_rows[stance_of[k]], a_rows[affect_of[k]]) for k in both]
        gold = [f"{s['gold']}/{a['gold']}" for s, a in pairs]
        pred = [f"{s['pred']}/{a['pred']}" if s["pred"] and a["pred"] else None for s, a in pairs]
        out["runs"][run] = {
            "pairs": {"scoring": "six stance × affect pairs", "n": len(pairs),
                      "accuracy": sum(s["correct"] and a["correct"] for s, a in pairs) / len(pairs),
                      "macro_f1": macro_f1(gold, pred, labels)},
            "stance": {"scoring": "stance alone", "n": len(pairs), "accuracy": sum(s["correct"] for s, _ in pairs) / len(pairs),
                       "macro_f1": macro_f1([s["gold"] for s, _ in pairs], [s["pred"] for s, _ in pairs], MEMEREACON_LABELS["CSAC-S"])},
        }
    return {"CSAC-C": out}


TASK = register(Task(
    name="memereacon", title="MemeReaCon", item_type=MemeReaConItem,
    conditions=("vanilla", "cot", "search_cot", "kar", "text_only"),
    release="no data or scoring script is released; the JSONL shape is ours",
    metrics={"CMI-C": "accuracy, macro-F1", "CSAC-S": "accuracy, macro-F1", "CSAC-A": "accuracy, macro-F1",
             "PC-G": "ROUGE-L", "PI-G": "ROUGE-L", "CSAC-C": "pairs and stance (both reported)"},
    combine=csac_c,
))
