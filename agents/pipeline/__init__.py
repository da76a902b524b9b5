"""The KAR pipeline and its baselines (LangGraph), with prompts, extraction parsing, queries and evidence."""

from agents.pipeline.extraction import ExtractedEntity, Extraction, parse_extraction
from agents.pipeline.deps import PipelineConfig, PipelineDeps
from agents.pipeline.graph import build_graph
from agents.pipeline.pipeline import KARPipeline, UnknownConditionError
from agents.pipeline.queries import Query, build_queries, entity_query
from agents.pipeline.state import (
    ABLATION_CONDITIONS,
    CONDITIONS,
    ExplainContext,
    ExplainResult,
    StageEvent,
)

__all__ = [
    "ABLATION_CONDITIONS",
    "CONDITIONS",
    "ExplainContext",
    "ExplainResult",
    "ExtractedEntity",
    "Extraction",
    "KARPipeline",
    "PipelineConfig",
    "PipelineDeps",
    "Query",
    "StageEvent",
    "UnknownConditionError",
    "build_graph",
    "build_queries",
    "entity_query",
    "parse_extraction",
]
