"""The node-group catalog file (`--nodegroups`), validated as its pydantic model states.

An entry may leave out `allocatable` and `pricePerHour` when its instance type
is in `config/aws-instance-types.yaml`; explicit values always win. `devices`
(DRA devices per DeviceClass, e.g. `{gpu.nvidia.com: 8}`, or `auto` for the
table's GPU count) is opt-in: without it a group offers no DRA devices. They
become allocatable `dra.gangscale.io/<class>` units (`ingest_dra.device_resource`).
A bad entry is skipped with a warning that names the field; the rest still loads.

Invariant: every loaded price is a finite number within [0, MAX_PRICE_PER_HOUR]
and every size an integer within [0, MAX_GROUP_SIZE], so no cost or node count
downstream can overflow or become NaN. A physical GPU is offered once: a group
with `gpu.nvidia.com` DRA devices offers no `nvidia.com/gpu` (a node's GPUs are
run by either the device plugin or the DRA driver, never both).

Entries are checked by hand first (`_plain_entry`: exactly the well-formed entries the pydantic model
accepts, with the values it would give); anything else goes to the pydantic model (`_spec_model`, built on
first use), which accepts or refuses it and names the field. So a plain catalog never imports pydantic
(~0.1 s of the default `plan`) and a bad one gets the same sentence as ever.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ingest_dra import device_resource
from .instance_types import NVIDIA_GPU_DEVICE_CLASS, load_instance_types
from .loader import InputError, read_documents
from .model import NodeGroup, Taint
from .resources import GPU, QuantityError, parse_resource_list

MAX_GROUP_SIZE = 2**31 - 1  # an Auto Scaling group's MaxSize is a 32-bit integer
MAX_PRICE_PER_HOUR = 1_000_000.0  # dollars per node-hour; the dearest EC2 instance costs about $100
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_DEVICES = 2**20  # per DeviceClass per node
_KEYS = frozenset(
    {
        "name",
        "instanceType",
        "pricePerHour",
        "minSize",
        "maxSize",
        "currentSize",
        "allocatable",
        "labels",
        "taints",
        "zone",
        "devices",
    }
)


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One catalog entry as validated, by `_plain_entry` or the pydantic model: the same values either way."""

    name: str
    instance_type: str
    price_per_hour: float | None
    min_size: int
    max_size: int
    current_size: int
    allocatable: dict[str, Any] | None
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    zone: str | None
    devices: dict[str, Any] | None


def _devices_problem(v: dict[str, Any] | None) -> str | None:
    """Why a `devices` map is refused (None: it is fine)."""
    for name, n in (v or {}).items():
        if n == "auto" and name:
            continue
        if not name or isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_DEVICES:
            return f"devices.{name}: must be 'auto' or a whole number of devices from 0 to {MAX_DEVICES}"
    return None


def _str_dict(v: Any, values: bool = False) -> bool:
    return type(v) is dict and all(
        type(k) is str and (not values or type(x) is str) for k, x in v.items()
    )


