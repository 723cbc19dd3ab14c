"""Reading Kubernetes objects: quantities, pod requests as the scheduler sums them, bad input."""

from __future__ import annotations

from fractions import Fraction

import pytest

from builders import node, pod, podgroup
from gangscale.ingest import ingest, pod_requests
from gangscale.resources import QuantityError, parse_quantity, to_units


@pytest.mark.parametrize("text, value", [
    ("500m", Fraction(1, 2)), ("2", 2), ("1.5", Fraction(3, 2)), ("16Gi", 16 * 2**30), ("1k", 1000),
    ("1e3", 1000), ("100M", 10**8), ("0.1", Fraction(1, 10)), (4, 4), ("1Ki", 1024), ("250u", Fraction(250, 10**6)),
])
def test_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "lots", "1.2.3", "5 Gi", "1Gb", None, True, "1e999"])
def test_bad_quantities_raise(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_units_round_up_like_the_scheduler():
    assert to_units("cpu", "1.0005") == 1001
    assert to_units("cpu", "250m") == 250
    assert to_units("memory", "1Mi") == 2**20
    with pytest.raises(QuantityError):
        to_units("cpu", "-1")


def test_pod_requests_sum_containers_max_init_add_overhead_and_a_pod_slot():
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "2", "example.com/fpga": "1"}}},
        ],
        "initContainers": [
            {"name": "big-init", "resources": {"requests": {"cpu": "4", "memory": "512Mi"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}}},
        ],
        "overhead": {"cpu": "100m", "memory": "64Mi"},
    }
    req = pod_requests(spec)
    # init peak: 4 cpu (before the sidecar starts); run: 1.5 + 0.2 sidecar = 1.7 -> max 4 + 0.1 overhead
    assert req["cpu"] == 4100
    assert req["memory"] == 2**30 + 128 * 2**20 + 64 * 2**20
    assert req["nvidia.com/gpu"] == 2 and req["example.com/fpga"] == 1
    assert req["pods"] == 1


def test_sidecar_counts_during_later_init_containers():
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"name": "init", "resources": {"requests": {"cpu": "3"}}}]}
    assert pod_requests(spec)["cpu"] == 4000


def test_malformed_objects_become_warnings_or_invalid_gangs_not_crashes():
    objs = [
        "not an object",
        {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "many"}}},
        {"kind": "Pod"},
        {"apiVersion": "scheduling.k8s.io/v9", "kind": "PodGroup", "metadata": {"name": "future"}},
        podgroup("ok", min_count=1), pod("m", group="ok"),
        pod("bad-toleration", tolerations=[{"key": "x", "operator": "Sometimes"}]),
    ]
    cluster = ingest(objs)
    assert len(cluster.warnings) == 4
    assert any("status.allocatable.cpu" in w for w in cluster.warnings)
    gangs = {g.name: g for g in cluster.gangs}
    assert gangs["ok"].invalid is None and len(gangs["ok"].pending) == 1
    assert "spec.tolerations[0].operator" in gangs["bad-toleration"].invalid


def test_pods_created_before_their_podgroup_join_it_once_it_exists():
    members = [pod(f"w{i}", group="late") for i in range(2)]
    assert ingest(members).gangs[0].exists is False
    cluster = ingest(members + [podgroup("late", min_count=2)])
    (g,) = cluster.gangs
    assert g.exists and len(g.pending) == 2 and g.policy == "gang"


def test_same_object_listed_in_two_versions_is_read_once():
    objs = [podgroup("pg", min_count=2, version="v1beta1"), podgroup("pg", min_count=2, version="v1alpha2"),
            pod("a", group="pg"), pod("b", group="pg")]
    (g,) = ingest(objs).gangs
    assert g.api == "scheduling.k8s.io/v1beta1" and len(g.pending) == 2


def test_succeeded_and_failed_pods_hold_no_capacity():
    objs = [pod("done", node="n1", phase="Succeeded"), pod("running", node="n1")]
    assert [p.name for p in ingest(objs).bound] == ["running"]


