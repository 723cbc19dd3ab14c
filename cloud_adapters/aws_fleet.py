"""`aws-fleet`: a gang's nodes all together or not at all, then handed to their Auto Scaling group.

EC2 Fleet `Type=instant` with `MinTargetCapacity` equal to the total and
`SingleAvailabilityZone`/`SingleInstanceType` launches every node of the
request in one zone or none; gangscale checks the count anyway and gives
back a partial result itself. The instances then join the group through
AttachInstances (which raises its desired capacity), so from then on the
group, its scale-in and Cluster Autoscaler treat them like any other member.

Between CreateFleet and AttachInstances the instances belong to no group. So
that a crash in that window never leaves them unowned, every fleet carries a
client token (from the controller's write-ahead record when it gives one) as
its `ClientToken` and as the `gangscale.io/client-token` tag of its
instances: `loose_instances` finds them by tag afterwards (moto ignores
ClientToken idempotency; AWS honours it, the tag works in both), and the
controller adopts (`adopt`) or terminates (`terminate_loose`) them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from .aws_asg import AsgProvider, LaunchSpec, launch_spec
from .aws_common import aws_pages
from .base import LooseInstance, ScaleResult
from .errors import CapacityError, CloudError, NotFoundError, UnsupportedError, error_class
from .tags import GANGSCALE_CLUSTER_TAG, NODE_GROUP_TAG, tag_map
from .template import TemplateError

# on every instance a fleet launched: the request's token
CLIENT_TOKEN_TAG = "gangscale.io/client-token"
ATTACH_BATCH = 20  # AttachInstances takes at most 20 instance ids per call
_ENDED = ("shutting-down", "terminated", "stopping", "stopped")


class FleetProvider(AsgProvider):
    """Auto Scaling groups discovered as in aws-asg, grown atomically with EC2 Fleet."""

    name = "aws-fleet"
    atomic = True
    launches_outside_groups = True

    def _check_group(self, raw: dict[str, Any], spec: LaunchSpec, warnings: list[str]) -> None:
        name = raw["AutoScalingGroupName"]
        if spec.launch_configuration:
            raise TemplateError(
                "aws-fleet launches from the group's launch template; this group has a launch "
                "configuration (migrate it to a launch template or use aws-asg)"
            )
        zones = raw.get("AvailabilityZones") or []
        suspended = {p.get("ProcessName") for p in raw.get("SuspendedProcesses") or []}
        if len(zones) > 1 and "AZRebalance" not in suspended:
            warnings.append(
                f"{self.name} group {name}: spans {len(zones)} zones and AZRebalance is active; "
                "the group may move a single-zone gang's nodes (suspend AZRebalance)"
            )

    def increase_size(self, group: str, delta: int, token: str = "") -> ScaleResult:
        raw, cur = self._growable(group, delta, "CreateFleet")
        try:  # the group may have changed since discovery; a CloudError keeps the caller's rollback working
            spec = launch_spec(raw)
            self._check_group(raw, spec, [])
        except TemplateError as exc:
            raise UnsupportedError(
                str(exc),
                code="NotTemplatable",
                operation="CreateFleet",
                group=group,
                provider=self.name,
            ) from None
        itype = self.template(group).instance_type
        ids = self._launch(group, raw, spec, itype, delta, token or f"gangscale-{uuid.uuid4()}")
        try:
            self._wait_running(group, ids)
            self._attach(group, ids)
        except CloudError as exc:
            self._rollback(group, ids, exc)
            raise
        self._groups.invalidate()
        return ScaleResult(group, cur, cur + delta, tuple(ids))

    # ---------------------------------------------------------------- steps
    def _launch(
        self, group: str, raw: dict[str, Any], spec: LaunchSpec, itype: str, n: int, token: str
    ) -> list[str]:
        overrides = _placement_overrides(raw, itype)
        tags = self._launch_tags(group, raw, token)
        resp = self._call(
            "ec2",
            "CreateFleet",
            group,
            Type="instant",
            ClientToken=token,  # a retried call (or a replayed record) cannot launch twice
            LaunchTemplateConfigs=[
                {"LaunchTemplateSpecification": spec.template_ref(), "Overrides": overrides}
            ],
            TargetCapacitySpecification={
                "TotalTargetCapacity": n,
                "OnDemandTargetCapacity": n,
                "DefaultTargetCapacityType": "on-demand",
            },
            OnDemandOptions={
                "SingleAvailabilityZone": True,
                "SingleInstanceType": True,
                "MinTargetCapacity": n,
            },
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        ids = [i for item in resp.get("Instances") or [] for i in item.get("InstanceIds") or []]
        if (
            len(ids) > n
        ):  # never more than asked: the group would grow past the plan (and the gang's record)
            self._terminate(group, ids[n:])
            ids = ids[:n]
        if len(ids) == n:
            return ids
        errors = resp.get("Errors") or []
        code = str(errors[0].get("ErrorCode") or "") if errors else "UnfulfillableCapacity"
        text = (
            str(errors[0].get("ErrorMessage") or code)
            if errors
            else "fleet returned fewer instances"
        )
        cls = error_class(code)
        cls = cls if cls is not CloudError else CapacityError
        note = ""
        if ids:
            note = self._terminate(group, ids)
        raise cls(
            f"{len(ids)} of {n} {itype} instances launched, none kept: {text}{note}",
            code=code,
            operation="CreateFleet",
            group=group,
            provider=self.name,
        )

    def _launch_tags(self, group: str, raw: dict[str, Any], token: str) -> list[dict[str, str]]:
        """The group's tags that propagate at launch (not `aws:` ones), then gangscale's own: the group, the
        cluster (what the IAM policy lets gangscale end) and the request's token (a restart finds its instances)."""
        propagated = tag_map([t for t in raw.get("Tags") or [] if t.get("PropagateAtLaunch")])
        tags = [
            {"Key": k, "Value": v}
            for k, v in propagated.items()
            if not k.startswith("aws:") and k not in (NODE_GROUP_TAG, GANGSCALE_CLUSTER_TAG)
        ]
        tags.append({"Key": NODE_GROUP_TAG, "Value": group})
        tags.append({"Key": GANGSCALE_CLUSTER_TAG, "Value": self.cluster_name})
        tags.append({"Key": CLIENT_TOKEN_TAG, "Value": token})
        return tags

    def _wait_running(self, group: str, ids: list[str]) -> None:
        """AttachInstances takes running instances only; a deposed leader stops waiting (the fence raises)."""
        waited = 0.0
        while True:
            self._before_mutation(
                "AttachInstances", group
            )  # not the leader any more: stop here, not later
            try:
                reservations = self._call("ec2", "DescribeInstances", group, InstanceIds=ids)[
                    "Reservations"
                ]
                states = {i["InstanceId"]: i for r in reservations for i in r.get("Instances", [])}
            except NotFoundError:
                states = {}  # eventual consistency right after launch
            ended = [i for i in states.values() if i.get("State", {}).get("Name") in _ENDED]
            if ended:
                reason = (ended[0].get("StateReason") or {}).get("Message", "")
                raise CapacityError(
                    f"instance {ended[0]['InstanceId']} ended before joining the group {reason}".strip(),
                    code="InstanceEnded",
                    operation="DescribeInstances",
                    group=group,
                    provider=self.name,
                )
            if len(states) == len(ids) and all(
                i.get("State", {}).get("Name") == "running" for i in states.values()
            ):
                return
            if waited >= self.options.running_timeout:
                raise CapacityError(
                    f"instances not running after {waited:.0f}s",
                    code="LaunchTimeout",
                    operation="DescribeInstances",
                    group=group,
                    provider=self.name,
                )
            self.options.sleep(self.options.poll_interval)
            waited += self.options.poll_interval

    def _attach(self, group: str, ids: list[str]) -> None:
        for i in range(0, len(ids), ATTACH_BATCH):
            self._call(
                "autoscaling",
                "AttachInstances",
                group,
                AutoScalingGroupName=group,
                InstanceIds=ids[i : i + ATTACH_BATCH],
            )

    def _terminate(self, group: str, ids: list[str]) -> str:
        """Give back instances that are not in the group; a note for the error message when that fails."""
        try:
            self._call("ec2", "TerminateInstances", group, InstanceIds=ids)
        except CloudError as exc:
            return f" (and terminating {', '.join(ids)} failed: {exc}; terminate them by hand)"
        return ""

    def _rollback(self, group: str, ids: list[str], cause: CloudError) -> None:
        """Undo a launch that cannot be completed: attached ones leave with decrement, the rest terminate."""
        try:
            members = {i["InstanceId"] for i in self._group(group).get("Instances", [])}
        except CloudError:
            members = set()
        attached = [i for i in ids if i in members]
        loose = [i for i in ids if i not in members]
        notes = []
        for iid in attached:
            try:
                self._call(
                    "autoscaling",
                    "TerminateInstanceInAutoScalingGroup",
                    group,
                    InstanceId=iid,
                    ShouldDecrementDesiredCapacity=True,
                )
            except CloudError as exc:
                notes.append(f"{iid}: {exc}")
        if loose:
            note = self._terminate(group, loose)
            if note:
                notes.append(note.strip(" ()"))
        self._groups.invalidate()
        if notes:
            cause.message += f" (rollback incomplete: {'; '.join(notes)})"

    # ------------------------------------------------- launched, not joined
    def loose_instances(self) -> list[LooseInstance]:
        """Pending or running instances tagged for this cluster and a group that no tagged group holds."""
        found = self._tagged_instances(NODE_GROUP_TAG)
        if not found:
            return []
        self._groups.invalidate()
        members = {i["InstanceId"] for g in self._tagged_groups() for i in g.get("Instances") or []}
        return [_loose(i) for i in found if i["InstanceId"] not in members]

    def launched_tokens(self) -> dict[str, tuple[str, ...]]:
        """Client token -> the pending or running instances carrying it that are members of a tagged group."""
        self._groups.invalidate()
        members = {i["InstanceId"] for g in self._tagged_groups() for i in g.get("Instances") or []}
        out: dict[str, list[str]] = {}
        for i in self._tagged_instances(CLIENT_TOKEN_TAG):
            token = tag_map(i.get("Tags")).get(CLIENT_TOKEN_TAG, "")
            if token and i["InstanceId"] in members:
                out.setdefault(token, []).append(i["InstanceId"])
        return {t: tuple(sorted(ids)) for t, ids in out.items()}

    def _tagged_instances(self, tag_key: str) -> list[dict[str, Any]]:
        """This cluster's pending or running instances that carry `tag_key`."""
        filters = [
            {"Name": f"tag:{GANGSCALE_CLUSTER_TAG}", "Values": [self.cluster_name]},
            {"Name": "tag-key", "Values": [tag_key]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
        return [
            i
            for r in aws_pages(
                self.clients, self.name, "ec2", "DescribeInstances", "Reservations", Filters=filters
            )
            for i in r.get("Instances") or []
        ]

    def adopt(self, group: str, instance_ids: list[str]) -> ScaleResult:
        """Wait until the loose instances run, then attach them (the group's desired grows by as many)."""
        raw, cur = self._growable(group, len(instance_ids), "AttachInstances")
        self._wait_running(group, instance_ids)
        self._attach(group, instance_ids)
        self._groups.invalidate()
        return ScaleResult(group, cur, cur + len(instance_ids), tuple(instance_ids))

    def terminate_loose(self, instance_ids: list[str]) -> None:
        if instance_ids:
            self._call("ec2", "TerminateInstances", "", InstanceIds=list(instance_ids))


def _loose(raw: dict[str, Any]) -> LooseInstance:
    tags = tag_map(raw.get("Tags"))
    launched = raw.get("LaunchTime")
    return LooseInstance(
        raw["InstanceId"],
        tags.get(NODE_GROUP_TAG, ""),
        tags.get(CLIENT_TOKEN_TAG, ""),
        launched.timestamp() if isinstance(launched, datetime) else 0.0,
        str((raw.get("State") or {}).get("Name") or ""),
    )


def _placement_overrides(raw: dict[str, Any], itype: str) -> list[dict[str, str]]:
    """CreateFleet overrides: the instance type in each of the group's subnets, else in each of its zones."""
    subnets = [s.strip() for s in str(raw.get("VPCZoneIdentifier") or "").split(",") if s.strip()]
    if subnets:
        return [{"InstanceType": itype, "SubnetId": s} for s in subnets]
    return [
        {"InstanceType": itype, "AvailabilityZone": z} for z in raw.get("AvailabilityZones") or []
    ]
