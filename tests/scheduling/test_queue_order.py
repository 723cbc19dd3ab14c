"""The scheduling queue's order, rule by rule, each against the kube-scheduler source it follows.

- PrioritySort (kubernetes/kubernetes pkg/scheduler/framework/plugins/queuesort/priority_sort.go, `Less`):
  priority, then the time the pod entered the queue (its creationTimestamp in the model).
- A 1.36+ PodGroup's cycle starts when the scheduler pops any of its pods (KEP-4671, "PodGroup scheduling
  cycle"): the group is queued at its first member, not at the PodGroup object's creation.
- coscheduling's Less (scheduler-plugins pkg/coscheduling/coscheduling.go) only when the profile enables the
  Coscheduling QueueSort; every profile must name the same QueueSort (validation.go `validateCommonQueueSort`).
- No creationTimestamp: after the stamped entries, by namespace/name (no pod-before-group rule).
"""

from __future__ import annotations

import pytest

from gangscale.model import API_COSCHEDULING
from gangscale.scheduling import SchedulerConfigError, parse_scheduler_config, simulate

from .helpers import gang, lone, mkpod, node

T0, T1, T2 = "2025-01-01T00:00:00Z", "2025-01-01T00:00:01Z", "2025-01-01T00:00:02Z"
COSCHEDULING_PROFILE = {
    "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "default-scheduler", "plugins": {
        "multiPoint": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "PrioritySort"}]}}}]}


def _split_by_a_lone_pod():
    """A 2-pod coscheduling gang whose pods are created at T0 and T2, a lone pod at T1, two nodes each fitting one."""
    nodes = [node("n1", 4000, 16), node("n2", 4000, 16)]
    cs = gang("cs", [mkpod("b0", 4000, 8, created=T0), mkpod("b1", 4000, 8, created=T2)], min_count=2,
              api=API_COSCHEDULING, created=T0)
    return nodes, cs, lone(mkpod("small", 4000, 8, created=T1))


def test_under_the_default_profile_a_coscheduling_gangs_pods_are_queued_by_priority_sort_and_split():
    nodes, cs, small = _split_by_a_lone_pod()
    res = simulate(nodes, [cs, small], max_passes=1)
    assert set(res.placement) == {"team-a/small"}  # b0 held at Permit, then rolled back when b1 found no room
    assert cs.key not in res.started


def test_with_the_coscheduling_queue_sort_enabled_the_groups_pods_leave_the_queue_together():
    nodes, cs, small = _split_by_a_lone_pod()
    res = simulate(nodes, [cs, small], config=parse_scheduler_config(COSCHEDULING_PROFILE), max_passes=1)
    assert res.started == {cs.key} and "team-a/small" not in res.placement


def test_a_podgroup_is_queued_at_its_first_member_not_at_the_podgroup_objects_creation():
    # the pods exist at T0, the PodGroup object at T2; a lone pod created at T1 comes after the group's cycle
    nodes = [node("n1", 8000, 32)]
    g = gang("train", [mkpod(f"t{i}", 4000, 8, created=T0) for i in range(2)], min_count=2, created=T2)
    web = lone(mkpod("web", 4000, 8, ns="team-b", created=T1))
    res = simulate(nodes, [web, g])
    assert res.started == {g.key} and "team-b/web" not in res.placement


def test_an_older_lone_pod_goes_before_a_younger_podgroup_whatever_their_names():
    nodes = [node("n1", 8000, 32)]
    g = gang("a-train", [mkpod(f"t{i}", 4000, 8, created=T1) for i in range(2)], min_count=2, created=T1)
    web = lone(mkpod("z-web", 4000, 8, ns="team-z", created=T0))
    res = simulate(nodes, [g, web])
    assert res.placement == {"team-z/z-web": "n1"} and not res.outcomes[g.key].started


def test_without_creation_timestamps_the_queue_is_namespace_name_order_not_pods_before_groups():
    nodes = [node("n1", 8000, 32)]
    g = gang("a-train", [mkpod(f"a-train-{i}", 4000, 8, created="") for i in range(2)], min_count=2, created="")
    web = lone(mkpod("web", 4000, 8, ns="team-b", created=""))
    res = simulate(nodes, [web, g])
    assert res.started == {g.key} and "team-b/web" not in res.placement  # team-a/a-train-0 < team-b/web


def test_an_entry_without_a_timestamp_goes_after_every_stamped_one_of_its_priority():
    nodes = [node("n1", 4000, 16)]
    unstamped = lone(mkpod("a", 4000, 8, created=""))
    stamped = lone(mkpod("z", 4000, 8, created=T2))
    res = simulate(nodes, [unstamped, stamped])
    assert res.placement == {"team-a/z": "n1"}


def test_profiles_with_different_queue_sorts_are_refused_naming_the_field():
    doc = {**COSCHEDULING_PROFILE, "profiles": [*COSCHEDULING_PROFILE["profiles"], {"schedulerName": "other"}]}
    with pytest.raises(SchedulerConfigError, match=r"queueSort.*Coscheduling and PrioritySort"):
        parse_scheduler_config(doc)


def test_the_queue_sort_is_read_from_plugins_queue_sort_and_defaults_to_priority_sort():
    base = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
    assert parse_scheduler_config(base).queue_sort == "PrioritySort"
    doc = {**base, "profiles": [{"plugins": {"queueSort": {"enabled": [{"name": "Coscheduling"}],
                                                           "disabled": [{"name": "*"}]}}}]}
    assert parse_scheduler_config(doc).queue_sort == "Coscheduling"
