"""The registry of grounding routes (in the manner of lm-evaluation-harness's ``lm_eval/api/registry.py``).

A route class registers itself with :func:`register_route`; the grounder builds one instance of every
registered route (:func:`registered_routes`, in registration order) and runs them phase by phase.  The
built-in routes register when :mod:`retrieval.grounding.routes` is imported; a route defined anywhere
else registers the same way and needs no other edit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from retrieval.grounding.route import PHASES, ROLES

T = TypeVar("T")

#: route name → route class, in registration order
ROUTE_REGISTRY: dict[str, type] = {}

#: what a route class must declare (:class:`retrieval.grounding.route.Route`)
ATTRIBUTES = ("name", "scores", "reads", "role", "weight", "accepts_alone", "phases")
METHODS = ("wanted", "run")


def check_route(cls: Any) -> None:
    """Raise TypeError unless ``cls`` implements :class:`retrieval.grounding.route.Route`."""
    missing = [a for a in ATTRIBUTES if not hasattr(cls, a)] + [m for m in METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise TypeError(f"route {getattr(cls, 'name', cls)!r} does not implement Route: missing {', '.join(missing)}")
    if cls.role not in ROLES:
        raise TypeError(f"route {cls.name!r}: role {cls.role!r} is none of {', '.join(ROLES)}")
    unknown = [p for p in cls.phases if p not in PHASES]
    if unknown:
        raise TypeError(f"route {cls.name!r}: unknown phase(s) {', '.join(unknown)}; phases: {', '.join(PHASES)}")
    if not cls.scores:
        raise TypeError(f"route {cls.name!r} declares no route-score key")


def register_route(name: str | None = None) -> Callable[[type[T]], type[T]]:
    """Class decorator: register a route under ``name`` (default: the class's ``name``).

    Registering a second route under a taken name, or a class that does not implement the protocol,
    raises; :func:`unregister_route` removes one."""

    def decorate(cls: type[T]) -> type[T]:
        key = name or getattr(cls, "name", None)
        if not key:
            raise TypeError(f"route class {cls.__name__} has no name")
        check_route(cls)
        if key in ROUTE_REGISTRY and ROUTE_REGISTRY[key] is not cls:
            raise ValueError(f"route {key!r} is already registered ({ROUTE_REGISTRY[key].__name__})")
        ROUTE_REGISTRY[key] = cls
        return cls

    return decorate


def unregister_route(name: str) -> None:
    """Remove a registered route (a plug-in's or a test's)."""
    get_route(name)
    del ROUTE_REGISTRY[name]


def get_route(name: str) -> type:
    """The route class registered under ``name``."""
    try:
        return ROUTE_REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown route {name}; available: {', '.join(ROUTE_REGISTRY)}") from None


def route_names() -> list[str]:
    """The registered routes' names, in registration order."""
    return list(ROUTE_REGISTRY)


def registered_routes() -> list[type]:
    """The registered route classes, in registration order."""
    return list(ROUTE_REGISTRY.values())
