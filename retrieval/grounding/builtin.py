"""The built-in routes, registered (:mod:`retrieval.grounding.routes`), and the table of every registered route."""

from __future__ import annotations

from retrieval.grounding import routes
from retrieval.grounding.registry import registered_routes
from retrieval.grounding.route import RouteTable

#: the built-in routes' modules (importing the package registers them)
BUILTIN = tuple(routes.__all__)


def route_table() -> RouteTable:
    """The roles, weights and accept-alone keys of every route registered now."""
    return RouteTable.of(registered_routes())
