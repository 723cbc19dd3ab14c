"""Discovery tags (gangscale's own by default, or CA-style filters) and CA's node-template tags.

A group is gangscale's when it matches one discovery filter. The default filters are gangscale's
own tags, so groups Cluster Autoscaler manages are left alone: `gangscale.io/cluster=<cluster>`, or
`gangscale.io/enabled=true` with `gangscale.io/<cluster>` (the `enabled` tag alone for EKS, whose
node groups belong to their cluster). `--node-group-auto-discovery asg:tag=k1,k2=v` replaces them,
as CA's flag of that name does. The shipped IAM policy allows scaling exactly the groups the default
filters find (`missing_cluster_tag` names the others). A group whose `gangscale.io/cluster` names
another cluster is never ours, whatever filter matched. Node templates read CA's tag keys, so a CA
user switches without retagging. A bad value raises `TagError` naming the tag; the caller skips
that group and keeps the rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .resources import QuantityError, to_units
from .types import Taint

ENABLED_TAG = "k8s.io/cluster-autoscaler/enabled"
CLUSTER_TAG_PREFIX = "k8s.io/cluster-autoscaler/"
TEMPLATE_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
PRICE_TAG = "gangscale.io/price-per-hour"
NODE_GROUP_TAG = "gangscale.io/node-group"  # put on instances gangscale launches itself (aws-fleet)
GANGSCALE_CLUSTER_TAG = "gangscale.io/cluster"  # value: the cluster name; the IAM policy's scope
# "true", with gangscale.io/<cluster>: the IAM policy's other scope
OWN_ENABLED_TAG = "gangscale.io/enabled"
OWN_PREFIX = "gangscale.io/"

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class TagError(ValueError):
    """A tag gangscale reads whose value it cannot use."""


def cluster_tag(cluster_name: str) -> str:
    return f"{CLUSTER_TAG_PREFIX}{cluster_name}"


def own_cluster_tag(cluster_name: str) -> str:
    return f"{OWN_PREFIX}{cluster_name}"


@dataclass(frozen=True, slots=True)
class TagFilter:
    """Tags a group must all carry: `(key, value)`, or `(key, None)` for any value."""

    tags: tuple[tuple[str, str | None], ...]

    def matches(self, tags: Mapping[str, str]) -> bool:
        return all(k in tags and (v is None or tags[k] == v) for k, v in self.tags)

    def __str__(self) -> str:
        return "asg:tag=" + ",".join(k if v is None else f"{k}={v}" for k, v in self.tags)


def parse_auto_discovery(spec: str) -> TagFilter:
    """CA's `--node-group-auto-discovery` form, `asg:tag=<key>[=<value>][,<key>[=<value>]...]`."""
    kind, sep, rest = spec.partition(":")
    if not sep or kind != "asg" or not rest.startswith("tag="):
        raise TagError(
            f"node-group auto-discovery {spec!r}: expected asg:tag=<key>[=<value>],... "
            "(Cluster Autoscaler's form)"
        )
    pairs: list[tuple[str, str | None]] = []
    for item in rest[len("tag=") :].split(","):
        key, has_value, value = item.partition("=")
        if not key.strip():
            raise TagError(f"node-group auto-discovery {spec!r}: an empty tag key")
        pairs.append((key.strip(), value if has_value else None))
    return TagFilter(tuple(pairs))


def default_filters(cluster_name: str, *, cluster_named_tag: bool = True) -> tuple[TagFilter, ...]:
    """gangscale's own tags; `cluster_named_tag=False` (EKS) drops `gangscale.io/<cluster>`."""
    # any value: discovery_state warns
    enabled: tuple[tuple[str, str | None], ...] = ((OWN_ENABLED_TAG, None),)
    if cluster_named_tag:
        enabled += ((own_cluster_tag(cluster_name), None),)
    return (TagFilter(((GANGSCALE_CLUSTER_TAG, cluster_name),)), TagFilter(enabled))


def auto_discovery_filters(
    specs: Iterable[str], cluster_name: str, *, cluster_named_tag: bool = True
) -> tuple[TagFilter, ...]:
    """The filters `specs` name (CA's form), or gangscale's own tags when there are none."""
    parsed = tuple(parse_auto_discovery(s) for s in specs)
    return parsed or default_filters(cluster_name, cluster_named_tag=cluster_named_tag)


