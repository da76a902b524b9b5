"""Metrics: VIKR (:mod:`.vikr`), benchmark-family tasks (:mod:`.tasks`, :mod:`.answers`),
reference-based (:mod:`.reference`), retrieval (:mod:`.retrieval`), judge reliability
(:mod:`.reliability`); the statistics they share in one place (:mod:`.stats`)."""
