"""Retrieval: embedders, entity grounding, web search backends, OCR."""