def ca_filter(cluster_name: str, *, cluster_named_tag: bool = True) -> TagFilter:
    """Cluster Autoscaler's own auto-discovery tags for this cluster."""
    return TagFilter(
        ((ENABLED_TAG, None),) + (((cluster_tag(cluster_name), None),) if cluster_named_tag else ())
    )


def ca_manages(
    tags: Mapping[str, str], cluster_name: str, *, cluster_named_tag: bool = True
) -> bool:
    """True when CA's default auto-discovery (`asg:tag=<enabled>,<cluster>`) would also find this group."""
    return ca_filter(cluster_name, cluster_named_tag=cluster_named_tag).matches(tags)


def tag_map(tags: Iterable[Mapping[str, object]] | Mapping[str, object] | None) -> dict[str, str]:
    """AWS `[{Key, Value}]` lists (or an EKS map) as a plain dict."""
    if tags is None:
        return {}
    if isinstance(tags, Mapping):
        return {str(k): str(v) for k, v in tags.items()}
    return {
        str(t["Key"]): str(t.get("Value", ""))
        for t in tags
        if isinstance(t, Mapping) and "Key" in t
    }


def discovery_state(
    tags: Mapping[str, str],
    cluster_name: str | None,
    *,
    ca_cluster_tag: bool = True,
    filters: tuple[TagFilter, ...] | None = None,
) -> str | None:
    """None when the group is ours; otherwise why not ('untagged' groups are silently not ours).

    Ours: matched by one of `filters` (default: `default_filters`; `ca_cluster_tag=False` for EKS
    node groups, which belong to their cluster already), and not claimed by another cluster's
    `gangscale.io/cluster`.
    """
    if filters is None:
        if not cluster_name:
            return "untagged"
        filters = default_filters(cluster_name, cluster_named_tag=ca_cluster_tag)
    if not any(f.matches(tags) for f in filters):
        return "untagged"
    own = tags.get(GANGSCALE_CLUSTER_TAG)
    if (
        own is not None and cluster_name and own != cluster_name
    ):  # exact, as the policy's StringEquals
        return f"tag {GANGSCALE_CLUSTER_TAG}={own!r} names another cluster than {cluster_name!r}"
    for key, exact in (
        (OWN_ENABLED_TAG, True),
        (ENABLED_TAG, False),
    ):  # the IAM policy wants exactly "true"
        value = tags.get(key)
        if value is None or not any(k == key and v is None for f in filters for k, v in f.tags):
            continue
        if (value if exact else value.strip().lower()) != "true":
            return f"tag {key}={value!r} is not 'true'"
    return None


def missing_cluster_tag(
    tags: Mapping[str, str], cluster_name: str, *, cluster_in_arn: bool = False
) -> bool:
    """True when the shipped IAM policies (config/iam/) would deny scaling this group.

    It allows `gangscale.io/cluster=<cluster>`, or `gangscale.io/enabled=true` with
    `gangscale.io/<cluster>`; for EKS (`cluster_in_arn`: the resource ARN names the cluster)
    `gangscale.io/enabled=true` alone.
    """
    if tags.get(GANGSCALE_CLUSTER_TAG) == cluster_name:
        return False
    return not (
        tags.get(OWN_ENABLED_TAG) == "true"
        and (cluster_in_arn or own_cluster_tag(cluster_name) in tags)
    )


def own_tags_hint(cluster_name: str, *, cluster_in_arn: bool = False) -> str:
    """The tags to put on a group so that gangscale finds it and the IAM policy lets it scale it."""
    enabled = f"{OWN_ENABLED_TAG}=true" + (
        "" if cluster_in_arn else f" with {own_cluster_tag(cluster_name)}"
    )
    return f"{GANGSCALE_CLUSTER_TAG}={cluster_name}, or {enabled}"


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
        kind, _, name = key[len(TEMPLATE_PREFIX) :].partition("/")
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
        raise TagError(
            f"tag {key}: {value!r} is not 'value:Effect' (Effect one of {', '.join(TAINT_EFFECTS)})"
        )
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
        raise TagError(
            f"tag {PRICE_TAG}: {value!r} must be a finite, non-negative USD per node-hour"
        )
    return price
