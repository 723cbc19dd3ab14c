"""Every validating rule, deny and warn, over HTTPS to the running server."""

from __future__ import annotations

import pytest

from gangscale.webhook.lookup import GroupLookup
from tests.builders import pod, podgroup

from .conftest import SERVED


def volcano_pg(name: str, ns: str = "default", *, min_member=2, min_resources: dict | None = None,
               api: str = "scheduling.volcano.sh/v1beta1") -> dict:
    spec = {"minMember": min_member}
    if min_resources:
        spec["minResources"] = min_resources
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def workload(name: str, ns: str = "default", min_count=2) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]}}


ZERO_MIN = [
    (podgroup("pg", min_count=0), "spec.schedulingPolicy.gang.minCount is 0"),
    (podgroup("pg", min_count=0, version="v1beta1"), "spec.schedulingPolicy.gang.minCount is 0"),
    (workload("wl", min_count=0), "spec.podGroups[0].policy.gang.minCount is 0"),
    (volcano_pg("pg", min_member=0), "spec.minMember is 0"),
    (volcano_pg("pg", min_member=-1, api="scheduling.x-k8s.io/v1alpha1"), "spec.minMember is -1"),
]


@pytest.mark.parametrize("obj,field", ZERO_MIN, ids=lambda x: x if isinstance(x, str) else x["apiVersion"])
def test_a_min_count_below_one_is_denied_for_every_group_flavour(hook, obj, field):
    r = hook.review(obj)
    assert r["allowed"] is False and field in r["status"]["message"]
    assert r["status"]["code"] == 403


def test_a_min_count_above_the_namespace_gang_size_cap_is_denied_and_within_it_allowed(hook):
    r = hook.review(podgroup("big", "capped", min_count=5))
    assert not r["allowed"] and "above the gang size cap 4 of namespace capped" in r["status"]["message"]
    assert hook.review(podgroup("ok", "capped", min_count=4))["allowed"]
    r = hook.review(podgroup("big", "default", min_count=65))  # the global maxGangPods elsewhere
    assert not r["allowed"] and "cap 64" in r["status"]["message"]
    assert hook.review(podgroup("fine", "default", min_count=64))["allowed"]


def test_a_pod_whose_group_is_in_another_namespace_is_denied_naming_the_field(hook):
    p = pod("p", "team-a", group="pg")
    p["spec"]["schedulingGroup"]["namespace"] = "team-b"
    r = hook.review(p)
    assert not r["allowed"] and "spec.schedulingGroup" in r["status"]["message"]
    assert "'team-b'" in r["status"]["message"]
    r = hook.review(pod("p", "team-a", volcano="team-b/pg"))
    assert not r["allowed"] and "metadata.annotations[scheduling.k8s.io/group-name]" in r["status"]["message"]
    assert hook.review(pod("p", "team-a", group="pg"))["allowed"]


def test_a_pod_no_node_group_can_hold_is_denied_naming_the_group_and_the_resource(hook):
    r = hook.review(pod("p", group="pg", cpu="64"))
    msg = r["status"]["message"]
    assert not r["allowed"] and "no node group can ever hold pod default/p" in msg
    assert "cpu-small: needs 64 cpu, a node has 4" in msg
    assert "gpu-a: taint nvidia.com/gpu=true:NoSchedule not tolerated" in msg
    r = hook.review(pod("g", group="pg", cpu="64", tolerations=[{"operator": "Exists"}]))
    assert "gpu-a: needs 64 cpu, a node has 32" in r["status"]["message"]
    r = hook.review(pod("g", group="pg", gpu=16))
    assert "gpu-a: needs 16 nvidia.com/gpu, a node has 8" in r["status"]["message"]
    assert hook.review(pod("p", group="pg", cpu="2"))["allowed"]


def test_a_gang_larger_than_every_groups_max_size_is_denied_but_one_spanning_two_groups_is_allowed(hook):
    # 40 members of 1 GPU: gpu-a holds 4 nodes x 8 = 32
    r = hook.review(volcano_pg("train", min_member=40, min_resources={"cpu": "40", "nvidia.com/gpu": "40"}))
    msg = r["status"]["message"]
    assert not r["allowed"] and "no node group can ever hold gang default/train" in msg
    assert "gpu-a: maxSize 4 holds 32 of 40 pods" in msg
    # 3 cpu each: cpu-small holds 10 (one per node), gpu-a 4 x 10 = 40: together 50 >= 45
    r = hook.review(volcano_pg("wide", min_member=45, min_resources={"cpu": "135"}))
    assert r["allowed"], r


