"""The pipeline's nodes, one module each: ``async (state, deps) -> update``; :mod:`agents.pipeline.graph` wires them."""

from agents.pipeline.nodes.answer import answer
from agents.pipeline.nodes.extract import extract
from agents.pipeline.nodes.ground import ground
from agents.pipeline.nodes.reason import reason
from agents.pipeline.nodes.search import search

__all__ = ["answer", "extract", "ground", "reason", "search"]
