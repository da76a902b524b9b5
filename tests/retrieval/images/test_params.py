"""The image route's parameters objects: frozen, one module-level instance each, every field with its provenance."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from retrieval.images import descriptor_index, features, hashes, provenance, route

FIELD = re.compile(r"^    (\w+): [^=]+ = ")


def comment_groups(cls: type) -> dict[str, str]:
    """Each field's comment: the ``#:`` lines above it, or above the fields it is listed with."""
    out: dict[str, str] = {}
    comment: list[str] = []
    after_field = False
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            if after_field:
                comment, after_field = [], False
            comment.append(stripped[2:].strip())
        elif FIELD.match(line):
            out[FIELD.match(line).group(1)] = " ".join(comment)
            after_field = True
    return out


def check_provenance(cls: type, instance: object, runs: tuple[str, ...], per_field: str | None) -> None:
    """``cls`` is frozen, ``instance`` is its defaults, its docstring names one of ``runs`` (a bench command) and every
    field has a comment (naming ``per_field``, e.g. "chosen by", when given)."""
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert instance == cls()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(instance, dataclasses.fields(cls)[0].name, None)
    assert any(run in (cls.__doc__ or "") for run in runs), cls.__name__
    comments = comment_groups(cls)
    assert set(comments) == {f.name for f in dataclasses.fields(cls)}
    for name, text in comments.items():
        assert text, f"{cls.__name__}.{name} has no comment"
        if per_field:
            assert per_field in text, f"{cls.__name__}.{name}: no provenance in {text!r}"


@pytest.mark.parametrize("cls, instance", [
    (route.ImageRouteParams, route.PARAMS),
    (features.FeatureParams, features.FEATURE_PARAMS),
    (features.VerificationParams, features.VERIFICATION_PARAMS),
    (descriptor_index.DescriptorParams, descriptor_index.PARAMS),
    (hashes.HashParams, hashes.PARAMS),
])
def test_every_tuned_value_of_the_image_route_names_the_bench_run_that_chose_it(cls, instance):
    check_provenance(cls, instance, ("TUNING_RUN", "SCALE_RUN"), "chosen by")


def test_the_bench_runs_named_are_bench_commands():
    for run in (provenance.TUNING_RUN, provenance.SCALE_RUN, provenance.REPORT_RUN):
        assert run.startswith("python bench/templates.py --seed ")