def test_newer_workloads_are_templates_and_v1alpha3_podgroups_are_read():
    objs = [{"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "w"}, "spec": {}},
            podgroup("pg", min_count=1, version="v1alpha3"), pod("a", group="pg")]
    cluster = ingest(objs)
    assert cluster.warnings == []
    assert [(g.api, len(g.pending)) for g in cluster.gangs] == [("scheduling.k8s.io/v1alpha3", 1)]


def test_finished_members_do_not_count_toward_quorum():
    objs = [podgroup("pg", min_count=3), pod("done", group="pg", node="n1", phase="Succeeded"),
            pod("up", group="pg", node="n1"), pod("new", group="pg")]
    (g,) = ingest(objs).gangs
    assert (g.bound, len(g.pending)) == (1, 1)


def test_yaml_quirks_read_as_kubernetes_means_them():
    from gangscale.loader import iter_objects, parse_documents

    text = b"""apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1, creationTimestamp: 2026-11-30T01:00:00Z}
  spec: {unschedulable: no}
  status:
    allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
    conditions: [{type: Ready, status: "True"}]
- apiVersion: v1
  kind: Pod
  metadata: {name: a, namespace: default, creationTimestamp: 2026-11-30T02:00:00Z}
  spec:
    containers:
    - name: c
      resources: &res
        requests: {cpu: "1", memory: 1Gi}
    - name: d
      resources:
        <<: *res
  status: {phase: Pending}
"""
    cluster = ingest(list(iter_objects(parse_documents(text))))
    assert cluster.nodes[0].unschedulable is False  # YAML 1.2 reads `no` as a string: still not true
    (g,) = cluster.gangs
    assert g.pending[0].requests["cpu"] == 2000  # the merge key is honoured: both containers request 1 cpu
    assert g.pending[0].created == "2026-11-30T02:00:00Z"  # an unquoted timestamp keeps the API's form


def test_parse_results_belong_to_the_caller_and_nothing_is_kept_in_the_module_between_ingests():
    import gangscale.ingest as ingest_module

    def workload(i: int) -> list[dict]:
        spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": f"{i + 1}", "memory": "1Gi"}}}],
                "nodeSelector": {"pool": f"p{i}"}}
        return [{"kind": "Pod", "apiVersion": "v1", "metadata": {"name": f"w{i}-{j}", "namespace": "ns"},
                 "spec": spec, "status": {"phase": "Pending"}} for j in range(3)]

    before = {k: len(v) for k, v in vars(ingest_module).items() if isinstance(v, dict)}
    for i in range(50):
        ingest(workload(i))
    after = {k: len(v) for k, v in vars(ingest_module).items() if isinstance(v, dict)}
    assert after == before  # no module-level table grew with what was read
    from gangscale.ingest import ParseCache

    owned = ParseCache(limit=10)
    cluster = ingest([o for i in range(20) for o in workload(i)], cache=owned)
    assert [p.requests["cpu"] for p in cluster.gangs[0].pending] == [1000]
    assert len(owned.requests) == 10 and len(owned.placements) == 10  # one entry per distinct spec, bounded


def test_ingest_builds_gangs_and_pods_with_their_final_values_and_nobody_can_change_them_afterwards():
    import dataclasses

    bad = pod("w-bad", group="train")
    bad["spec"]["priority"] = "high"  # a bad member: the gang is invalid, its name in the reason
    objs = [podgroup("train", min_count=3), pod("w-0", group="train"), pod("w-1", group="train", node="n1"), bad,
            podgroup("serve", min_count=2), pod("s-0", group="serve"), pod("s-1", group="serve")]
    cluster = ingest(objs)
    gangs = {g.name: g for g in cluster.gangs}
    assert gangs["train"].bound == 1 and gangs["train"].invalid.startswith("pod default/w-bad:")
    assert isinstance(gangs["serve"].pending, tuple) and len(gangs["serve"].pending) == 2
    assert all(p.group_key == ("default", "serve") for p in gangs["serve"].pending)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gangs["serve"].bound = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        gangs["serve"].pending[0].phase = "Running"  # type: ignore[misc]


