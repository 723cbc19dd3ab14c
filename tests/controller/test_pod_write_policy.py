"""Gate mode's pod writes and the ValidatingAdmissionPolicy that fences them (config/deploy/gate-mode).

The policy's CEL is evaluated as shipped, by cel-python through the emulator's policy admission
(tests/kube/emulator_policy.py): against the exact patches the controller sends (`gates.release_patch`
on pods of every affinity shape `narrow_ops` handles), against what a compromised controller could send,
and end to end with `gangscale run` releasing and recovering gated pods while the emulator enforces it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from builders import node
from kube.emulator import _json_patch
from kube.emulator_admission import AdmissionDenied
from kube.emulator_policy import check, request_attributes

from gangscale.controller.gates import release_patch
from gangscale.ingest import CAPACITY_GATE
from gangscale.kube.client import connect
from gangscale.kube.errors import KubeError

from .conftest import events, wait_for
from .test_gate_mode import gated_gang, gates_of, namespace, narrowed_to

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "config" / "deploy" / "gate-mode"
SA = "system:serviceaccount:gangscale-system:gangscale"
SA_TOKEN = "gangscale-controller-token"
OWNER = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1", "controller": True}]
KUEUE_GATE = "kueue.x-k8s.io/admission"
TERMS = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"


def component_docs() -> list[dict[str, Any]]:
    kust = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    return [d for f in kust["resources"] for d in yaml.safe_load_all((COMPONENT / f).read_text()) if d]


def policy_docs() -> list[dict[str, Any]]:
    """The shipped ValidatingAdmissionPolicies and their bindings."""
    return [d for d in component_docs() if d["kind"].startswith("ValidatingAdmissionPolicy")]


def judge(operation: str, new: dict[str, Any] | None, old: dict[str, Any], user: str = SA) -> str | None:
    """None when the shipped policies admit the write, else the denial's message."""
    docs = policy_docs()
    request = request_attributes(("", "v1", "pods"), "Pod", operation, "team", old["metadata"]["name"], user)
    try:
        check([d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"],
              [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"], request, new, old)
    except AdmissionDenied as exc:
        assert exc.code == 422
        return exc.message
    return None


def gated_pod(affinity: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team", "labels": {"app": "train"}, **meta},
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1"}],
                 "tolerations": [{"key": "gpu", "operator": "Exists"}],
                 "schedulingGates": [{"name": CAPACITY_GATE}]}}
    if affinity is not None:
        pod["spec"]["affinity"] = affinity
    return pod


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


ZONE = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
NOT_Q = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["q"]}]}
SHAPES = {  # every branch of narrow_ops: no affinity, no nodeAffinity, no required terms, terms of each kind
    "no affinity": gated_pod(),
    "pod anti-affinity only": gated_pod({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": "kubernetes.io/hostname"}]}}),
    "preferred only": gated_pod({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": ZONE}]}}),
    "required terms": gated_pod(required(ZONE, NOT_Q, {})),
    "annotated": gated_pod(required(ZONE), annotations={"team.example/owner": "ml"}),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("node_name", ["ip-10-0-1-7.ec2.internal", None])
def test_the_controllers_release_patch_passes_the_policy_for_every_affinity_shape(shape, node_name):
    old = SHAPES[shape]
    new = _json_patch(copy.deepcopy(old), release_patch(old, [CAPACITY_GATE], node_name))
    assert judge("UPDATE", new, old) is None
    old_two = copy.deepcopy(old)  # our gate next to another one: only ours goes
    old_two["spec"]["schedulingGates"] = [{"name": KUEUE_GATE}, {"name": CAPACITY_GATE}]
    new_two = _json_patch(copy.deepcopy(old_two), release_patch(old_two, [KUEUE_GATE, CAPACITY_GATE], node_name))
    assert judge("UPDATE", new_two, old_two) is None


def _patched(old: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return _json_patch(copy.deepcopy(old), ops)


def _malicious() -> dict[str, tuple[dict[str, Any], dict[str, Any], str]]:
    """name -> (old pod, new pod, a word of the denial's message)."""
    old = gated_pod(required(ZONE))
    release = release_patch(old, [CAPACITY_GATE], "n1")
    two = gated_pod()
    two["spec"]["schedulingGates"] = [{"name": KUEUE_GATE}, {"name": CAPACITY_GATE}]
    return {
        "image changed": (old, _patched(old, [*release, {"op": "replace", "path": "/spec/containers/0/image",
                                                         "value": "evil.example/miner:1"}]), "containers"),
        "label changed": (old, _patched(old, [*release, {"op": "replace", "path": "/metadata/labels/app",
                                                         "value": "x"}]), "annotation"),
        "other annotation": (old, _patched(old, [*release, {"op": "add", "path": "/metadata/annotations/x",
                                                            "value": "y"}]), "annotation"),
        "toleration added": (old, _patched(old, [*release, {"op": "add", "path": "/spec/tolerations/-",
                                                            "value": {"operator": "Exists"}}]), "tolerations"),
        "no gate removed": (old, _patched(old, release[1:3]), "scheduling gate"),
        "another gate removed": (two, _patched(two, [{"op": "remove", "path": "/spec/schedulingGates/0"}]),
                                 "scheduling gate"),
        "every gate removed": (two, _patched(two, [{"op": "remove", "path": "/spec/schedulingGates"}]),
                               "scheduling gate"),
        "affinity widened": (old, _patched(old, [*release, {"op": "add", "path": f"{TERMS}/-",
                                                            "value": {"matchFields": [NOT_Q["matchFields"][0]]}}]),
                             "narrow"),
        "requirement dropped": (old, _patched(old, [*release, {"op": "remove", "path": f"{TERMS}/0/matchExpressions"}]),
                                "narrow"),
        "narrowed to two nodes": (old, _patched(old, [*release[:2], {"op": "add", "path": f"{TERMS}/0/matchFields",
                                  "value": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]},
                                  release[-1]]), "narrow"),
        "pod anti-affinity added": (old, _patched(old, [*release, {"op": "add", "path": "/spec/affinity/podAffinity",
                                    "value": {"requiredDuringSchedulingIgnoredDuringExecution": []}}]), "pod affinity"),
    }


@pytest.mark.parametrize("case", sorted(_malicious()))
def test_the_policy_refuses_what_a_compromised_controller_could_write(case):
    old, new, word = _malicious()[case]
    message = judge("UPDATE", new, old)
    assert message is not None and word in message, message
    assert judge("UPDATE", new, old, user="kubernetes-admin") is None  # a user is not fenced: RBAC's matter


OTHER_SA = "system:serviceaccount:batch:some-operator"


UNGATE_SA = "system:serviceaccount:gangscale-system:gangscale-ungate"  # the chart's pre-delete hook


def test_no_other_service_account_may_lift_the_capacity_gate_but_a_user_and_gangscales_own_accounts_may():
    old = gated_pod()
    old["spec"]["schedulingGates"] = [{"name": KUEUE_GATE}, {"name": CAPACITY_GATE}]
    lifted = _patched(old, [{"op": "remove", "path": "/spec/schedulingGates/1"}])
    message = judge("UPDATE", lifted, old, user=OTHER_SA)
    assert message is not None and "only gangscale's own ServiceAccounts remove" in message
    assert judge("UPDATE", _patched(old, [{"op": "remove", "path": "/spec/schedulingGates"}]), old,
                 user=OTHER_SA) is not None
    assert judge("UPDATE", _patched(old, [{"op": "remove", "path": "/spec/schedulingGates/0"}]), old,
                 user=OTHER_SA) is None  # Kueue lifting its own gate
    assert judge("UPDATE", lifted, old, user="kubernetes-admin") is None  # the documented manual release
    assert judge("UPDATE", lifted, old) is None  # the controller
    assert judge("UPDATE", lifted, old, user=UNGATE_SA) is None  # `gangscale ungate` at uninstall


def _released(**changes: Any) -> dict[str, Any]:
    pod = gated_pod(annotations={"gangscale.io/narrowed-to": "n1"}, ownerReferences=OWNER)
    pod["spec"].pop("schedulingGates")
    for path, value in changes.items():
        where, key = (pod["spec"], path) if path != "ownerReferences" else (pod["metadata"], path)
        if value is None:
            where.pop(key, None)
        else:
            where[key] = value
    return pod


def test_a_delete_is_admitted_only_for_an_unbound_released_pod_that_has_an_owner():
    assert judge("DELETE", None, _released()) is None  # what `gates.stranded` finds and the recovery deletes
    refused = {
        "an unrelated pod": gated_pod(ownerReferences=OWNER) | {"spec": {"containers": []}},
        "a bound pod": _released(nodeName="n1"),
        "a pod still gated": _released(schedulingGates=[{"name": CAPACITY_GATE}]),
        "a pod without owner": _released(ownerReferences=None),
        "a kube-system pod never released": {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "coredns", "namespace": "kube-system", "ownerReferences": OWNER}, "spec": {"containers": []}},
    }
    for what, pod in refused.items():
        message = judge("DELETE", None, pod)
        assert message is not None and "delete" in message, what


# ------------------------------------------------------------------ the manifests


def test_gate_mode_grants_exactly_pod_patch_and_delete_bound_to_the_controller_and_fenced_by_the_policy():
    kust = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component"
    assert sorted(kust["resources"]) == sorted(p.name for p in COMPONENT.glob("*.yaml") if p.name != "kustomization.yaml")
    deploy = yaml.safe_load((ROOT / "config" / "deploy" / "kustomization.yaml").read_text())
    assert "gate-mode" in deploy["components"]  # config.yaml's gateMode is opt-out (the default): gate mode is on
    assert yaml.safe_load((ROOT / "config" / "deploy" / "config.yaml").read_text())["gateMode"] == "opt-out"
    docs = {d["kind"]: d for d in component_docs()}  # the last of each kind
    assert docs["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch", "delete"]}]
    sa = yaml.safe_load((ROOT / "config" / "deploy" / "serviceaccount.yaml").read_text())["metadata"]["name"]
    assert docs["ClusterRoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": sa,
                                                       "namespace": deploy["namespace"]}]
    policies = [d for d in component_docs() if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [d for d in component_docs() if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert sorted(p["metadata"]["name"] for p in policies) == ["gangscale-capacity-gate", "gangscale-pod-writes"]
    assert sorted((b["spec"]["policyName"], tuple(b["spec"]["validationActions"])) for b in bindings) == [
        ("gangscale-capacity-gate", ("Deny",)), ("gangscale-pod-writes", ("Deny",))]
    named = {p["metadata"]["name"]: p["spec"]["matchConditions"][0]["expression"] for p in policies}
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in policies)
    assert f"'system:serviceaccount:{deploy['namespace']}:{sa}'" in named["gangscale-pod-writes"]
    assert f"'system:serviceaccount:{deploy['namespace']}:'" in named["gangscale-capacity-gate"]
    pod_writes = next(p for p in policies if p["metadata"]["name"] == "gangscale-pod-writes")
    assert pod_writes["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == [
        "UPDATE", "DELETE"]
    for version in ("1.35.0", "1.36.0", "1.37.0"):
        for d in component_docs():
            kubernetes_validate.validate(d, version, strict=True)


def test_the_chart_renders_gate_modes_pod_writes_and_policy_unless_gate_mode_is_off():
    from .test_helm_chart import helm_template

    def kinds(values: dict[str, Any]) -> set[str]:
        return {d["kind"] for d in helm_template(values) if d["metadata"]["name"].startswith("gangscale-")
                and d["kind"].startswith(("Validating", "ClusterRole"))}

    fenced = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterRole", "ClusterRoleBinding"}
    assert kinds({}) == kinds({"config": {"gateMode": "all"}}) == kinds({"config": {"gateMode": "opt-in"}}) == fenced
    assert kinds({"config": {"gateMode": "opt-out"}}) == fenced
    off = helm_template({"config": {"gateMode": "off"}})
    assert not any(d["kind"].startswith("ValidatingAdmission") for d in off)
    installed = [d for d in off if "helm.sh/hook" not in d["metadata"].get("annotations", {})]  # not the uninstall hook
    assert not [r for d in installed if d["kind"] == "ClusterRole" for r in d["rules"] if "pods" in r["resources"]
                and set(r["verbs"]) - {"get", "list", "watch"}]
    docs = helm_template({"serviceAccount": {"name": "gs"}})
    pod_writes = next(d for d in docs if d["metadata"]["name"] == "gangscale-pod-writes")
    assert "'system:serviceaccount:gangscale-system:gs'" in pod_writes["spec"]["matchConditions"][0]["expression"]


# ------------------------------------------------------------------ end to end, under the policy


def shipped_rbac(*, gate_mode: bool) -> list[dict[str, Any]]:
    """config/deploy/rbac.yaml, and the gate-mode component's RBAC when `gate_mode`."""
    files = [ROOT / "config" / "deploy" / "rbac.yaml"] + ([COMPONENT / "rbac.yaml"] if gate_mode else [])
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


@pytest.fixture
def fenced(cluster, tmp_path):
    """The emulator enforcing the shipped RBAC with the gate-mode component and its policies, the controller
    authenticated as its ServiceAccount."""
    cluster.users[SA_TOKEN] = SA
    cluster.rbac = True
    cluster.apply_all(shipped_rbac(gate_mode=True) + policy_docs())
    cluster.kubeconfig(str(tmp_path / "kubeconfig"), token=SA_TOKEN)  # what the `controllers` fixture starts with
    return connect(cluster.kubeconfig(str(tmp_path / "sa-kubeconfig"), token=SA_TOKEN))


def test_gate_mode_releases_narrowed_and_recovers_a_stranded_pod_under_the_shipped_policy(cluster, world, controllers,
                                                                                         fenced):
    namespace(cluster, "team", gate_mode=True)
    cluster.apply(node("n1", cpu="8", mem="32Gi", labels={"zone": "a"}))
    ctl = controllers(narrowedNodeGraceSeconds=0)
    gated_gang(cluster, "train", 1, cpu="2")
    p = cluster.get("v1", "Pod", "team", "train-0")
    p["metadata"]["ownerReferences"] = OWNER
    p["spec"]["affinity"] = required(copy.deepcopy(ZONE))  # a term the narrowing appends metadata.name In [n1] to
    cluster.apply(p)
    wait_for(lambda: narrowed_to(cluster, "team", "train-0") == ["n1"] and not gates_of(cluster, "team", "train-0"),
             timeout=60, what="the pod released through the policy, narrowed to n1")
    cluster.delete("v1", "Node", "", "n1")  # the node dies before the scheduler binds the pod
    wait_for(lambda: cluster.get("v1", "Pod", "team", "train-0") is None, timeout=60,
             what="the stranded pod deleted through the policy")
    wait_for(lambda: events(cluster, "NarrowedNodeGone"), what="the NarrowedNodeGone Event")
    assert not ctl.logged("cannot lift the scheduling gate") and not ctl.logged("cannot delete the stranded pod")
    ctl.assert_no_tracebacks()


def test_the_controllers_account_cannot_change_an_image_or_delete_a_pod_it_did_not_release(cluster, fenced,
                                                                                           tmp_path):
    namespace(cluster, "team", gate_mode=True)
    gated_gang(cluster, "g", 1)
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns", "namespace": "kube-system",
                                                                   "ownerReferences": OWNER},
                   "spec": {"containers": [{"name": "c", "image": "coredns:1"}]}})
    path = "/api/v1/namespaces/team/pods/g-0"
    image = {"op": "add", "path": "/spec/containers/0/image", "value": "evil.example/miner:1"}
    with pytest.raises(KubeError, match="may not change a pod's containers") as exc:
        fenced.json_patch(path, [*release_patch(cluster.get("v1", "Pod", "team", "g-0"), [CAPACITY_GATE], None), image])
    assert exc.value.status == 422
    with pytest.raises(KubeError, match="may only remove its own scheduling gate"):
        fenced.json_patch("/api/v1/namespaces/kube-system/pods/dns", [image])
    with pytest.raises(KubeError, match="may only delete"):
        fenced.delete("/api/v1/namespaces/kube-system/pods/dns")
    assert cluster.get("v1", "Pod", "kube-system", "dns")["spec"]["containers"][0]["image"] == "coredns:1"
    assert gates_of(cluster, "team", "g-0") == [CAPACITY_GATE]
    cluster.users["other-token"] = OTHER_SA  # another controller, allowed to patch pods, cannot lift gangscale's gate
    cluster.apply_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "operator"},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "operator"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "operator"},
         "subjects": [{"kind": "ServiceAccount", "name": "some-operator", "namespace": "batch"}]}])
    other = connect(cluster.kubeconfig(str(tmp_path / "other-kubeconfig"), token="other-token"))
    with pytest.raises(KubeError, match="only gangscale's own ServiceAccounts remove"):
        other.json_patch(path, release_patch(cluster.get("v1", "Pod", "team", "g-0"), [CAPACITY_GATE], None))
    # a cluster admin is not fenced: the documented manual release still works
    admin = connect(cluster.kubeconfig(str(tmp_path / "admin-kubeconfig")))
    admin.json_patch(path, release_patch(cluster.get("v1", "Pod", "team", "g-0"), [CAPACITY_GATE], None))
    assert gates_of(cluster, "team", "g-0") == []


def test_without_gate_modes_component_the_controllers_account_writes_no_pod(cluster, world, controllers, tmp_path):
    cluster.users[SA_TOKEN] = SA
    cluster.rbac = True
    cluster.apply_all(shipped_rbac(gate_mode=False))
    cluster.kubeconfig(str(tmp_path / "kubeconfig"), token=SA_TOKEN)
    namespace(cluster, "team", gate_mode=True)
    cluster.apply(node("n1", cpu="8", mem="32Gi"))
    ctl = controllers()
    gated_gang(cluster, "train", 1, cpu="2")
    refused = wait_for(lambda: ctl.logged("cannot lift the scheduling gate"), timeout=60, what="the lift refused")
    assert "403" in str(refused[0]["errors"]) and gates_of(cluster, "team", "train-0") == [CAPACITY_GATE]
    assert ctl.logged("plan")  # everything else it does, the base RBAC allows
    ctl.assert_no_tracebacks()
