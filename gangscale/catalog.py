"""The node-group catalog file (`--nodegroups`), validated with pydantic.

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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .ingest_dra import device_resource
from .instance_types import NVIDIA_GPU_DEVICE_CLASS, load_instance_types
from .loader import InputError, read_documents
from .model import NodeGroup, Taint
from .resources import GPU, QuantityError, parse_resource_list


MAX_GROUP_SIZE = 2**31 - 1  # an Auto Scaling group's MaxSize is a 32-bit integer
MAX_PRICE_PER_HOUR = 1_000_000.0  # dollars per node-hour; the dearest EC2 instance costs about $100


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
    price_per_hour: float | None = Field(default=None, alias="pricePerHour", ge=0, le=MAX_PRICE_PER_HOUR,
                                         allow_inf_nan=False)
    min_size: int = Field(default=0, alias="minSize", ge=0, le=MAX_GROUP_SIZE)
    max_size: int = Field(alias="maxSize", ge=0, le=MAX_GROUP_SIZE)
    current_size: int = Field(default=0, alias="currentSize", ge=0, le=MAX_GROUP_SIZE)
    allocatable: dict[str, Any] | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    zone: str | None = None  # shorthand for the topology.kubernetes.io/zone label
    devices: dict[str, Any] | None = None  # DRA devices per DeviceClass (a count or "auto"); None: none

    @field_validator("devices")
    @classmethod
    def _device_counts(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        for name, n in (v or {}).items():
            if n == "auto" and name:
                continue
            if not name or isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 2**20:
                raise ValueError(f"devices.{name}: must be 'auto' or a whole number of devices from 0 to {2**20}")
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
    def _sizes(self) -> "NodeGroupSpec":
        if self.max_size < self.min_size:
            raise ValueError(f"maxSize ({self.max_size}) is below minSize ({self.min_size})")
        return self

    def _device_counts_for(self, itype: Any) -> dict[str, int]:
        """The declared devices, `auto` filled from the instance-type table (no entry: none are offered)."""
        out: dict[str, int] = {}
        for cls, n in (self.devices or {}).items():
            if n == "auto":
                if itype is None:
                    raise ValueError(f"devices.{cls}: auto needs an instance type in the table, and "
                                     f"{self.instance_type!r} is not; give a number")
                n = itype.devices().get(cls, 0)
            out[cls] = n
        return out

    def to_node_group(self) -> NodeGroup:
        itype = load_instance_types().get(self.instance_type)
        if self.allocatable is not None:
            alloc = parse_resource_list(self.allocatable, field="allocatable")
        elif itype is not None:
            alloc = itype.allocatable()
        else:
            raise ValueError(f"allocatable: missing and instance type {self.instance_type!r} is not in the table")
        price = self.price_per_hour
        if price is None:
            if itype is None:
                raise ValueError(f"pricePerHour: missing and instance type {self.instance_type!r} is not in the table")
            price = itype.price_per_hour
        devices = self._device_counts_for(itype)
        if devices.get(NVIDIA_GPU_DEVICE_CLASS):
            if self.allocatable is not None and GPU in alloc:
                raise ValueError(f"devices.{NVIDIA_GPU_DEVICE_CLASS} and allocatable.{GPU}: a node's GPUs are run "
                                 "by either NVIDIA's DRA driver or its device plugin, not both; keep one")
            alloc.pop(GPU, None)  # the table's GPUs: the DRA driver owns them on this group
        for cls, n in devices.items():
            if n:
                alloc[device_resource(cls)] = n
        labels = dict(itype.labels()) if itype else {"node.kubernetes.io/instance-type": self.instance_type}
        if self.zone:
            labels["topology.kubernetes.io/zone"] = self.zone
        labels.update(self.labels)
        return NodeGroup(
            name=self.name,
            instance_type=self.instance_type,
            price_per_hour=float(price),
            min_size=self.min_size,
            max_size=self.max_size,
            current_size=self.current_size,
            allocatable=alloc,
            labels=labels,
            taints=tuple(Taint(t.key, t.value, t.effect) for t in self.taints),
        )


def _describe(err: ValidationError) -> str:
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
            spec = NodeGroupSpec.model_validate(raw)
            group = spec.to_node_group()
        except ValidationError as exc:
            warnings.append(f"node group {label}: skipped: {_describe(exc)}")
            continue
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
