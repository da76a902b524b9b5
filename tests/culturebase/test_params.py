"""The store's and the CPU pool's parameters objects: frozen, one module-level instance, every field saying what
chose it (a bench command, or by hand and on what)."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from culturebase import cpu
from culturebase.store import params as store_params

FIELD = re.compile(r"^    (\w+): [^=]+ = ")
PROVENANCE = re.compile(r"chosen by ``python bench/\w+\.py|set by hand|not tuned", re.IGNORECASE)


def field_comments(cls: type) -> dict[str, str]:
    """Each field's ``#:`` comment (the lines right above it)."""
    out: dict[str, str] = {}
    comment: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            comment.append(stripped[2:].strip())
        elif match := FIELD.match(line):
            out[match.group(1)] = " ".join(comment)
            comment = []
    return out


def check_params(cls: type, instance: object) -> None:
    """``cls`` is frozen, ``instance`` holds its defaults, and every field's comment says what chose it."""
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert instance == cls()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(instance, dataclasses.fields(cls)[0].name, None)
    comments = field_comments(cls)
    assert set(comments) == {f.name for f in dataclasses.fields(cls)}
    for name, text in comments.items():
        assert PROVENANCE.search(text), f"{cls.__name__}.{name}: no provenance in {text!r}"


@pytest.mark.parametrize("cls, instance", [(store_params.StoreParams, store_params.PARAMS), (cpu.CpuParams, cpu.PARAMS)])
def test_every_tuned_value_says_what_chose_it(cls, instance):
    check_params(cls, instance)
