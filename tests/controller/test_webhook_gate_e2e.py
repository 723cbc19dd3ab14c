"""The admission webhook and gate mode together, as installed: a gated gang is released by gate mode.

The emulator calls the shipped webhook configurations (config/deploy/webhook/webhooks.yaml, the
Service mapped to a `gangscale webhook` server on 127.0.0.1) for every object created over HTTP, as
the API server does. With the shipped defaults (`gateMode: opt-out`), pods of a gang created in any
namespace but the system ones and those labelled `gangscale.io/gate-mode=false` get the capacity gate
from the mutating hook; `gangscale run` holds them until the nodes it bought are Ready, then lifts
the gate. Pods outside gangs are never gated.
"""

from __future__ import annotations

import base64
import copy
import time
from pathlib import Path

import pytest
import yaml

from builders import pod, podgroup
from gangscale.ingest import CAPACITY_GATE
from tests.kube.conftest import client_for, kubeconfig_for  # noqa: F401 - fixtures
from tests.webhook.conftest import hook_factory, tls_pair  # noqa: F401 - fixtures

from .conftest import wait_for
from .test_gate_mode import PG, gates_of, register

ROOT = Path(__file__).resolve().parents[2]
WEBHOOKS = [d for d in yaml.safe_load_all((ROOT / "config/deploy/webhook/webhooks.yaml").read_text()) if d]


def install_webhook(emu, hook, ca_pem: bytes) -> None:
    """The shipped configurations with caBundle set (cert-manager's cainjector), the Service reaching `hook`."""
    for doc in copy.deepcopy(WEBHOOKS):
        for h in doc["webhooks"]:
            h["clientConfig"]["caBundle"] = base64.b64encode(ca_pem).decode()
        emu.apply(doc)
    svc = WEBHOOKS[0]["webhooks"][0]["clientConfig"]["service"]
    emu.services[(svc["namespace"], svc["name"])] = f"https://127.0.0.1:{hook.server.port}"


def create(client, obj: dict) -> dict:
    ns = obj["metadata"]["namespace"]
    api = obj["apiVersion"]
    base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
    return client.post(f"{base}/namespaces/{ns}/{obj['kind'].lower()}s", obj)


@pytest.fixture
def webhook_cluster(cluster, hook_factory, tls_pair, client_for):  # noqa: F811
    hook = hook_factory(catalog=[])  # no catalog: capacity rules silent, the other rules on
    install_webhook(cluster, hook, Path(tls_pair[0]).read_bytes())
    return client_for(cluster)


def namespace(emu, name: str, **labels: str) -> None:
    """A Namespace with the label the control plane sets on every one (kubernetes.io/metadata.name, its name:
    https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-metadata-name) and `labels`."""
    emu.apply({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}})


def gate_names(stored: dict) -> list[str]:
    return [g["name"] for g in stored["spec"].get("schedulingGates") or []]


def test_by_default_a_gang_is_gated_in_any_namespace_held_until_its_nodes_are_ready_then_released(
        cluster, world, controllers, webhook_cluster):
    client = webhook_cluster
    world.asg("cpu", "m5.2xlarge", max_size=10)
    namespace(cluster, "team")  # no label: the default gates it
    namespace(cluster, "out", **{"gangscale.io/gate-mode": "false"})  # opts out
    namespace(cluster, "kube-public")
    ctl = controllers()  # the shipped defaults: gateMode opt-out
    create(client, podgroup("train", "team", min_count=2))
    for i in range(2):
        stored = create(client, pod(f"train-{i}", "team", cpu="6", mem="4Gi", group="train"))
        assert gate_names(stored) == [CAPACITY_GATE]  # the mutating hook's patch
    assert gate_names(create(client, pod("basic", "team", cpu="1"))) == []  # no gang: never gated
    assert gate_names(create(client, pod("free-0", "out", cpu="1", group="free"))) == []  # the namespace opted out
    assert gate_names(create(client, pod("sys-0", "kube-public", cpu="1", group="sys"))) == []  # a system namespace
    wait_for(lambda: world.desired("cpu") >= 2, what="the gated gang planned and bought for")
    time.sleep(2.5)  # bought, not registered: gate mode holds the webhook's gate
    assert gates_of(cluster, "team", "train-0") == [CAPACITY_GATE] == gates_of(cluster, "team", "train-1")
    assert not ctl.logged("gate lifted", gang=f"team/train/{PG}")
    register(cluster, world, "cpu", ready=True)
    wait_for(lambda: not gates_of(cluster, "team", "train-0") and not gates_of(cluster, "team", "train-1"),
             what="the gates lifted")
    assert ctl.logged("gate lifted", gang=f"team/train/{PG}", why="capacity-ready")
    ctl.assert_no_tracebacks()


