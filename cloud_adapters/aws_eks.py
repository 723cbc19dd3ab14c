"""`aws-eks`: EKS managed node groups through the EKS API.

Templates from the node group's instance types (the smallest when several),
labels and taints; growth through UpdateNodegroupConfig, then waiting on
DescribeUpdate so a rejected update is reported, not assumed. Nodes are
matched by their `eks.amazonaws.com/nodegroup` label or, through the backing
Auto Scaling group's instances, by providerID. The cluster's kube-scheduler
scoring strategy comes from DescribeCluster (`scheduler_scoring`); reading it
never raises: a denied call or an absent field is a `SchedulerScoring.unknown`
sentence, and the planner falls back to upstream defaults.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from .aws_asg import asg_instance
from .aws_common import (
    AwsClients,
    AwsOptions,
    AwsProvider,
    aws_pages,
    launch_template_instance_type,
)
from .base import Discovery, Instance, LaunchFailure, ScaleResult, SchedulerScoring
from .cache import TTLMemo
from .errors import (
    CapacityError,
    CloudError,
    ConflictError,
    NotFoundError,
    SizeLimitError,
    classify_message,
    error_class,
)
from .tags import (
    TagError,
    auto_discovery_filters,
    ca_manages,
    discovery_state,
    missing_cluster_tag,
    parse_template_tags,
    tag_map,
)
from .template import MachineShape, TemplateError, build_template
from .types import Node, Taint

NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}
_PLANNABLE = ("ACTIVE", "UPDATING", "DEGRADED")
# EKS update error codes that mean "no room" rather than "misconfigured".
_UPDATE_CAPACITY = {
    "InsufficientFreeAddresses",
    "EniLimitReached",
    "IpNotAvailable",
    "AsgInstanceLaunchFailures",
}
# botocore data/eks/2017-11-01/service-2.json: shape ScoringStrategyType (enum), ResourceWeightValue (min 1, max 100)
SCORING_TYPES = ("LeastAllocated", "MostAllocated")
_WEIGHT_RANGE = (1, 100)
_ASG_NAMES_PER_CALL = 50  # DescribeAutoScalingGroups takes at most MaxRecords (default 50) names


class EksProvider(AwsProvider):
    """The cluster's managed node groups tagged `gangscale.io/cluster=<cluster>` or
    `k8s.io/cluster-autoscaler/enabled=true`."""

    name = "aws-eks"
    no_cluster_name = "an EKS cluster name is needed (--cluster-name)"

    def __init__(
        self,
        cluster_name: str,
        options: AwsOptions | None = None,
        clients: AwsClients | None = None,
    ):
        super().__init__(cluster_name, options, clients)
        self._static: TTLMemo[Any] = TTLMemo(self.options.templates_ttl)
        self.ca_managed: list[str] = []  # discovered node groups CA's auto-discovery tags also mark
        # gangscale's own tags (the `enabled` one alone: a node group belongs to its cluster) or CA-style filters
        self.filters = auto_discovery_filters(
            self.options.auto_discovery, cluster_name, cluster_named_tag=False
        )

    def _nodegroup(self, group: str) -> dict[str, Any]:
        return self._call(
            "eks", "DescribeNodegroup", group, clusterName=self.cluster_name, nodegroupName=group
        )["nodegroup"]

    # ------------------------------------------------------------ scheduler
    def scheduler_scoring(self) -> SchedulerScoring:
        """DescribeCluster's `cluster.kubeSchedulerConfig.nodeResourcesFit.scoringStrategy`; never raises."""
        try:
            cluster = self._call("eks", "DescribeCluster", name=self.cluster_name)["cluster"]
        except (
            CloudError
        ) as exc:  # AccessDenied (no eks:DescribeCluster), throttled past retries, not found
            return SchedulerScoring(
                unknown=f"eks:DescribeCluster {self.cluster_name} failed: {exc}"
            )
        return scoring_of(cluster if isinstance(cluster, dict) else {}, self.cluster_name)

    # ------------------------------------------------------------ discovery
    def _discover(self) -> Discovery:
        out = Discovery()
        names = aws_pages(
            self.clients,
            self.name,
            "eks",
            "ListNodegroups",
            "nodegroups",
            clusterName=self.cluster_name,
        )
        raws = []
        for n in sorted(names):
            try:
                raws.append(self._nodegroup(n))
            except NotFoundError as exc:  # deleted between ListNodegroups and DescribeNodegroup
                out.warnings.append(f"{self.name} node group {n}: skipped: {exc}")
        tagged = [
            r
            for r in raws
            if discovery_state(tag_map(r.get("tags")), self.cluster_name, filters=self.filters)
            != "untagged"
        ]
        self.iam_unscoped, self.ca_managed = [], []
        self.types.prefetch({t for r in tagged for t in r.get("instanceTypes") or []})
        self._raw = {}
        for raw in tagged:
            build = partial(self._template_of, raw, out.warnings)
            self._adopt(out, "node group", raw["nodegroupName"], raw, build)
        return out

    def _template_of(self, raw: dict[str, Any], warnings: list[str]):
        name = raw["nodegroupName"]
        tags = tag_map(raw.get("tags"))
        why = discovery_state(tags, self.cluster_name, filters=self.filters)
        if why:
            raise TagError(why)
        if missing_cluster_tag(tags, self.cluster_name, cluster_in_arn=True):
            self.iam_unscoped.append(name)
        if ca_manages(tags, self.cluster_name, cluster_named_tag=False):
            self.ca_managed.append(name)
        if raw.get("status") not in _PLANNABLE:
            raise TemplateError(f"status is {raw.get('status')!r}")
        template_tags = parse_template_tags(tags)
        warnings.extend(f"{self.name} node group {name}: {n}" for n in template_tags.notes)
        taints = []
        for t in raw.get("taints") or []:
            effect = _EFFECTS.get(str(t.get("effect")))
            if not effect or not t.get("key"):
                raise TemplateError(f"taint {t!r} has no key or an unknown effect")
            taints.append(Taint(str(t["key"]), str(t.get("value") or ""), effect))
        labels = {str(k): str(v) for k, v in (raw.get("labels") or {}).items()}
        labels[NODEGROUP_LABEL] = name
        labels[CAPACITY_TYPE_LABEL] = str(raw.get("capacityType") or "ON_DEMAND")
        scaling = raw.get("scalingConfig") or {}
        return build_template(
            name,
            self._shape(raw),
            min_size=int(scaling.get("minSize", 0)),
            max_size=int(scaling.get("maxSize", 0)),
            target_size=int(scaling.get("desiredSize", 0)),
            tags=template_tags,
            reserve=self.options.reserve,
            zones=self._zones(raw.get("subnets") or [], name),
            region=self.clients.region,
            labels=labels,
            taints=taints,
        )

    def _shape(self, raw: dict[str, Any]) -> MachineShape:
        types = list(raw.get("instanceTypes") or [])
        if not types and raw.get("launchTemplate"):
            types = [self._launch_template_type(raw["launchTemplate"], raw["nodegroupName"])]
        if not types:
            raise TemplateError("names no instance type")
        return self.types.smallest(types)

    def _launch_template_type(self, lt: dict[str, Any], group: str) -> str:
        if not (lt.get("id") or lt.get("name")):
            raise TemplateError("its launch template has neither an id nor a name")
        ref = (
            {"LaunchTemplateId": str(lt["id"])}
            if lt.get("id")
            else {"LaunchTemplateName": str(lt["name"])}
        )
        version = str(lt.get("version") or "$Default")

        def load() -> str:
            itype = launch_template_instance_type(self.clients, self.name, group, ref, version)
            if not itype:
                raise TemplateError(
                    "neither the node group nor its launch template names an instance type"
                )
            return itype

        return self._static.get(("lt", *ref.values(), version), load)

    def _zones(self, subnets: list[str], group: str) -> list[str]:
        if not subnets:
            return []
        key = ("subnets", tuple(sorted(subnets)))

        def load() -> list[str]:
            try:
                found = self._call("ec2", "DescribeSubnets", group, SubnetIds=list(subnets))[
                    "Subnets"
                ]
            except NotFoundError:
                return []  # no zone label: a zone-pinned pod will not be planned onto the group
            return sorted({s["AvailabilityZone"] for s in found})

        return self._static.get(key, load)

    # --------------------------------------------------------------- sizing
    def target_size(self, group: str) -> int:
        return int(self._nodegroup(group).get("scalingConfig", {}).get("desiredSize", 0))

    def _set_desired(self, group: str, raw: dict[str, Any], desired: int) -> None:
        scaling = dict(raw.get("scalingConfig") or {})
        scaling["desiredSize"] = desired
        update = self._call(
            "eks",
            "UpdateNodegroupConfig",
            group,
            clusterName=self.cluster_name,
            nodegroupName=group,
            scalingConfig=scaling,
        )["update"]
        self._wait(group, update)

    def _wait(self, group: str, update: dict[str, Any]) -> None:
        """Poll DescribeUpdate until the update is final; a failed one becomes a typed error."""
        waited = 0.0
        while update.get("status") == "InProgress":
            if waited >= self.options.update_timeout:
                raise ConflictError(
                    f"update {update.get('id')} still in progress after {waited:.0f}s",
                    code="UpdateTimeout",
                    operation="DescribeUpdate",
                    group=group,
                    provider=self.name,
                )
            self.options.sleep(self.options.poll_interval)
            waited += self.options.poll_interval
            update = self._call(
                "eks",
                "DescribeUpdate",
                group,
                name=self.cluster_name,
                nodegroupName=group,
                updateId=update["id"],
            )["update"]
        if update.get("status") in ("Failed", "Cancelled"):
            errors = update.get("errors") or [{}]
            code = str(errors[0].get("errorCode") or "UpdateFailed")
            text = str(
                errors[0].get("errorMessage") or f"update {update.get('status', '').lower()}"
            )
            cls = issue_error(code, text)
            raise cls(
                text, code=code, operation="UpdateNodegroupConfig", group=group, provider=self.name
            )

    def increase_size(self, group: str, delta: int, token: str = "") -> ScaleResult:
        self._check_delta(group, delta, self.name)
        raw = self._nodegroup(group)
        scaling = raw.get("scalingConfig") or {}
        cur, top = int(scaling.get("desiredSize", 0)), int(scaling.get("maxSize", 0))
        if cur + delta > top:
            raise SizeLimitError(
                f"desired {cur} + {delta} exceeds max size {top}",
                operation="UpdateNodegroupConfig",
                group=group,
                provider=self.name,
            )
        self._set_desired(group, raw, cur + delta)
        return ScaleResult(group, cur, cur + delta)

    def decrease_target_size(self, group: str, delta: int) -> ScaleResult:
        self._check_delta(group, delta, self.name)
        raw = self._nodegroup(group)
        scaling = raw.get("scalingConfig") or {}
        cur = int(scaling.get("desiredSize", 0))
        live = sum(1 for i in self._asg_instances(raw) if i.state != "deleting")
        new = cur - delta
        if new < live or new < int(scaling.get("minSize", 0)):
            raise SizeLimitError(
                f"desired {cur} - {delta} is below the group's {live} instances or its min size",
                operation="UpdateNodegroupConfig",
                group=group,
                provider=self.name,
            )
        self._set_desired(group, raw, new)
        return ScaleResult(group, cur, new)

    def delete_instances(self, group: str, instance_ids: list[str]) -> ScaleResult:
        """EKS has no per-instance API: terminate through the backing ASG with decrement, as CA does."""
        raw = self._nodegroup(group)
        members = {i.id for i in self._asg_instances(raw)}
        strangers = [i for i in instance_ids if i not in members]
        if strangers:
            raise NotFoundError(
                f"instances {', '.join(strangers)} are not in the node group",
                operation="TerminateInstanceInAutoScalingGroup",
                group=group,
                provider=self.name,
            )
        scaling = raw.get("scalingConfig") or {}
        cur, low = int(scaling.get("desiredSize", 0)), int(scaling.get("minSize", 0))
        if cur - len(instance_ids) < low:  # the backing ASG would refuse partway through the loop
            raise SizeLimitError(
                f"desired {cur} - {len(instance_ids)} would go below min size {low}",
                operation="TerminateInstanceInAutoScalingGroup",
                group=group,
                provider=self.name,
            )
        for iid in instance_ids:
            self._call(
                "autoscaling",
                "TerminateInstanceInAutoScalingGroup",
                group,
                InstanceId=iid,
                ShouldDecrementDesiredCapacity=True,
            )
        return ScaleResult(group, cur, cur - len(instance_ids), tuple(instance_ids))

    # ---------------------------------------------------------- observation
    def _asg_instances(self, *raws: dict[str, Any]) -> list[Instance]:
        """The instances of the node groups' backing Auto Scaling groups, as few calls as the API allows."""
        group_of = {
            str(a["name"]): r["nodegroupName"]
            for r in raws
            for a in (r.get("resources") or {}).get("autoScalingGroups") or []
            if a.get("name")
        }
        names = sorted(group_of)
        label = raws[0]["nodegroupName"] if len(raws) == 1 else ""  # for errors and debug logs
        out: list[Instance] = []
        for i in range(0, len(names), _ASG_NAMES_PER_CALL):
            asgs = self._call(
                "autoscaling",
                "DescribeAutoScalingGroups",
                label,
                AutoScalingGroupNames=names[i : i + _ASG_NAMES_PER_CALL],
            )["AutoScalingGroups"]
            out.extend(
                asg_instance(m, group_of[a["AutoScalingGroupName"]])
                for a in asgs
                for m in a.get("Instances", [])
                if a.get("AutoScalingGroupName") in group_of
            )
        return out

    def instances(self, group: str) -> list[Instance]:
        return self._asg_instances(self._nodegroup(group))

    def launch_failures(self, group: str, since: datetime) -> list[LaunchFailure]:
        """Health issues of the node group; EKS gives them no time, so `since` cannot filter them."""
        issues = (self._nodegroup(group).get("health") or {}).get("issues") or []
        out = []
        for issue in issues:
            code = str(issue.get("code") or "")
            text = str(issue.get("message") or code)
            cls = issue_error(code, text)
            out.append(
                LaunchFailure(
                    group,
                    None,
                    cls(
                        text,
                        code=code,
                        operation="DescribeNodegroup",
                        group=group,
                        provider=self.name,
                    ),
                )
            )
        return out

    def instance_groups(self) -> dict[str, str]:
        return {i.id: i.group for i in self._asg_instances(*self._raw.values())}

    def group_of_node(self, node: Node, instance_groups: dict[str, str]) -> str | None:
        label = node.labels.get(NODEGROUP_LABEL)
        if label and label in self._raw:
            return label
        return super().group_of_node(node, instance_groups)


