"""CultureKAR agents: VLM backends, the KAR pipeline and its baselines, the ablation runner.

The pipeline names are re-exported lazily so ``import agents.vlm`` (used by the judges)
does not pull in LangGraph.
"""

from typing import Any

_PIPELINE_NAMES = (
    "ABLATION_CONDITIONS",
    "CONDITIONS",
    "ExplainContext",
    "ExplainResult",
    "KARPipeline",
    "PipelineConfig",
    "PipelineDeps",
    "StageEvent",
    "build_graph",
)


def __getattr__(name: str) -> Any:
    if name in _PIPELINE_NAMES:
        import agents.pipeline as pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")


__all__ = list(_PIPELINE_NAMES)
