"""The benchmark-family commands (:mod:`eval.benchmarks.cli`: ``kar bench``, ``kar judge rubric``,
``kar retrieve``, ``kar report-retrieval``).  The benchmarks themselves live in :mod:`eval.tasks`."""