def scoring_of(cluster: dict[str, Any], name: str) -> SchedulerScoring:
    """The scoring strategy of a DescribeCluster `cluster` (botocore data/eks/2017-11-01/service-2.json
    `KubeSchedulerConfigResponse` → `NodeResourcesFitConfig` → `ScoringStrategy{type, resources[{name, weight}]}`),
    or why it cannot be used."""
    where = f"DescribeCluster {name}: kubeSchedulerConfig.nodeResourcesFit.scoringStrategy"
    fit = (cluster.get("kubeSchedulerConfig") or {}).get("nodeResourcesFit") or {}
    st = fit.get("scoringStrategy") if isinstance(fit, dict) else None
    if not isinstance(st, dict):
        return SchedulerScoring(
            unknown=f"{where} is absent (not set on the cluster, or an EKS API older than it)"
        )
    # upstream's default when the type is unset (v1 defaults.go)
    kind = st.get("type") or "LeastAllocated"
    if kind not in SCORING_TYPES:
        return SchedulerScoring(
            unknown=f"{where}.type {kind!r} is not one of {', '.join(SCORING_TYPES)}"
        )
    resources = []
    for i, r in enumerate(st.get("resources") or []):
        rname, weight = (r.get("name"), r.get("weight")) if isinstance(r, dict) else (None, None)
        if not isinstance(rname, str) or not rname:
            return SchedulerScoring(unknown=f"{where}.resources[{i}].name is empty")
        low, high = _WEIGHT_RANGE
        if not isinstance(weight, int) or isinstance(weight, bool) or not low <= weight <= high:
            return SchedulerScoring(
                unknown=f"{where}.resources[{i}].weight {weight!r} is not an integer from 1 to 100"
            )
        resources.append((rname, weight))
    return SchedulerScoring(
        str(kind), tuple(resources), source=f"EKS cluster {name} (DescribeCluster)"
    )


def issue_error(code: str, text: str) -> type[CloudError]:
    """The typed error of an EKS update error or health issue (its code, else its words)."""
    if code in _UPDATE_CAPACITY:
        by_text = classify_message(text)
        return by_text if by_text is not CloudError else CapacityError
    cls = error_class(code)
    return cls if cls is not CloudError else classify_message(text, code)