def test_under_opt_in_only_a_namespace_with_the_webhooks_label_is_gated_and_held(cluster, world, controllers,
                                                                                 webhook_cluster):
    """gateMode opt-in (public API, as documented): the chart renders the hook's selector with the opt-in label
    (tests/webhook/test_manifests.py), here applied as such; the controller holds the labelled namespace's gang."""
    client = webhook_cluster
    doc = cluster.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "gangscale")
    doc["webhooks"][0]["namespaceSelector"]["matchLabels"] = {"gangscale.io/capacity-gate": "enabled"}
    cluster.apply(doc)
    world.asg("cpu", "m5.2xlarge", max_size=10)
    namespace(cluster, "team", **{"gangscale.io/capacity-gate": "enabled"})
    namespace(cluster, "plain")
    ctl = controllers(gateMode="opt-in")
    create(client, podgroup("train", "team", min_count=2))
    for i in range(2):
        assert gate_names(create(client, pod(f"train-{i}", "team", cpu="6", mem="4Gi", group="train"))) == [
            CAPACITY_GATE]
    assert gate_names(create(client, pod("free-0", "plain", cpu="1", group="free"))) == []  # did not opt in
    wait_for(lambda: world.desired("cpu") >= 2, what="the gated gang planned and bought for")
    register(cluster, world, "cpu", ready=True)
    wait_for(lambda: not gates_of(cluster, "team", "train-0") and not gates_of(cluster, "team", "train-1"),
             what="the gates lifted")
    assert ctl.logged("gate lifted", gang=f"team/train/{PG}", why="capacity-ready")
    ctl.assert_no_tracebacks()


def test_through_the_api_server_the_validating_hook_refuses_a_group_that_can_never_run(cluster, webhook_cluster):
    client = webhook_cluster
    from gangscale.kube.errors import KubeError

    with pytest.raises(KubeError) as err:
        create(client, podgroup("zero", "default", min_count=0))
    assert "denied the request" in str(err.value) and "minCount is 0" in str(err.value)
    assert cluster.get(PG, "PodGroup", "default", "zero") is None
    assert create(client, podgroup("fine", "default", min_count=2))["metadata"]["name"] == "fine"


def test_a_dry_run_install_creates_no_gate_so_no_pod_waits_for_a_lift_nobody_makes(
        cluster, world, controllers, hook_factory, tls_pair, client_for):  # noqa: F811
    """In dry-run the controller lifts nothing and keeps its lease fresh, so the fail-open would not lift either:
    the webhook, reading the same config, gates nothing, and the gang's pods go to the scheduler at once."""
    hook = hook_factory(catalog=[], top={"mode": "dry-run"})
    install_webhook(cluster, hook, Path(tls_pair[0]).read_bytes())
    client = client_for(cluster)
    world.asg("cpu", "m5.2xlarge", max_size=10)
    namespace(cluster, "team")
    ctl = controllers(mode="dry-run")
    create(client, podgroup("train", "team", min_count=2))
    for i in range(2):
        assert gate_names(create(client, pod(f"train-{i}", "team", cpu="6", mem="4Gi", group="train"))) == []
    wait_for(lambda: ctl.logged("gang state", gang=f"team/train/{PG}"), what="the gang planned", timeout=60)
    assert world.desired("cpu") == 0  # dry-run buys nothing
    ctl.assert_no_tracebacks()
