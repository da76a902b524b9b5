"""The registry: every command reaches a benchmark through it, so a new benchmark is one module."""

from __future__ import annotations

import json
from typing import ClassVar, Literal

import pytest
from pydantic import Field

from eval.report.tasks import build_task_report
from eval.tasks import REGISTRY, convert, get_task, is_bench_file, load, load_bench
from eval.tasks.base import BenchItem, ConversionUnavailableError, Task, TaskKind, register
from tests.eval.tasks.benchkit import png


class RiddleItem(BenchItem):
    """What a new benchmark's module would hold: its item type, how it is asked, its registration."""

    benchmark: Literal["riddles"]
    task: Literal["R-MCQ"] = "R-MCQ"
    image: str = Field(min_length=1)
    question: str
    options: list[str]
    answer: str

    kind: ClassVar[dict[str, TaskKind]] = {"R-MCQ": "mcq"}

    def instruction(self) -> str | None:
        return f"{self.question} " + " ".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(self.options)) + " Reply 'Answer: X'."


@pytest.fixture
def riddles():
    task = register(Task(name="riddles", title="Riddles", item_type=RiddleItem, conditions=("vanilla", "kar"),
                         release="nothing released"))
    yield task
    REGISTRY.pop("riddles")


def test_a_benchmark_registered_in_its_module_runs_through_every_command_path(riddles, tmp_path):
    png(tmp_path / "r.png")
    path = tmp_path / "riddles.jsonl"
    path.write_text(json.dumps({"benchmark": "riddles", "id": "r1", "image": "r.png", "question": "Who?", "options": ["a", "b"],
                                "answer": "B"}) + "\n", "utf-8")
    assert is_bench_file(path) and get_task("riddles") is riddles
    loaded = load(path)  # what kar run and the API's ablation jobs call
    assert loaded.benchmark == "riddles" and loaded.runner_kind == "task" and loaded.items[0].conditions == ("vanilla", "kar")
    assert loaded.items[0].instruction.startswith("Who? A. a B. b") and loaded.items[0].image_file == tmp_path / "r.png"
    with pytest.raises(ValueError, match="text_only does not apply to riddles"):
        loaded.check_conditions(["text_only"])
    report = build_task_report(load_bench(path), {"vanilla": [{"id": "r1", "response": "Answer: B"}]}, n_boot=0)
    assert report["tasks"]["R-MCQ"]["runs"]["vanilla"]["accuracy"] == 1.0
    with pytest.raises(ConversionUnavailableError, match="no converter for Riddles: nothing released"):
        convert("riddles", path)


def test_unknown_benchmarks_are_named(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"benchmark": "nope", "id": "1"}) + "\n", "utf-8")
    assert not is_bench_file(path)
    with pytest.raises(Exception, match="unknown benchmark 'nope'; choose from avmeme, drivelhub, memecult, memereacon"):
        load_bench(path, "nope")
