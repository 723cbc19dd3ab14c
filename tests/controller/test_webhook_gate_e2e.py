"""The admission webhook and gate mode together, as installed: issue 13's "a gated gang is released by gate mode".

The emulator calls the shipped webhook configurations (config/deploy/webhook/webhooks.yaml, the
Service mapped to a `gangscale webhook` server on 127.0.0.1) for every object created over HTTP, as
the API server does. Pods of a gang created in a namespace labelled only with the webhook's opt-in
label get the capacity gate from the mutating hook; `gangscale run` (gateMode opt-in, the default)
holds them until the nodes it bought are Ready, then lifts the gate.
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


def test_a_gang_the_webhook_gates_is_held_by_gate_mode_until_its_nodes_are_ready_then_released(
        cluster, world, controllers, webhook_cluster):
    client = webhook_cluster
    world.asg("cpu", "m5.2xlarge", max_size=10)
    cluster.apply({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "team", "labels": {"gangscale.io/capacity-gate": "enabled"}}})
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "plain"}})
    ctl = controllers()  # gateMode: opt-in (the default); the namespace has only the webhook's label
    create(client, podgroup("train", "team", min_count=2))
    for i in range(2):
        stored = create(client, pod(f"train-{i}", "team", cpu="6", mem="4Gi", group="train"))
        assert [g["name"] for g in stored["spec"]["schedulingGates"]] == [CAPACITY_GATE]  # the mutating hook's patch
    stored = create(client, pod("free-0", "plain", cpu="1", group="free"))
    assert not stored["spec"].get("schedulingGates")  # a namespace that did not opt in is not gated
    wait_for(lambda: world.desired("cpu") == 2, what="the gated gang planned and bought for")
    time.sleep(2.5)  # bought, not registered: gate mode holds the webhook's gate
    assert gates_of(cluster, "team", "train-0") == [CAPACITY_GATE] == gates_of(cluster, "team", "train-1")
    assert not ctl.logged("gate lifted", gang=f"team/train/{PG}")
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
