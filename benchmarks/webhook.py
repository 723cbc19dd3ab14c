"""`python -m benchmarks webhook`: admission latency per review over HTTPS on a large node-group catalog.

The target is p99 <= 20 ms per review on a 1,000-node catalog (docs/webhook.md); here the
catalog has `--groups` node groups (default 1,000, one node each at most), the
worst case for the rules, which look at every group once per kind of node
(`--distinct`: every group its own kind). Reviews are sent one at a
time on one kept-alive TLS connection, as the API server does, in a fixed mix:
a pod that fits, a pod that fits nothing, a Volcano gang with minResources, a
native PodGroup, a mutating review, a pod with a node selector (pods without one
are tested once per node shape, labels aside; a selector makes labels count). The pods' group is found by the
group lookup (an in-memory API answer: after the first read every review is a cache hit, as in
steady state), so they are judged as minCount pods like them.
"""

from __future__ import annotations

import http.client
import json
import ssl
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from gangscale.catalog import parse_catalog
from gangscale.controller.config import ControllerConfig
from gangscale.webhook.certs import make_pair, write_pair
from gangscale.webhook.lookup import GroupLookup
from gangscale.webhook.rules import Policy
from gangscale.webhook.server import start


def catalog(n: int, distinct: bool = False) -> list[dict[str, Any]]:
    """`n` groups of 14 node shapes in 3 zones; `distinct`: every group its own label (no two alike: worst case)."""
    out = []
    for i in range(n):
        cpu, gpu = 2 ** (i % 7 + 1), 8 if i % 5 == 0 else 0
        alloc = {
            "cpu": str(cpu),
            "memory": f"{cpu * 4}Gi",
            "pods": "110",
            **({"nvidia.com/gpu": str(gpu)} if gpu else {}),
        }
        out.append(
            {
                "name": f"g{i:04d}",
                "instanceType": "custom",
                "pricePerHour": 0.05 * cpu + 3 * gpu,
                "minSize": 0,
                "maxSize": 1,
                "currentSize": 0,
                "allocatable": alloc,
                "labels": {"zone": f"z{i % 3}", **({"id": str(i)} if distinct else {})},
                "taints": [],
            }
        )
    return out


def objects() -> list[tuple[str, dict[str, Any]]]:
    def pod(name: str, cpu: str, gpu: int = 0) -> dict[str, Any]:
        req = {"cpu": cpu, "memory": "1Gi", **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {
                "schedulingGroup": {"podGroupName": "pg"},
                "containers": [{"name": "c", "resources": {"requests": req}}],
            },
        }

    volcano = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "v", "namespace": "team"},
        "spec": {"minMember": 64, "minResources": {"cpu": "256", "nvidia.com/gpu": "64"}},
    }
    native = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "n", "namespace": "team"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 8}}},
    }
    zoned = pod(
        "zoned", "2", 1
    )  # a node selector: labels matter, so every labelled group is its own kind
    zoned["spec"]["nodeSelector"] = {"zone": "z1"}
    return [
        ("/validate", pod("fits", "2", 1)),
        ("/validate", pod("never", "1000")),
        ("/validate", volcano),
        ("/validate", native),
        ("/mutate", pod("gate", "2")),
        ("/validate", zoned),
    ]


def review_body(obj: dict[str, Any]) -> bytes:
    req = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
        "namespace": "team",
        "name": obj["metadata"]["name"],
        "operation": "CREATE",
        "object": obj,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}
    ).encode()


GROUP = {
    "apiVersion": "scheduling.k8s.io/v1alpha2",
    "kind": "PodGroup",
    "metadata": {"name": "pg", "namespace": "team"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 8}}},
}  # what the lookup reads for the pods' group


def run(groups: int = 1000, reviews: int = 2000, distinct: bool = False) -> dict[str, Any]:
    parsed, _ = parse_catalog(catalog(groups, distinct))
    cfg = ControllerConfig.model_validate(
        {"namespaceCaps": {"team": {"maxGPUs": 256, "maxNodes": 500}}}
    )
    with tempfile.TemporaryDirectory() as d:
        ca, cert, key = make_pair(["localhost"], ip="127.0.0.1")
        Path(d, "ca.crt").write_bytes(ca)
        write_pair(f"{d}/tls.crt", f"{d}/tls.key", cert, key)
        served = frozenset({"scheduling.k8s.io/v1alpha2"})
        server = start(
            Policy(cfg, tuple(parsed), served, GroupLookup(lambda path: GROUP, served)),
            f"{d}/tls.crt",
            f"{d}/tls.key",
        )
        conn = http.client.HTTPSConnection(
            "127.0.0.1",
            server.port,
            timeout=30,
            context=ssl.create_default_context(cafile=f"{d}/ca.crt"),
        )
        mix = objects()
        times: list[float] = []
        try:
            for i in range(reviews):
                path, obj = mix[i % len(mix)]
                body = review_body(obj)
                t0 = time.perf_counter()
                conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                times.append(time.perf_counter() - t0)
                assert resp.status == 200
        finally:
            conn.close()
            server.shutdown()
            server.server_close()
    ms = sorted(t * 1000 for t in times)
    return {
        "groups": groups,
        "distinct": distinct,
        "reviews": reviews,
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(ms[int(len(ms) * 0.99) - 1], 3),
        "max_ms": round(ms[-1], 3),
        "target_p99_ms": 20,
    }