def _size(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_GROUP_SIZE


def _price(v: Any) -> bool:
    return v is None or (
        type(v) in (int, float) and 0 <= v <= MAX_PRICE_PER_HOUR and math.isfinite(v)
    )


def _plain_taint(t: Any) -> Taint | None:
    if type(t) is not dict or not t.keys() <= {"key", "value", "effect"}:
        return None
    key, value, effect = t.get("key"), t.get("value", ""), t.get("effect")
    if type(key) is not str or not key or type(value) is not str or effect not in TAINT_EFFECTS:
        return None
    return Taint(key, value, effect)


def _plain_entry(raw: Any) -> CatalogEntry | None:
    """The entry when it is plainly valid (the pydantic model would accept it, with these values); None when
    anything is off or merely unusual (a snake_case key, a float size, ...): the model decides those."""
    if type(raw) is not dict or not raw.keys() <= _KEYS:
        return None
    name, itype, price = raw.get("name"), raw.get("instanceType"), raw.get("pricePerHour")
    # unchecked until the test below (`_size`): Any, as read
    sizes: tuple[Any, Any, Any] = (
        raw.get("minSize", 0),
        raw.get("maxSize"),
        raw.get("currentSize", 0),
    )
    alloc, labels, zone, devices = (
        raw.get("allocatable"),
        raw.get("labels", {}),
        raw.get("zone"),
        raw.get("devices"),
    )
    taints = (
        [_plain_taint(t) for t in raw.get("taints", [])]
        if type(raw.get("taints", [])) is list
        else [None]
    )
    if not (
        type(name) is str
        and name
        and type(itype) is str
        and itype
        and _price(price)
        and all(_size(s) for s in sizes)
        and sizes[1] >= sizes[0]
        and None not in taints
        and (zone is None or type(zone) is str)
        and _str_dict(labels, values=True)
        and (devices is None or (_str_dict(devices) and _devices_problem(devices) is None))
        and (alloc is None or (_str_dict(alloc) and _quantities_ok(alloc)))
    ):
        return None
    return CatalogEntry(
        name,
        itype,
        None if price is None else float(price),
        sizes[0],
        sizes[1],
        sizes[2],
        None if alloc is None else dict(alloc),
        dict(labels),
        tuple(t for t in taints if t is not None),  # none is None: checked above
        zone,
        None if devices is None else dict(devices),
    )


def _quantities_ok(alloc: dict[str, Any]) -> bool:
    try:
        parse_resource_list(alloc, field="allocatable")
    except Exception:  # noqa: BLE001 - whatever it is, the model decides and words it
        return False
    return True


@functools.cache
def _spec_model() -> Any:
    """The pydantic model of an entry, built on first use: it decides every entry `_plain_entry` does not."""
    from typing import Literal

    from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

    class TaintSpec(BaseModel):
        model_config = ConfigDict(extra="forbid")
        key: str = Field(min_length=1)
        value: str = ""
        effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    class NodeGroupSpec(BaseModel):
        """One catalog entry, in the same camelCase as the rest of Kubernetes."""

        model_config = ConfigDict(extra="forbid", populate_by_name=True)
        name: str = Field(min_length=1)
        instance_type: str = Field(alias="instanceType", min_length=1)
        price_per_hour: float | None = Field(
            default=None, alias="pricePerHour", ge=0, le=MAX_PRICE_PER_HOUR, allow_inf_nan=False
        )
        min_size: int = Field(default=0, alias="minSize", ge=0, le=MAX_GROUP_SIZE)
        max_size: int = Field(alias="maxSize", ge=0, le=MAX_GROUP_SIZE)
        current_size: int = Field(default=0, alias="currentSize", ge=0, le=MAX_GROUP_SIZE)
        allocatable: dict[str, Any] | None = None
        labels: dict[str, str] = Field(default_factory=dict)
        taints: list[TaintSpec] = Field(default_factory=list)
        zone: str | None = None  # shorthand for the topology.kubernetes.io/zone label
        # DRA devices per DeviceClass (a count or "auto"); None: none
        devices: dict[str, Any] | None = None

        @field_validator("devices")
        @classmethod
        def _device_counts(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
            problem = _devices_problem(v)
            if problem:
                raise ValueError(problem)
            return v

        @field_validator("allocatable")
        @classmethod
        def _quantities(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
            if v is not None:
                try:
                    parse_resource_list(v, field="allocatable")
                except QuantityError as exc:
                    raise ValueError(str(exc)) from None
            return v

        @model_validator(mode="after")
        def _sizes(self) -> NodeGroupSpec:
            if self.max_size < self.min_size:
                raise ValueError(f"maxSize ({self.max_size}) is below minSize ({self.min_size})")
            return self

    return NodeGroupSpec


def _validated_entry(raw: Any) -> CatalogEntry:
    """The entry as the pydantic model reads it; ValueError naming each bad field when it refuses it."""
    from pydantic import ValidationError

    try:
        s = _spec_model().model_validate(raw)
    except ValidationError as exc:
        raise ValueError(_describe(exc)) from None
    return CatalogEntry(
        s.name,
        s.instance_type,
        s.price_per_hour,
        s.min_size,
        s.max_size,
        s.current_size,
        s.allocatable,
        s.labels,
        tuple(Taint(t.key, t.value, t.effect) for t in s.taints),
        s.zone,
        s.devices,
    )


def _device_counts_for(entry: CatalogEntry, itype: Any) -> dict[str, int]:
    """The declared devices, `auto` filled from the instance-type table (no entry: none are offered)."""
    out: dict[str, int] = {}
    for cls, n in (entry.devices or {}).items():
        if n == "auto":
            if itype is None:
                raise ValueError(
                    f"devices.{cls}: auto needs an instance type in the table, and "
                    f"{entry.instance_type!r} is not; give a number"
                )
            n = itype.devices().get(cls, 0)
        out[cls] = n
    return out


def to_node_group(entry: CatalogEntry) -> NodeGroup:
    itype = load_instance_types().get(entry.instance_type)
    if entry.allocatable is not None:
        alloc = parse_resource_list(entry.allocatable, field="allocatable")
    elif itype is not None:
        alloc = itype.allocatable()
    else:
        raise ValueError(
            f"allocatable: missing and instance type {entry.instance_type!r} is not in the table"
        )
    price = entry.price_per_hour
    if price is None:
        if itype is None:
            raise ValueError(
                f"pricePerHour: missing and instance type {entry.instance_type!r} is not in the table"
            )
        price = itype.price_per_hour
    devices = _device_counts_for(entry, itype)
    if devices.get(NVIDIA_GPU_DEVICE_CLASS):
        if entry.allocatable is not None and GPU in alloc:
            raise ValueError(
                f"devices.{NVIDIA_GPU_DEVICE_CLASS} and allocatable.{GPU}: a node's GPUs are run "
                "by either NVIDIA's DRA driver or its device plugin, not both; keep one"
            )
        alloc.pop(GPU, None)  # the table's GPUs: the DRA driver owns them on this group
    for cls, n in devices.items():
        if n:
            alloc[device_resource(cls)] = n
    labels = (
        dict(itype.labels()) if itype else {"node.kubernetes.io/instance-type": entry.instance_type}
    )
    if entry.zone:
        labels["topology.kubernetes.io/zone"] = entry.zone
    labels.update(entry.labels)
    return NodeGroup(
        name=entry.name,
        instance_type=entry.instance_type,
        price_per_hour=float(price),
        min_size=entry.min_size,
        max_size=entry.max_size,
        current_size=entry.current_size,
        allocatable=alloc,
        labels=labels,
        taints=entry.taints,
    )


def _describe(err: Any) -> str:
    """A pydantic ValidationError as `field: problem; ...`."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "entry"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def parse_catalog(entries: list[Any]) -> tuple[list[NodeGroup], list[str]]:
    """Catalog entries -> node groups, plus one warning per entry skipped."""
    groups: list[NodeGroup] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for i, raw in enumerate(entries):
        label = raw.get("name", f"#{i}") if isinstance(raw, dict) else f"#{i}"
        try:
            group = to_node_group(_plain_entry(raw) or _validated_entry(raw))
        except (ValueError, QuantityError) as exc:
            warnings.append(f"node group {label}: skipped: {exc}")
            continue
        if group.name in seen:
            warnings.append(f"node group {group.name}: skipped: duplicate name")
            continue
        seen.add(group.name)
        groups.append(group)
    return groups, warnings


def load_catalog(path: str | Path) -> tuple[list[NodeGroup], list[str]]:
    """Read a catalog file: a list, `{nodeGroups: [...]}`, or several YAML documents."""
    docs = read_documents(path)
    entries: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            entries.extend(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("nodeGroups"), list):
            entries.extend(doc["nodeGroups"])
        elif isinstance(doc, dict) and "name" in doc:
            entries.append(doc)
        elif doc is not None:
            raise InputError(f"{path}: expected a list of node groups or a map with 'nodeGroups'")
    return parse_catalog(entries)
