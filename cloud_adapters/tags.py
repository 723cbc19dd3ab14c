"""Cluster Autoscaler's AWS tags: auto-discovery and node templates, plus gangscale's own tags.

Same keys as CA so a CA user can switch without retagging. A bad value raises
`TagError` naming the tag; the caller skips that group and keeps the rest.
`gangscale.io/cluster: <cluster name>` is what the shipped IAM policy scopes
every mutating call to: a group found by CA's tags alone is read and planned,
but the policy denies scaling it (`missing_cluster_tag` says so).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .types import Taint
from .resources import QuantityError, to_units

ENABLED_TAG = "k8s.io/cluster-autoscaler/enabled"
CLUSTER_TAG_PREFIX = "k8s.io/cluster-autoscaler/"
TEMPLATE_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
PRICE_TAG = "gangscale.io/price-per-hour"
NODE_GROUP_TAG = "gangscale.io/node-group"  # put on instances gangscale launches itself (aws-fleet)
GANGSCALE_CLUSTER_TAG = "gangscale.io/cluster"  # value: the cluster name; the IAM policy's scope

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class TagError(ValueError):
    """A tag gangscale reads whose value it cannot use."""


def cluster_tag(cluster_name: str) -> str:
    return f"{CLUSTER_TAG_PREFIX}{cluster_name}"


def tag_map(tags: Iterable[Mapping[str, object]] | Mapping[str, object] | None) -> dict[str, str]:
    """AWS `[{Key, Value}]` lists (or an EKS map) as a plain dict."""
    if tags is None:
        return {}
    if isinstance(tags, Mapping):
        return {str(k): str(v) for k, v in tags.items()}
    return {str(t["Key"]): str(t.get("Value", "")) for t in tags if isinstance(t, Mapping) and "Key" in t}


def discovery_state(tags: Mapping[str, str], cluster_name: str | None, *,
                    ca_cluster_tag: bool = True) -> str | None:
    """None when the group is ours; otherwise why not ('untagged' groups are silently not ours).

    Ours: `gangscale.io/cluster=<cluster_name>`, or CA's auto-discovery tags
    (enabled, plus `k8s.io/cluster-autoscaler/<cluster_name>` when
    `ca_cluster_tag`; EKS node groups belong to their cluster already).
    """
    own = tags.get(GANGSCALE_CLUSTER_TAG)
    if own is not None and cluster_name:
        if own == cluster_name:  # exact, as the policy's StringEquals
            return None
        return "untagged" if ENABLED_TAG not in tags else \
            f"tag {GANGSCALE_CLUSTER_TAG}={own!r} names another cluster than {cluster_name!r}"
    if ENABLED_TAG not in tags or (ca_cluster_tag and cluster_name is not None
                                   and cluster_tag(cluster_name) not in tags):
        return "untagged"
    if tags[ENABLED_TAG].strip().lower() != "true":
        return f"tag {ENABLED_TAG}={tags[ENABLED_TAG]!r} is not 'true'"
    return None


def missing_cluster_tag(tags: Mapping[str, str], cluster_name: str) -> bool:
    """True when the IAM policy would deny scaling this group: no `gangscale.io/cluster=<cluster_name>`."""
    return tags.get(GANGSCALE_CLUSTER_TAG) != cluster_name


def valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_PREFIX.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME_PART.match(name))


@dataclass(slots=True)
class TemplateTags:
    """What the node-template tags add to a group's template."""

    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    resources: dict[str, int] = field(default_factory=dict)
    price_per_hour: float | None = None
    notes: list[str] = field(default_factory=list)


def parse_template_tags(tags: Mapping[str, str]) -> TemplateTags:
    """Read `.../node-template/{label,taint,resources}/<k>` and the price tag; raise TagError on bad values."""
    out = TemplateTags()
    for key in sorted(tags):
        value = tags[key]
        if key == PRICE_TAG:
            out.price_per_hour = parse_price(value)
            continue
        if not key.startswith(TEMPLATE_PREFIX):
            continue
        kind, _, name = key[len(TEMPLATE_PREFIX):].partition("/")
        if kind == "autoscaling-options":
            continue  # CA's per-group autoscaler options: nothing for the template
        if not name:
            raise TagError(f"tag {key}: names no {kind or 'template'} key")
        if kind == "label":
            if not valid_label_key(name):
                raise TagError(f"tag {key}: {name!r} is not a valid label key")
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise TagError(f"tag {key}: {value!r} is not a valid label value")
            out.labels[name] = value
        elif kind == "taint":
            out.taints.append(parse_taint(key, name, value))
        elif kind == "resources":
            try:
                out.resources[name] = to_units(name, value)
            except QuantityError as exc:
                raise TagError(f"tag {key}: {exc}") from None
        else:
            out.notes.append(f"tag {key}: unknown node-template kind {kind!r}, ignored")
    return out


def parse_taint(key: str, name: str, value: str) -> Taint:
    """CA's `value:Effect` (or `:Effect`) into a Taint."""
    if not valid_label_key(name):
        raise TagError(f"tag {key}: {name!r} is not a valid taint key")
    taint_value, sep, effect = value.rpartition(":")
    if not sep:
        raise TagError(f"tag {key}: {value!r} is not 'value:Effect' (Effect one of {', '.join(TAINT_EFFECTS)})")
    if effect not in TAINT_EFFECTS:
        raise TagError(f"tag {key}: effect {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
    if taint_value and (len(taint_value) > 63 or not _LABEL_VALUE.match(taint_value)):
        raise TagError(f"tag {key}: {taint_value!r} is not a valid taint value")
    return Taint(name, taint_value, effect)


def parse_price(value: str) -> float:
    try:
        price = float(value)
    except ValueError:
        raise TagError(f"tag {PRICE_TAG}: {value!r} is not a number (USD per node-hour)") from None
    if not math.isfinite(price) or price < 0:
        raise TagError(f"tag {PRICE_TAG}: {value!r} must be a finite, non-negative USD per node-hour")
    return price