def test_a_gang_over_the_namespace_caps_is_denied_naming_each_cap(hook):
    r = hook.review(volcano_pg("t", "capped", min_member=3, min_resources={"cpu": "60", "nvidia.com/gpu": "12"}))
    msg = r["status"]["message"]
    assert not r["allowed"]
    assert "needs 12 nvidia.com/gpu, namespace capped cap maxGPUs is 8" in msg
    r = hook.review(volcano_pg("n", "capped", min_member=3, min_resources={"cpu": "90"}))  # one per gpu-a node
    assert "needs at least 3 nodes, namespace capped cap maxNodes is 2" in r["status"]["message"]
    r = hook.review(volcano_pg("d", "capped", min_member=2, min_resources={"cpu": "40", "nvidia.com/gpu": "16"}))
    assert "costs at least $20.00/h, namespace capped cap maxDollarsPerHour is 15" in r["status"]["message"]
    assert hook.review(volcano_pg("ok", "capped", min_member=2, min_resources={"cpu": "4"}))["allowed"]


def test_a_gang_over_max_gang_gpus_is_denied_in_any_namespace(hook_factory):
    hook = hook_factory(top={"maxGangGPUs": 16})
    r = hook.review(volcano_pg("t", "default", min_member=3, min_resources={"cpu": "3", "nvidia.com/gpu": "24"}))
    assert not r["allowed"] and "needs 24 nvidia.com/gpu, above maxGangGPUs 16" in r["status"]["message"]


def test_a_pod_of_an_api_the_server_does_not_serve_gets_a_warning_by_default_and_a_denial_when_configured(
        hook_factory):
    hook = hook_factory(servedGangAPIs=["scheduling.volcano.sh/v1beta1"])
    r = hook.review(pod("p", group="pg"))
    assert r["allowed"] and "status" not in r
    assert any("spec.schedulingGroup.podGroupName" in w and "scheduled alone" in w for w in r["warnings"])
    assert "warnings" not in hook.review(pod("v", volcano="pg"))
    strict = hook_factory(servedGangAPIs=["scheduling.volcano.sh/v1beta1"], rules={"gangFeatureOff": "deny"})
    r = strict.review(pod("p", group="pg"))
    assert not r["allowed"] and "scheduling.k8s.io/v1alpha2" in r["status"]["message"]


def test_a_rule_set_to_warn_admits_with_a_warning_and_off_admits_silently(hook_factory):
    warn = hook_factory(rules={"noNodeGroupFits": "warn", "minCount": "warn"})
    r = warn.review(pod("p", group="pg", cpu="64"))
    assert r["allowed"] and "cpu-small: needs 64 cpu" in r["warnings"][0]
    r = warn.review(podgroup("pg", min_count=0))
    assert r["allowed"] and "minCount is 0" in r["warnings"][0]
    off = hook_factory(rules={"noNodeGroupFits": "off"})
    r = off.review(pod("p", group="pg", cpu="64"))
    assert r["allowed"] and "warnings" not in r


def test_an_unreadable_gang_object_is_denied_naming_the_field(hook):
    r = hook.review(pod("p", group="pg", cpu="lots"))
    assert not r["allowed"] and "cpu" in r["status"]["message"] and "lots" in r["status"]["message"]
    r = hook.review(podgroup("pg", policy="basic") | {"spec": {"schedulingPolicy": {}}})
    assert not r["allowed"] and "spec.schedulingPolicy" in r["status"]["message"]


def test_a_1_36_workload_of_templates_is_admitted_as_ingest_reads_it(hook):
    wl = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload", "metadata": {"name": "w", "namespace": "a"},
          "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]}}
    r = hook.review(wl)
    assert r["allowed"] and "warnings" not in r


def test_a_pod_outside_any_gang_and_a_delete_are_admitted_untouched(hook):
    r = hook.review(pod("alone", cpu="64"))
    assert r == {"uid": r["uid"], "allowed": True}
    assert hook.review(podgroup("pg", min_count=0), operation="DELETE", object=None)["allowed"]


def test_a_pod_created_with_generate_name_is_judged(hook):
    p = pod("x", group="pg", cpu="64")
    del p["metadata"]["name"]
    p["metadata"]["generateName"] = "job-"
    r = hook.review(p)
    assert not r["allowed"] and "pod default/job-<generated>" in r["status"]["message"]


# ------------------------------------------------------------- native gangs: judged when their pods arrive

GPU_TOLERATION = [{"operator": "Exists"}]


