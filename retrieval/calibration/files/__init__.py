"""Packaged calibration data: bundled records (``<embedder>.json``) and ordinary captions (``captions.<lang>.txt``)."""
