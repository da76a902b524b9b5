"""The sound route's parameters objects: frozen, one module-level instance each, every field with a comment."""

from __future__ import annotations

import pytest

from retrieval.sounds import fingerprint, route
from tests.retrieval.images.test_params import check_provenance


@pytest.mark.parametrize("cls, instance", [(fingerprint.FingerprintParams, fingerprint.PARAMS), (route.SoundParams, route.PARAMS)])
def test_every_tuned_value_of_the_sound_route_names_the_bench_run_that_chose_it(cls, instance):
    check_provenance(cls, instance, ("CALIBRATION_RUN",), None)
    assert fingerprint.CALIBRATION_RUN.startswith("python bench/sounds.py ")