def test_a_cache_kept_across_reads_parses_an_unchanged_pod_once_and_a_changed_one_again(monkeypatch):
    """The simulator's cache (`objects=True`): the same JSON gives the same Pod and Node, parsed once; a pod
    bound since the last read, or a node's group matched, never leaks into the next read."""
    import gangscale.parse as parse_module
    from gangscale.ingest import ParseCache

    calls = []
    real = parse_module._ingest_pod
    monkeypatch.setattr(parse_module, "_ingest_pod", lambda obj, cache=None: calls.append(1) or real(obj, cache))
    owned = ParseCache(objects=True)
    objs = [podgroup("train", min_count=2), pod("w-0", group="train"), pod("w-1", group="train"),
            node("n1")]
    first = ingest(objs, cache=owned)
    with pytest.raises(AttributeError):  # frozen (issue 15): the controller's group match returns a copy
        first.nodes[0].node_group = "matched-in-place"
    second = ingest(objs, cache=owned)
    assert len(calls) == 2 and second.gangs[0].pending == first.gangs[0].pending
    assert second.nodes[0].node_group is None
    objs[1]["spec"]["nodeName"] = "n1"  # bound since the last read: parsed again, counted as bound
    third = ingest(objs, cache=owned)
    assert len(calls) == 3 and third.gangs[0].bound == 1 and [p.name for p in third.gangs[0].pending] == ["w-1"]
    ingest(objs)  # without `objects`, nothing is kept between reads
    assert len(calls) == 5


def test_a_cache_keyed_by_object_writes_no_json_and_parses_a_replaced_pod_again(monkeypatch):
    """`frozen_objects`: the caller never changes an object it handed over, so the object itself is the key (no
    JSON written per read); a bound pod is a new dict, parsed again; `forget_objects` drops what it held."""
    import gangscale.parse as parse_module
    from gangscale.ingest import ParseCache

    calls, dumps = [], []
    real, real_key = parse_module._ingest_pod, parse_module._object_key
    monkeypatch.setattr(parse_module, "_ingest_pod", lambda obj, cache=None: calls.append(1) or real(obj, cache))
    monkeypatch.setattr(parse_module, "_object_key", lambda obj: dumps.append(1) or real_key(obj))
    owned = ParseCache(objects=True, frozen_objects=True)
    objs = [podgroup("train", min_count=2), pod("w-0", group="train"), pod("w-1", group="train"), node("n1")]
    first = ingest(objs, cache=owned)
    second = ingest(objs, cache=owned)
    assert len(calls) == 2 and not dumps and second.gangs[0].pending == first.gangs[0].pending
    objs[1] = {**objs[1], "spec": {**objs[1]["spec"], "nodeName": "n1"}}  # bound: a new object
    third = ingest(objs, cache=owned)
    assert len(calls) == 3 and third.gangs[0].bound == 1 and [p.name for p in third.gangs[0].pending] == ["w-1"]
    assert len(owned.held) == 5  # both versions of w-0, w-1, n1 and the PodGroup (`ingest_group_cached`)
    owned.forget_objects()
    assert not owned.held and not owned.pods and not owned.nodes and not owned.groups
    ingest(objs, cache=owned)
    assert len(calls) == 5 and not dumps


def test_a_pod_listed_twice_is_a_duplicate_at_every_read_of_a_kept_cache_and_a_renamed_copy_is_not():
    """`identities_cached`: the uid and name of an object handed over are kept by the object (and the object held,
    so its id is never another's); the duplicate check itself is per read."""
    from gangscale.ingest import ParseCache

    owned = ParseCache(objects=True, frozen_objects=True)
    p = pod("w-0")
    objs = [p, p, node("n1")]
    for _ in range(2):
        c = ingest(objs, cache=owned)
        assert [q.name for g in c.gangs for q in g.pending] == ["w-0"] and any("more than once" in w for w in c.warnings)
    objs[1] = {**p, "metadata": {**p["metadata"], "name": "w-1", "uid": "uid-w-1"}}
    c = ingest(objs, cache=owned)
    assert sorted(q.name for g in c.gangs for q in g.pending) == ["w-0", "w-1"]
    assert not any("more than once" in w for w in c.warnings)
    assert len(owned.identities) == 3 and all(id(o) in owned.held for o in objs)


