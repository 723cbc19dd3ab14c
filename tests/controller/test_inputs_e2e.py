"""End to end: `gangscale run` reads Kueue Workloads and DRA claims live (issue 14's controller half)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from builders import pod, podgroup
from kube.conftest import load_fixture
from kube.emulator import Emulator

from .conftest import STATE_NS, events, state_records, wait_for

GPU_CLASS = "gpu.nvidia.com"
KUEUE_GANG = "research/job-train-3f2a1/kueue.x-k8s.io/v1beta1"


@pytest.fixture
def cluster() -> Iterator[Emulator]:
    """Overrides conftest's `cluster` (which `controllers` connects to): DRA v1 and Kueue served."""
    emu = Emulator(release="1.36", dra_versions=("v1",), kueue=True).start()
    for ns in (STATE_NS, "research", "ml"):
        emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield emu
    emu.stop()


def _catalog(tmp: Path) -> str:
    path = tmp / "nodegroups.yaml"
    path.write_text(yaml.safe_dump([
        {"name": "cpu", "instanceType": "m5.2xlarge", "maxSize": 10},
        {"name": "gpu-dra", "instanceType": "g5.12xlarge", "maxSize": 4, "devices": {GPU_CLASS: "auto"}},
    ]))
    return str(path)


def _dra_gang(emu: Emulator) -> None:
    """Two pods, each claiming 2 GPUs from a template: 4 devices, one g5.12xlarge (4 GPUs)."""
    emu.apply({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GPU_CLASS},
               "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GPU_CLASS}'"}}]}})
    emu.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
               "metadata": {"name": "two-gpus", "namespace": "ml"},
               "spec": {"spec": {"devices": {"requests": [
                   {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": 2}}]}}}})
    emu.apply(podgroup("dra-train", "ml", min_count=2))
    for i in range(2):
        emu.apply(pod(f"dra-train-{i}", "ml", cpu="4", mem="8Gi", group="dra-train",
                      resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]))


def _by_name(emu: Emulator) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in state_records(emu).values()}


@pytest.mark.slow
def test_an_unadmitted_kueue_workload_waits_for_admission_and_a_dra_gang_is_scaled_up(
        cluster, controllers, tmp_path):
    emu = cluster
    ctl = controllers(provider="simulated", nodegroups=_catalog(tmp_path))
    wait_for(lambda: ctl.logged("leading"), what="leadership")
    emu.apply_all(load_fixture("inputs/kueue-workload.yaml"))  # 4 pods' worth of CPU, not admitted
    _dra_gang(emu)
    wait_for(lambda: _by_name(emu).get("dra-train", {}).get("state") == "provisioning", timeout=30,
             what="the DRA gang provisioning")
    wait_for(lambda: ctl.logged("gang state", gang=KUEUE_GANG), what="the Kueue gang's state")
    time.sleep(2.5)  # more passes: the unadmitted workload stays unbought
    recs = _by_name(emu)
    assert recs["dra-train"]["requested"] == {"gpu-dra": 1}
    assert [line["to"] for line in ctl.logged("gang state", gang=KUEUE_GANG)] == ["waiting-for-admission"]
    assert "job-train-3f2a1" not in recs  # it holds nothing, so there is no record to keep
    bought = [line["plan"]["scaleUp"] for line in ctl.logged("plan") if line["plan"]["scaleUp"]]
    assert bought == [{"gpu-dra": 1}]  # once, for the DRA gang: no CPU node for the Kueue workload
    waiting = [e for e in events(emu, "NotTriggerScaleUp") if e["involvedObject"]["name"] == "job-train-3f2a1"]
    assert waiting and "not admitted" in waiting[0]["message"] and waiting[0]["type"] == "Normal"
    inputs = ctl.logged("gang APIs")[0]["inputs"]
    assert {"resourceclaimtemplates.v1.resource.k8s.io", "workloads.v1beta1.kueue.x-k8s.io"} <= set(inputs)
    ctl.assert_no_tracebacks()


def test_plan_unadmitted_buys_for_the_workload_kueue_has_not_admitted(cluster, controllers, tmp_path):
    emu = cluster
    ctl = controllers(provider="simulated", nodegroups=_catalog(tmp_path), planUnadmitted=True)
    emu.apply_all(load_fixture("inputs/kueue-workload.yaml"))
    rec = wait_for(lambda: _by_name(emu).get("job-train-3f2a1", {}).get("requested"), timeout=30,
                   what="capacity bought for the unadmitted workload")
    assert set(rec) == {"cpu"}
    ctl.assert_no_tracebacks()