def lookup_of(*objs: dict) -> GroupLookup:
    """Policy.lookup over these objects, as the API server would answer GETs (404 for the rest), counting reads."""
    store = {}
    for o in objs:
        api, plural = o["apiVersion"], o["kind"].lower() + "s"
        store[f"/apis/{api}/namespaces/{o['metadata']['namespace']}/{plural}/{o['metadata']['name']}"] = o
    reads: list[str] = []

    def get(path: str) -> dict:
        reads.append(path)
        if path not in store:
            raise LookupError(f"404 {path}")
        return store[path]

    lookup = GroupLookup(get, None)
    lookup.reads = reads  # type: ignore[attr-defined]
    return lookup


def test_a_native_gang_over_every_groups_max_size_is_denied_when_its_pods_arrive(hook_factory):
    # 40 one-GPU pods: gpu-a holds 4 nodes x 8 = 32; the PodGroup itself carries no pod shape
    lookup = lookup_of(podgroup("train", min_count=40), podgroup("small", min_count=8))
    hook = hook_factory(lookup=lookup)
    assert hook.review(podgroup("train", min_count=40))["allowed"]
    r = hook.review(pod("train-0", group="train", gpu=1, tolerations=GPU_TOLERATION))
    msg = r["status"]["message"]
    assert not r["allowed"] and "no node group can ever hold gang default/train (40 pods like pod default/train-0" in msg
    assert "gpu-a: maxSize 4 holds 32 of 40 pods" in msg and "cpu-small: needs 1 nvidia.com/gpu, a node has 0" in msg
    assert hook.review(pod("small-0", group="small", gpu=1, tolerations=GPU_TOLERATION))["allowed"]
    assert hook.review(pod("nogroup-0", group="nogroup", gpu=1, tolerations=GPU_TOLERATION))["allowed"]  # judged alone
    before = len(lookup.reads)
    assert not hook.review(pod("train-1", group="train", gpu=1, tolerations=GPU_TOLERATION))["allowed"]
    assert len(lookup.reads) == before  # the group is read once per TTL, not once per pod
    assert lookup.reads.count("/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups/train") == 1


def test_a_workload_gang_over_the_namespace_caps_is_denied_when_its_pods_arrive_and_warned_when_set_to_warn(
        hook_factory):
    wl = workload("wl", "capped", min_count=4)  # 4 pods x 4 GPUs = 16 > maxGPUs 8 of namespace capped
    ref = {"name": "wl", "podGroup": "workers"}
    r = hook_factory(lookup=lookup_of(wl)).review(pod("w-0", "capped", workload=ref, gpu=4, tolerations=GPU_TOLERATION))
    assert not r["allowed"]
    assert "gang capped/wl/workers (4 pods like pod capped/w-0, its minCount) needs 16 nvidia.com/gpu, namespace " \
           "capped cap maxGPUs is 8" in r["status"]["message"]
    r = hook_factory(lookup=lookup_of(wl), rules={"namespaceCaps": "warn"}).review(
        pod("w-0", "capped", workload=ref, gpu=4, tolerations=GPU_TOLERATION))
    assert r["allowed"] and "needs 16 nvidia.com/gpu" in r["warnings"][0]
    one = hook_factory().review(pod("w-0", "capped", workload=ref, gpu=4, tolerations=GPU_TOLERATION))
    assert one["allowed"]  # without the lookup a pod is judged alone (4 GPUs fit the cap)


# ------------------------------------------------------------- every rule, both decisions

def _cross_namespace_workload_pod() -> dict:
    p = pod("p", "team-a", workload={"name": "wl", "podGroup": "w"})
    p["spec"]["workloadRef"]["namespace"] = "team-b"
    return p


# rule -> (an object only that rule fires on, words of its message); served: no scheduler-plugins
EVERY_RULE = {
    "crossNamespaceGroup": (_cross_namespace_workload_pod(), "spec.workloadRef points at group 'wl' in namespace 'team-b'"),
    "minCount": (volcano_pg("pg", min_member=0), "spec.minMember is 0"),
    "namespaceCaps": (volcano_pg("t", "capped", min_member=3, min_resources={"cpu": "60", "nvidia.com/gpu": "12"}),
                      "namespace capped cap maxGPUs is 8"),
    "noNodeGroupFits": (pod("big", group="pg", cpu="64"), "cpu-small: needs 64 cpu, a node has 4"),
    "gangFeatureOff": (pod("c", cosched="pg"), "metadata.labels[scheduling.x-k8s.io/pod-group] links the pod to a gang"),
    "unreadable": (pod("bad", group="pg", cpu="lots"), "lots"),
}


def test_every_rule_has_a_case_here():
    from gangscale.controller.config import AdmissionRules

    assert set(EVERY_RULE) == {f.alias for f in AdmissionRules.model_fields.values()}