def test_a_kept_pod_is_read_again_in_one_lookup_and_every_read_is_what_a_fresh_ingest_reads(monkeypatch):
    """`ParseCache.pod_reads`: under `frozen_objects` a pod read once is read again without its identities or parse
    being asked for; the duplicate check, DRA claim references (and a bad pod, never kept) still count at every
    read. The checker is `ingest` with no cache."""
    import gangscale.parse as parse_module
    from gangscale.ingest import ParseCache
    from test_dra import DEV, claim, dra_pod, slice_, template

    owned = ParseCache(objects=True, frozen_objects=True)
    w0 = pod("w-0", group="train")
    bad = pod("w-2", group="train", cpu="lots")
    objs = [podgroup("train", min_count=2), w0, pod("w-1", group="train"), w0, bad, node("gpu-0", cpu="16", mem="64Gi"),
            slice_("gpu-0", 2), claim("mine", 1, allocated=["gpu-0/gpu-1"]), dra_pod("run", shared="mine", node="gpu-0"),
            template("two", 2), dra_pod("infer", tmpl="two")]

    def same(a, b):
        assert a.gangs == b.gangs and a.bound == b.bound and a.nodes == b.nodes and a.warnings == b.warnings

    fresh = ingest(objs)
    same(ingest(objs, cache=owned), fresh)
    asked = []
    real = parse_module.identities_cached
    monkeypatch.setattr("gangscale.ingest.identities_cached", lambda *a: asked.append(a[1]) or real(*a))
    again = ingest(objs, cache=owned)
    same(again, fresh)
    assert [o["kind"] for o in asked] == ["Pod", "Node"] and asked[0] is bad  # the kept pods: one lookup each
    infer = next(p for g in again.gangs for p in g.pending if p.name == "infer")
    assert again.nodes[0].allocatable[DEV] == 1 and infer.requests[DEV] == 2  # the claims still counted
    assert any("more than once" in w for w in again.warnings) and "cpu" in again.gangs[0].invalid


def test_a_nodes_dra_devices_are_counted_once_however_often_a_cache_kept_across_reads_reads_it():
    # ingest adds a node's ResourceSlice devices to its allocatable; with parsed Nodes shared between reads
    # (the simulator's ParseCache(objects=True)) an in-place add counted them again on every read
    from gangscale.ingest import ParseCache
    from test_dra import DEV, slice_

    owned = ParseCache(objects=True)
    objs = [node("gpu-0", cpu="16", mem="64Gi"), slice_("gpu-0", 4)]
    counts = [ingest(objs, cache=owned).nodes[0].allocatable.get(DEV) for _ in range(3)]
    assert counts == [4, 4, 4]


