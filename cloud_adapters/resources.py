"""Kubernetes quantities and integer resource vectors.

Inside gangscale every amount is an integer: CPU in millicores, memory and
storage in bytes, everything else (pods, GPUs, extended resources) in units.
Integers keep the CP-SAT model exact: no rounding decides whether a pod fits.

Invariant: every amount this module returns is an integer in [0, MAX_UNITS],
so sums over up to a million pods or nodes fit in int64 (numpy and CP-SAT).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from functools import lru_cache

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
# The API server's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go, parseQuantityString):
# an optional sign, ASCII digits '0'-'9' only (it switches on the bytes '0'..'9'), an optional
# fraction, then a suffix; ParseQuantity trims nothing, so " 2 " and Unicode digits ("١٢") are
# errors there. Python's \d would match every Unicode digit, hence [0-9] and no strip().
_QUANTITY = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))"
)
# Longer strings are refused before any arithmetic: a real quantity is a few dozen characters,
# and Python refuses to convert integers of more than 4,300 digits (a ValueError, not ours).
MAX_QUANTITY_CHARS = 64

# The largest amount of one resource, in gangscale's units, that one container, pod, node or node
# group may hold: 2**43 = 8.8e12, i.e. 8 TiB of memory, 8.8 billion CPUs (as millicores) or 8.8e12
# GPUs -- 7x the largest instance in config/aws-instance-types.yaml. The solver sums requests and
# capacities in numpy int64 and CP-SAT (whose bounds are int64 too): 1,000,000 * 2**43 = 8.8e18
# stays below 2**63 - 1 = 9.22e18, so the sum over a million pods (or nodes) at the bound cannot
# overflow. Larger amounts are refused with the field named (a pod's gang becomes invalid, a node or
# node group is skipped with a warning).
MAX_UNITS = 2**43


class QuantityError(ValueError):
    """A string that is not a Kubernetes resource quantity."""


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes quantity ("500m", "16Gi", "1e3", 4) exactly."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        if abs(value) > MAX_UNITS * 1000:  # cheap refusal of huge integers (YAML has no size limit)
            raise QuantityError(f"quantity out of range: {_short(value)}")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a quantity: {value!r}")
        if abs(value) > MAX_UNITS * 1000:  # e.g. the JSON number 1e308
            raise QuantityError(f"quantity out of range: {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {_short(value)}")
    if len(value) > MAX_QUANTITY_CHARS:
        raise QuantityError(
            f"not a quantity: {_short(value)} is longer than {MAX_QUANTITY_CHARS} characters"
        )
    m = _QUANTITY.fullmatch(value)
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


def _short(value: object) -> str:
    """repr of a bad value, cut so one absurd input cannot make an absurd message."""
    text = (
        repr(value)
        if not isinstance(value, int) or abs(value) < 10**30
        else f"an integer of {len(str(abs(value)))} digits"
    )
    return text if len(text) <= 40 else text[:37] + "..."


def check_bound(name: str, units: int) -> int:
    """`units` of resource `name`, refused when above MAX_UNITS (see there why)."""
    if units > MAX_UNITS:
        try:
            amount = format_amount(name, units)
        except OverflowError:  # beyond float range: say how big instead
            amount = f"of {len(str(units))} digits"
        raise QuantityError(
            f"{name} {amount} is above gangscale's limit of {format_amount(name, MAX_UNITS)} per object"
        )
    return units


def to_units(name: str, value: object) -> int:
    """Quantity of resource `name` as an integer in gangscale's units, at most MAX_UNITS.

    CPU rounds up to millicores (as the scheduler does); other resources round
    up to whole units. Negative amounts are rejected.
    """
    if type(value) is str:  # the common case: a handful of distinct strings over thousands of pods
        return _str_units(name, value)
    return _units(name, value)


# The common quantities: ASCII digits and an integral suffix (or `m`), no sign, point or exponent
# ("2490m", "16Gi", "4").
_PLAIN = re.compile(r"([0-9]{1,30})(Ki|Mi|Gi|Ti|Pi|Ei|[kMGTPEm]?)")
_INTEGRAL = {**_BINARY, **{k: int(v) for k, v in _DECIMAL.items() if v.denominator == 1}}


def _plain_units(name: str, value: str) -> int | None:
    """`_units` of a common quantity in integer arithmetic (the same integer as the exact Fraction's ceiling);
    None for any other form."""
    m = _PLAIN.fullmatch(value)
    if m is None:
        return None
    n, suffix = int(m[1]), m[2]
    if suffix == "m":
        return check_bound(name, n if name == CPU else -(-n // 1000))
    return check_bound(name, n * _INTEGRAL[suffix] * (1000 if name == CPU else 1))


def _units(name: str, value: object) -> int:
    if type(value) is str:
        units = _plain_units(name, value)
        if units is not None:
            return units
    q = parse_quantity(value)
    if q < 0:
        raise QuantityError(f"negative quantity for {name}: {value!r}")
    if name == CPU:
        q *= 1000
    return check_bound(name, math.ceil(q))


# Bounded, so a long-running controller's memory stays flat; errors are not cached (lru_cache caches
# only returns), so a bad quantity is reported every time it is read.
_str_units = lru_cache(maxsize=4096)(_units)


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
