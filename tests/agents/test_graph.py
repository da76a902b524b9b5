"""The graph factory: a fresh compiled graph per call, wiring one node module per step."""

import importlib

from agents.pipeline import PipelineDeps, build_graph
from agents.pipeline import nodes

STEPS = ("answer", "extract", "ground", "search", "reason")


def test_build_graph_compiles_a_fresh_graph_each_call():
    first, second = build_graph(PipelineDeps(vlm=None)), build_graph(PipelineDeps(vlm=None))
    assert first is not second
    assert set(STEPS) <= set(first.get_graph().nodes)


def test_each_step_is_the_node_of_its_own_module():
    for step in STEPS:
        module = importlib.import_module(f"agents.pipeline.nodes.{step}")
        assert getattr(nodes, step) is getattr(module, step)