@pytest.mark.parametrize("rule", sorted(EVERY_RULE))
@pytest.mark.parametrize("action", ["deny", "warn"])
def test_every_rule_denies_or_warns_as_configured_and_nothing_else_fires(hook_factory, rule, action):
    obj, words = EVERY_RULE[rule]
    served = [a for a in SERVED if not a.startswith("scheduling.x-k8s.io/")]
    rules = {r: "off" for r in EVERY_RULE} | {rule: action}
    r = hook_factory(servedGangAPIs=served, rules=rules).review(obj)
    if action == "deny":
        assert not r["allowed"] and words in r["status"]["message"] and "warnings" not in r
    else:
        assert r["allowed"] and "status" not in r and any(words in w for w in r["warnings"])
    other = hook_factory(servedGangAPIs=served, rules={**{r_: "deny" for r_ in EVERY_RULE}, rule: "off"}).review(obj)
    assert other["allowed"] and "warnings" not in other  # the case fires only its own rule


def test_a_workload_pod_and_a_scheduler_plugins_pod_are_warned_when_their_api_is_not_served(hook_factory):
    hook = hook_factory(servedGangAPIs=["scheduling.k8s.io/v1alpha2"])
    r = hook.review(pod("w", workload={"name": "wl", "podGroup": "w"}))
    assert r["allowed"] and "spec.workloadRef links the pod to a gang" in r["warnings"][0]
    assert "scheduling.k8s.io/v1alpha1" in r["warnings"][0]
    r = hook.review(pod("c", cosched="pg"))
    assert r["allowed"] and "scheduling.x-k8s.io/v1alpha1" in r["warnings"][0]
    assert "warnings" not in hook.review(pod("n", group="pg"))


def test_a_scheduler_plugins_group_over_every_max_size_and_over_the_caps_is_denied_from_its_min_resources(hook):
    api = "scheduling.x-k8s.io/v1alpha1"
    r = hook.review(volcano_pg("train", min_member=40, min_resources={"cpu": "40", "nvidia.com/gpu": "40"}, api=api))
    assert not r["allowed"] and "gpu-a: maxSize 4 holds 32 of 40 pods" in r["status"]["message"]
    r = hook.review(volcano_pg("t", "capped", min_member=3, min_resources={"cpu": "60", "nvidia.com/gpu": "12"}, api=api))
    assert not r["allowed"] and "namespace capped cap maxGPUs is 8" in r["status"]["message"]
    assert hook.review(volcano_pg("ok", "capped", min_member=2, min_resources={"cpu": "4"}, api=api))["allowed"]


def test_a_pod_without_selectors_is_fit_tested_once_per_node_shape_not_once_per_labelled_group(monkeypatch):
    from gangscale.catalog import parse_catalog
    from gangscale.webhook import rules
    from gangscale.webhook.admission import findings_for

    from .conftest import make_config

    # 300 groups of 2 shapes, each with its own label (as zones, pools, ids make them in a real catalog)
    raw = [{"name": f"g{i}", "instanceType": "custom", "pricePerHour": 1.0, "minSize": 0, "maxSize": 1,
            "currentSize": 0, "allocatable": {"cpu": "4" if i % 2 else "8", "memory": "16Gi", "pods": "110"},
            "labels": {"id": str(i)}, "taints": []} for i in range(300)]
    policy = rules.Policy(make_config(), tuple(parse_catalog(raw)[0]))
    calls: list[str] = []
    real = rules._usable
    monkeypatch.setattr(rules, "_usable", lambda m, g: calls.append(g.name) or real(m, g))

    def review(p: dict) -> list:
        calls.clear()
        return findings_for({"uid": "u", "operation": "CREATE", "namespace": "default", "object": p}, policy)

    assert review(pod("p", group="pg", cpu="6")) == [] and len(calls) == 2
    (f,) = review(pod("big", group="pg", cpu="64"))  # the denial still names groups, as plan does
    assert len(calls) == 2 and "g0: needs 64 cpu, a node has 8" in f.message and "and 296 more" in f.message
    assert review(pod("s", group="pg", cpu="6", selector={"id": "8"})) == [] and len(calls) == 300  # labels matter
    (f,) = review(pod("s", group="pg", cpu="6", selector={"id": "7"}))  # g7 is a 4-cpu group
    assert f.rule == "noNodeGroupFits" and len(calls) == 300 and "g0: nodeSelector/affinity does not match" in f.message


def test_the_group_lookup_asks_only_for_names_an_object_can_have():
    lookup = lookup_of(podgroup("pg", min_count=4))
    for name in ("../../../api/v1/namespaces/kube-system/secrets/x", "a/b", "UPPER", "a..b", "", "x" * 300):
        assert lookup("native", "default", name) is None
    assert lookup("native", "../x", "pg") is None
    assert lookup.reads == []
    assert lookup("native", "default", "pg")["metadata"]["name"] == "pg"