_SUFFIXES = ["", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@pytest.mark.parametrize("name", ["cpu", "memory", "pods"])
def test_a_plain_quantity_read_in_integer_arithmetic_gives_the_exact_fractions_ceiling_or_the_same_refusal(name):
    # `2490m`, `16Gi`, `4`: the quick integer path (cloud_adapters.resources._plain_units) against the exact one
    from math import ceil

    from cloud_adapters.resources import _plain_units, check_bound

    def exact(text: str) -> int | str:
        q = parse_quantity(text) * (1000 if name == "cpu" else 1)
        try:
            return check_bound(name, ceil(q))
        except QuantityError as exc:
            return str(exc)

    def quick(text: str) -> int | str | None:
        try:
            return _plain_units(name, text)
        except QuantityError as exc:
            return str(exc)

    numbers = ["0", "1", "7", "0999", "999", "1000", "1001", "2490", "123456789", "8796093022208", "9" * 30]
    texts = [n + s for n in numbers for s in _SUFFIXES]
    assert all(quick(t) == exact(t) for t in texts)
    assert all(quick(t) is None for t in ["1.5", "+1", "1e3", "5n", "5u", "9" * 31, " 1", "1Mi "])


def test_a_gang_with_its_members_equals_its_head_replaced_with_them_field_for_field():
    import dataclasses

    from gangscale.ingest import _Members
    from gangscale.model import Gang
    from gangscale.parse import _ingest_pod

    head = Gang("ns", "g", "scheduling.k8s.io/v1beta1", "gang", 3, 7, ("zone",), exists=False, invalid=None,
                created="2026-01-01T00:00:00Z", uid="u1", annotations={"a": "b"}, queue_priority=9)
    members = _Members()
    bound = dataclasses.replace(_ingest_pod(pod("g-0", group="g"))[0], node_name="n1")
    pending = _ingest_pod(pod("g-1", group="g"))[0]
    gated = dataclasses.replace(pending, name="g-2", phase="SchedulingGated")
    for p, problem in ((bound, None), (bound, None), (pending, None), (gated, None), (pending, "spec.priority is bad")):
        members.add(p, problem)
    built = members.gang(head, "waiting for Kueue")
    assert built == dataclasses.replace(head, invalid=members.invalid, bound=2, gated=1, pending=(pending,),
                                        admission="waiting for Kueue")
    assert [getattr(built, f) for f in Gang.__dataclass_fields__] != [getattr(head, f) for f in Gang.__dataclass_fields__]


def test_a_pod_without_placement_fields_gets_the_placement_the_parser_makes_without_a_cache_entry():
    from gangscale.parse import ParseCache, _pod_placement_cached, pod_placement

    cache = ParseCache()
    bare = {"containers": [{"name": "c"}]}
    assert _pod_placement_cached(bare, cache) == pod_placement(bare) and not cache.placements
    picky = {**bare, "nodeSelector": {"pool": "a"}, "tolerations": [{"operator": "Exists"}]}
    assert _pod_placement_cached(picky, cache) == pod_placement(picky) != pod_placement(bare)
    assert len(cache.placements) == 1


def test_a_podgroup_marked_invalid_in_one_read_of_a_kept_cache_is_valid_in_the_next_read_without_the_cause(monkeypatch):
    """`ingest_group_cached`: a PodGroup's definition is kept by the object itself across reads, and each read gets
    a copy: a read that marks it invalid (here a second served version of the group with unreadable claims) leaves
    the kept one as parsed. The second object is parsed once per read (its key is taken by the first)."""
    import gangscale.parse as parse_module
    from gangscale.ingest import ParseCache

    calls = []
    real = parse_module._ingest_group
    owned = ParseCache(objects=True, frozen_objects=True)
    good = podgroup("train", min_count=2)
    bad = podgroup("train", min_count=2, version="v1beta1")
    bad["spec"]["resourceClaims"] = [{"name": "gpus"}]  # neither a claim nor a template: the group is invalid
    members = [pod("w-0", group="train"), pod("w-1", group="train")]
    monkeypatch.setattr(parse_module, "_ingest_group", lambda *a: calls.append(a[0]["apiVersion"]) or real(*a))
    first = ingest([good, bad, *members], cache=owned)
    assert first.gangs[0].invalid and "resourceClaims" in first.gangs[0].invalid
    second = ingest([good, *members], cache=owned)
    assert second.gangs[0].invalid is None and second.gangs[0].min_count == 2
    third = ingest([good, bad, *members], cache=owned)
    assert third.gangs[0].invalid == first.gangs[0].invalid
    assert calls.count("scheduling.k8s.io/v1alpha2") == 1  # kept after the first read
    assert id(good) in owned.groups and id(bad) not in owned.groups
    owned.forget_objects()
    assert not owned.groups
