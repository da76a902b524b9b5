"""DrivelHub+: short social-media videos and their implicit, non-literal meaning.

Items are explained (NARRATIVE-G) and the explanations scored by the rubric judge
(:mod:`eval.judges.rubric`) against the human annotation, and used as queries for
reasoning-as-retrieval (:mod:`eval.metrics.retrieval`).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from eval.tasks.base import BenchItem, Task, TaskKind, register, task_prompt


class DrivelHubItem(BenchItem):
    """A short video with its human implicit-narrative annotation."""

    benchmark: Literal["drivelhub"]
    task: Literal["NARRATIVE-G"] = "NARRATIVE-G"
    video: str = Field(min_length=1)
    audio: str | None = None
    narrative: str = Field(min_length=1)
    extra_relevant: list[str] = Field(default_factory=list)  # human-verified extra pairs (item ids)

    kind: ClassVar[dict[str, TaskKind]] = {"NARRATIVE-G": "generate"}

    @property
    def references(self) -> list[str]:
        return [self.narrative]

    def instruction(self) -> str | None:
        return task_prompt(self.task)


TASK = register(Task(
    name="drivelhub", title="DrivelHub+", item_type=DrivelHubItem,
    conditions=("vanilla", "cot", "search_cot", "kar"),
    release="its release file layout is not published where we could read it",
    metrics={"NARRATIVE-G": "rubric Total (judge) or ROUGE-L; retrieval R@k/MRR/nDCG"},
))
