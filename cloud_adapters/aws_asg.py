"""`aws-asg`: EC2 Auto Scaling groups, discovered and templated exactly as Cluster Autoscaler does.

Discovery by gangscale's own tags (`gangscale.io/cluster=<cluster>`, or `gangscale.io/enabled=true`
with `gangscale.io/<cluster>`), or by CA-style `asg:tag=...` filters (`AwsOptions.auto_discovery`);
the template from the launch template, mixed-instances policy or launch
configuration's instance type through DescribeInstanceTypes; growth through
SetDesiredCapacity; launch failures from DescribeScalingActivities; specific
instances given back with TerminateInstanceInAutoScalingGroup.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import partial
from typing import Any

from .aws_common import (
    AwsClients,
    AwsOptions,
    AwsProvider,
    aws_pages,
    launch_template_instance_type,
)
from .base import Discovery, Instance, InstanceState, LaunchFailure, ScaleResult
from .cache import TTLMemo
from .errors import NotFoundError, SizeLimitError, classify_message
from .tags import (
    TagError,
    auto_discovery_filters,
    ca_manages,
    discovery_state,
    missing_cluster_tag,
    parse_template_tags,
    tag_map,
)
from .template import TemplateError, build_template

ASG_STATES: dict[str, InstanceState] = {
    "Pending": "launching",
    "Pending:Wait": "launching",
    "Pending:Proceed": "launching",
    "InService": "running",
    "Standby": "running",
    "EnteringStandby": "running",
    "Terminating": "deleting",
    "Terminating:Wait": "deleting",
    "Terminating:Proceed": "deleting",
    "Terminated": "deleting",
    "Detaching": "deleting",
    "Detached": "deleting",
    "Warmed:Pending": "launching",
}


def asg_instance(raw: dict[str, Any], group: str) -> Instance:
    """One `Instances` entry of DescribeAutoScalingGroups, as a member of `group`."""
    return Instance(
        raw["InstanceId"],
        group,
        ASG_STATES.get(raw.get("LifecycleState", ""), "running"),
        raw.get("AvailabilityZone", ""),
    )


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """How the group launches: a launch template (id or name, version) or a launch configuration."""

    template_id: str = ""
    template_name: str = ""
    version: str = "$Default"
    launch_configuration: str = ""
    instance_types: tuple[str, ...] = ()  # mixed-instances overrides, in priority order

    def template_ref(self) -> dict[str, str]:
        ref = (
            {"LaunchTemplateId": self.template_id}
            if self.template_id
            else {"LaunchTemplateName": self.template_name}
        )
        ref["Version"] = self.version
        return ref


def launch_spec(asg: dict[str, Any]) -> LaunchSpec:
    """The group's launch source; raise TemplateError for what gangscale cannot template."""
    mixed = asg.get("MixedInstancesPolicy")
    if mixed:
        lt = mixed.get("LaunchTemplate", {})
        spec = lt.get("LaunchTemplateSpecification", {})
        types: list[str] = []
        for o in lt.get("Overrides", []) or []:
            if o.get("InstanceRequirements"):
                raise TemplateError(
                    "attribute-based instance selection (InstanceRequirements) cannot be "
                    "templated; list the instance types as overrides"
                )
            if str(o.get("WeightedCapacity", "1")) not in ("1", ""):
                raise TemplateError(
                    "weighted capacity makes desired capacity count units, not nodes; "
                    "use weight 1 on every override"
                )
            if o.get("InstanceType"):
                types.append(str(o["InstanceType"]))
        return LaunchSpec(
            spec.get("LaunchTemplateId", ""),
            spec.get("LaunchTemplateName", ""),
            spec.get("Version") or "$Default",
            instance_types=tuple(types),
        )
    if asg.get("LaunchTemplate"):
        lt = asg["LaunchTemplate"]
        return LaunchSpec(
            lt.get("LaunchTemplateId", ""),
            lt.get("LaunchTemplateName", ""),
            lt.get("Version") or "$Default",
        )
    if asg.get("LaunchConfigurationName"):
        return LaunchSpec(launch_configuration=str(asg["LaunchConfigurationName"]))
    raise TemplateError(
        "has neither a launch template, a mixed-instances policy nor a launch configuration"
    )


