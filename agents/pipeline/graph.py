"""The pipeline graph: a LangGraph ``StateGraph`` built fresh by :func:`build_graph`.

::

    START ─┬─ vanilla | cot | context_note ──► answer ──► END               (1 VLM call)
           └─ search_cot | kar ──► extract ─┬─ kar ──► ground ─┐
                                            └─ search_cot ─────┴─► search ──► reason ──► END
                                                                        (2 VLM calls)

Any node that fails records ``error`` and the graph stops there (the response stays None);
a condition is never swapped for another.  Every VLM call records what it was sent in ``prompts``
(:mod:`agents.vlm.record`: texts verbatim up to ``PipelineConfig.prompt_record_max_chars``, media by
hash, size and dimensions), a failed call too; the reasoning call's record names where its
CultureBase block and its evidence block lie in the text (``sections``), for the diagnostics.  KAR with no entity ≥ τ builds exactly the
Search-CoT queries (the CultureBase part of the query list is empty).

Each node is a module of :mod:`agents.pipeline.nodes` (``async (state, deps) -> update``); this module
only wires them.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from langgraph.graph import END, START, StateGraph

from agents.pipeline.deps import PipelineDeps
from agents.pipeline.nodes import answer, extract, ground, reason, search
from agents.pipeline.state import RETRIEVAL_CONDITIONS, PipelineState

Node = Callable[[PipelineState, PipelineDeps], Awaitable[dict[str, Any]]]


def bind(node: Node, deps: PipelineDeps) -> Callable[[PipelineState], Awaitable[dict[str, Any]]]:
    """``node`` over ``deps``, as the one-argument coroutine LangGraph calls (named after the node)."""

    async def run(state: PipelineState) -> dict[str, Any]:
        return await node(state, deps)

    run.__name__ = run.__qualname__ = node.__name__
    return run


# routing functions are async so LangGraph runs them on the loop, not in a worker thread
async def route_start(state: PipelineState) -> str:
    """Two-call conditions extract first; the others answer in one call."""
    return "extract" if state["condition"] in RETRIEVAL_CONDITIONS else "answer"


async def after_extract(state: PipelineState) -> str:
    """KAR grounds before searching; Search-CoT searches at once."""
    if state.get("error"):
        return END
    return "ground" if state["condition"] == "kar" else "search"


def stop_on_error(next_node: str):
    """A router to ``next_node``, or to the end when a node recorded an error."""

    async def route(state: PipelineState) -> str:
        return END if state.get("error") else next_node

    return route


def build_graph(deps: PipelineDeps):
    """Compile the pipeline graph over ``deps`` (tests build a fresh one per case)."""
    graph = StateGraph(PipelineState)
    for node in (answer, extract, ground, search, reason):
        graph.add_node(node.__name__, bind(node, deps))
    graph.add_conditional_edges(START, route_start, ["answer", "extract"])
    graph.add_edge("answer", END)
    graph.add_conditional_edges("extract", after_extract, ["ground", "search", END])
    graph.add_conditional_edges("ground", stop_on_error("search"), ["search", END])
    graph.add_conditional_edges("search", stop_on_error("reason"), ["reason", END])
    graph.add_edge("reason", END)
    return graph.compile()
