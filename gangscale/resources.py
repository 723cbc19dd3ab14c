"""Kubernetes quantities and integer resource vectors, as the planner imports them.

The arithmetic lives in `cloud_adapters.resources`, the one low module that both
the planner and the cloud adapters (node templates, tags) need; this module is
its name on the planner's side, so dependencies point one way (gangscale →
cloud_adapters). Every amount is an integer in [0, MAX_UNITS].
"""

from __future__ import annotations

from cloud_adapters.resources import (
    CPU,
    GPU,
    MAX_QUANTITY_CHARS,
    MAX_UNITS,
    MEMORY,
    PODS,
    QuantityError,
    add,
    check_bound,
    fits,
    format_amount,
    parse_quantity,
    parse_resource_list,
    sub,
    to_units,
    total,
    vectorizer,
    vmax,
)

__all__ = [
    "CPU",
    "GPU",
    "MAX_QUANTITY_CHARS",
    "MAX_UNITS",
    "MEMORY",
    "PODS",
    "QuantityError",
    "add",
    "check_bound",
    "fits",
    "format_amount",
    "parse_quantity",
    "parse_resource_list",
    "sub",
    "to_units",
    "total",
    "vectorizer",
    "vmax",
]