class AsgProvider(AwsProvider):
    """Auto Scaling groups tagged for this cluster, one node group each."""

    name = "aws-asg"
    no_cluster_name = "a cluster name is needed for tag discovery (--cluster-name)"

    def __init__(
        self,
        cluster_name: str,
        options: AwsOptions | None = None,
        clients: AwsClients | None = None,
    ):
        super().__init__(cluster_name, options, clients)
        self._groups: TTLMemo[list[dict[str, Any]]] = TTLMemo(self.options.groups_ttl, maxsize=4)
        self._launch_types: TTLMemo[tuple[str, ...]] = TTLMemo(self.options.templates_ttl)
        self.ca_managed: list[str] = []  # discovered groups CA's default auto-discovery also finds
        self.filters = auto_discovery_filters(
            self.options.auto_discovery, cluster_name, cluster_named_tag=True
        )

    # ------------------------------------------------------------ describe
    def _tagged_groups(self) -> list[dict[str, Any]]:
        """Groups matching a discovery filter (cloud_adapters/tags.py), each found once."""
        return self._groups.get("tagged", self._describe_tagged)

    def _describe_tagged(self) -> list[dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for f in self.filters:
            aws_filters = [
                {"Name": f"tag:{k}", "Values": [v]}
                if v is not None
                else {"Name": "tag-key", "Values": [k]}
                for k, v in f.tags
            ]
            for raw in aws_pages(
                self.clients,
                self.name,
                "autoscaling",
                "DescribeAutoScalingGroups",
                "AutoScalingGroups",
                Filters=aws_filters,
            ):
                if f.matches(tag_map(raw.get("Tags"))):
                    found.setdefault(str(raw.get("AutoScalingGroupName")), raw)
        return list(found.values())

    def _group(self, group: str) -> dict[str, Any]:
        """One group, read fresh: sizes are decided on the cloud's current word, never a cached one."""
        found = self._call(
            "autoscaling", "DescribeAutoScalingGroups", group, AutoScalingGroupNames=[group]
        )["AutoScalingGroups"]
        if not found:
            raise NotFoundError(
                "no such Auto Scaling group",
                code="AutoScalingGroupNotFound",
                operation="DescribeAutoScalingGroups",
                group=group,
                provider=self.name,
            )
        return found[0]

    def _instance_types_of(self, spec: LaunchSpec, group: str) -> tuple[str, ...]:
        if spec.instance_types:
            return spec.instance_types
        if spec.launch_configuration:
            lc = spec.launch_configuration
            return self._launch_types.get(("lc", lc), lambda: self._lc_types(lc, group))
        key = ("lt", spec.template_id or spec.template_name, spec.version)
        return self._launch_types.get(key, lambda: self._lt_types(spec, group))

    def _lc_types(self, name: str, group: str) -> tuple[str, ...]:
        lcs = self._call(
            "autoscaling", "DescribeLaunchConfigurations", group, LaunchConfigurationNames=[name]
        )["LaunchConfigurations"]
        if not lcs:
            raise NotFoundError(
                f"launch configuration {name!r} not found", group=group, provider=self.name
            )
        return (str(lcs[0]["InstanceType"]),)

    def _lt_types(self, spec: LaunchSpec, group: str) -> tuple[str, ...]:
        ref = spec.template_ref()
        ref.pop("Version")
        itype = launch_template_instance_type(self.clients, self.name, group, ref, spec.version)
        if not itype:
            raise TemplateError(
                f"launch template {spec.template_id or spec.template_name} version {spec.version} "
                "names no instance type"
            )
        return (itype,)

    # ------------------------------------------------------------ discovery
    def _discover(self) -> Discovery:
        self._groups.invalidate()
        out = Discovery()
        raws = self._tagged_groups()
        self.iam_unscoped, self.ca_managed = [], []
        specs: dict[str, LaunchSpec | Exception] = {}
        wanted: set[str] = set()
        for raw in raws:
            try:
                specs[raw["AutoScalingGroupName"]] = spec = launch_spec(raw)
                wanted.update(spec.instance_types)
            except TemplateError as exc:
                specs[raw["AutoScalingGroupName"]] = exc
        self.types.prefetch(wanted)
        self._raw = {}
        for raw in sorted(raws, key=lambda r: r["AutoScalingGroupName"]):
            name = raw["AutoScalingGroupName"]
            build = partial(self._template_of, raw, specs[name], out.warnings)
            self._adopt(out, "group", name, raw, build)
        return out

    def _template_of(self, raw: dict[str, Any], spec: LaunchSpec | Exception, warnings: list[str]):
        if isinstance(spec, Exception):
            raise spec
        name = raw["AutoScalingGroupName"]
        tags = tag_map(raw.get("Tags"))
        why = discovery_state(tags, self.cluster_name, filters=self.filters)
        if why:
            raise TagError(why)
        if missing_cluster_tag(tags, self.cluster_name):
            self.iam_unscoped.append(name)
        if ca_manages(tags, self.cluster_name):
            self.ca_managed.append(name)
        if raw.get("Status"):  # only set while the group is being deleted
            raise TemplateError(f"status is {raw['Status']!r}")
        template_tags = parse_template_tags(tags)
        warnings.extend(f"{self.name} group {name}: {n}" for n in template_tags.notes)
        group = build_template(
            name,
            self.types.smallest(self._instance_types_of(spec, name)),
            min_size=int(raw["MinSize"]),
            max_size=int(raw["MaxSize"]),
            target_size=int(raw["DesiredCapacity"]),
            tags=template_tags,
            reserve=self.options.reserve,
            zones=list(raw.get("AvailabilityZones") or []),
            region=self.clients.region,
        )
        suspended = {p.get("ProcessName") for p in raw.get("SuspendedProcesses") or []}
        if "Launch" in suspended:
            warnings.append(
                f"{self.name} group {name}: the Launch process is suspended; it will not be grown"
            )
            group = replace(
                group, max_size=min(group.max_size, max(group.current_size, group.min_size))
            )
        self._check_group(raw, spec, warnings)
        return group

    def _check_group(self, raw: dict[str, Any], spec: LaunchSpec, warnings: list[str]) -> None:
        """Hook for subclasses that need more of a group than a template (aws-fleet)."""

    # --------------------------------------------------------------- sizing
    def target_size(self, group: str) -> int:
        return int(self._group(group)["DesiredCapacity"])

    def _growable(self, group: str, delta: int, operation: str) -> tuple[dict[str, Any], int]:
        """The group, read fresh, and its desired capacity; raise unless it can grow by `delta`."""
        self._check_delta(group, delta, self.name)
        raw = self._group(group)
        cur, top = int(raw["DesiredCapacity"]), int(raw["MaxSize"])
        if cur + delta > top:
            raise SizeLimitError(
                f"desired {cur} + {delta} exceeds max size {top}",
                operation=operation,
                group=group,
                provider=self.name,
            )
        return raw, cur

    def increase_size(self, group: str, delta: int, token: str = "") -> ScaleResult:
        _, cur = self._growable(group, delta, "SetDesiredCapacity")
        self._call(
            "autoscaling",
            "SetDesiredCapacity",
            group,
            AutoScalingGroupName=group,
            DesiredCapacity=cur + delta,
            HonorCooldown=False,
        )
        self._groups.invalidate()
        return ScaleResult(group, cur, cur + delta)

    def delete_instances(self, group: str, instance_ids: list[str]) -> ScaleResult:
        raw = self._group(group)
        members = {i["InstanceId"] for i in raw.get("Instances", [])}
        strangers = [i for i in instance_ids if i not in members]
        if strangers:
            raise NotFoundError(
                f"instances {', '.join(strangers)} are not in the group",
                operation="TerminateInstanceInAutoScalingGroup",
                group=group,
                provider=self.name,
            )
        cur = int(raw["DesiredCapacity"])
        if cur - len(instance_ids) < int(raw["MinSize"]):
            raise SizeLimitError(
                f"desired {cur} - {len(instance_ids)} would go below min size {raw['MinSize']}",
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
        self._groups.invalidate()
        return ScaleResult(group, cur, cur - len(instance_ids), tuple(instance_ids))

    def decrease_target_size(self, group: str, delta: int) -> ScaleResult:
        self._check_delta(group, delta, self.name)
        raw = self._group(group)
        cur = int(raw["DesiredCapacity"])
        live = sum(
            1 for i in raw.get("Instances", []) if asg_instance(i, group).state != "deleting"
        )
        new = cur - delta
        if new < live:
            raise SizeLimitError(
                f"desired {cur} - {delta} is below the {live} instances the group has; "
                "give back specific instances with delete_instances",
                operation="SetDesiredCapacity",
                group=group,
                provider=self.name,
            )
        if new < int(raw["MinSize"]):
            raise SizeLimitError(
                f"desired {new} would go below min size {raw['MinSize']}",
                operation="SetDesiredCapacity",
                group=group,
                provider=self.name,
            )
        self._call(
            "autoscaling",
            "SetDesiredCapacity",
            group,
            AutoScalingGroupName=group,
            DesiredCapacity=new,
            HonorCooldown=False,
        )
        self._groups.invalidate()
        return ScaleResult(group, cur, new)

    # ---------------------------------------------------------- observation
    def instances(self, group: str) -> list[Instance]:
        return [asg_instance(i, group) for i in self._group(group).get("Instances", [])]

    def launch_failures(self, group: str, since: datetime) -> list[LaunchFailure]:
        activities = self._call(
            "autoscaling",
            "DescribeScalingActivities",
            group,
            AutoScalingGroupName=group,
            MaxRecords=50,
        )["Activities"]
        since = since if since.tzinfo else since.replace(tzinfo=timezone.utc)
        out = []
        for a in activities:
            start = a.get("StartTime")
            if a.get("StatusCode") not in ("Failed", "Cancelled") or not isinstance(
                start, datetime
            ):
                continue
            start = start if start.tzinfo else start.replace(tzinfo=timezone.utc)
            if start < since:
                continue
            text = str(a.get("StatusMessage") or a.get("Description") or "launch failed")
            cls = classify_message(text)
            out.append(
                LaunchFailure(
                    group,
                    start,
                    cls(
                        text,
                        code="ScalingActivityFailed",
                        operation="DescribeScalingActivities",
                        group=group,
                        provider=self.name,
                    ),
                )
            )
        return out

    def instance_groups(self) -> dict[str, str]:
        raws = self._raw.values() if self._raw else self._tagged_groups()
        return {
            i["InstanceId"]: r["AutoScalingGroupName"] for r in raws for i in r.get("Instances", [])
        }
