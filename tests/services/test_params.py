"""The service's parameters object: frozen, one module-level instance, every field saying what chose it."""

from __future__ import annotations

from services.params import PARAMS, ServiceParams
from tests.culturebase.test_params import check_params


def test_every_tuned_value_of_the_service_says_what_chose_it():
    check_params(ServiceParams, PARAMS)
