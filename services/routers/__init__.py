"""One router per resource: explain, entities, kb, crawl_jobs, ablations, health, web."""
