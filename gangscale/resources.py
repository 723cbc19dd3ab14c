"""Kubernetes quantities and integer resource vectors.

Inside gangscale every amount is an integer: CPU in millicores, memory and
storage in bytes, everything else (pods, GPUs, extended resources) in units.
Integers keep the CP-SAT model exact: no rounding decides whether a pod fits.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Callable, Iterable, Mapping, Sequence

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes resource quantity."""


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes quantity ("500m", "16Gi", "1e3", 4) exactly."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a quantity: {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    m = _QUANTITY.match(value.strip())
    if not m:
        raise QuantityError(f"not a quantity: {value!r}")
    num = Fraction(m.group("num"))
    if m.group("bin"):
        return num * _BINARY[m.group("bin")]
    if m.group("exp"):
        exp = int(m.group("exp")[1:])
        if abs(exp) > 30:
            raise QuantityError(f"quantity out of range: {value!r}")
        return num * Fraction(10) ** exp
    return num * _DECIMAL[m.group("dec") or ""]


def to_units(name: str, value: object) -> int:
    """Quantity of resource `name` as an integer in gangscale's units.

    CPU rounds up to millicores (as the scheduler does); other resources round
    up to whole units. Negative amounts are rejected.
    """
    q = parse_quantity(value)
    if q < 0:
        raise QuantityError(f"negative quantity for {name}: {value!r}")
    if name == CPU:
        q *= 1000
    return math.ceil(q)


def parse_resource_list(raw: object, *, field: str = "resources") -> dict[str, int]:
    """A Kubernetes ResourceList (name -> quantity) as integer units."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise QuantityError(f"{field} must be a map of resource name to quantity")
    out: dict[str, int] = {}
    for name, value in raw.items():
        try:
            out[str(name)] = to_units(str(name), value)
        except QuantityError as exc:
            raise QuantityError(f"{field}.{name}: {exc}") from None
    return out


def vectorizer(names: Sequence[str]) -> Callable[[Mapping[str, int]], tuple[int, ...]]:
    """Resource maps -> fixed-order tuples over `names` (resources not named are dropped)."""
    index = {r: i for i, r in enumerate(names)}
    width = len(names)

    def vec(d: Mapping[str, int]) -> tuple[int, ...]:
        v = [0] * width
        for k, x in d.items():
            i = index.get(k)
            if i is not None:
                v[i] = x
        return tuple(v)

    return vec


def add(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return out


def vmax(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0), v)
    return out


def fits(req: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """True when every requested amount is available (missing means zero)."""
    return all(v <= free.get(k, 0) for k, v in req.items() if v > 0)


def total(vectors: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in vectors:
        for k, x in v.items():
            out[k] = out.get(k, 0) + x
    return out


def format_amount(name: str, units: int) -> str:
    """Human form of an integer amount: cores, GiB, plain counts."""
    if name == CPU:
        return f"{units / 1000:g}" if units % 1000 else str(units // 1000)
    if name in (MEMORY, "ephemeral-storage") or name.startswith("hugepages-"):
        return f"{units / 2**30:.1f}Gi"
    return str(units)
