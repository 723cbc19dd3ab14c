"""A running webhook server on 127.0.0.1 with a self-signed pair made here, and a client sending real reviews."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gangscale.catalog import parse_catalog
from gangscale.controller.config import ControllerConfig
from gangscale.webhook.certs import make_pair, write_pair
from gangscale.webhook.rules import Policy
from gangscale.webhook.server import WebhookServer, start
from tests.builders import group

CATALOG = [
    group("cpu-small", cpu="4", mem="16Gi", price=0.2, max_size=10),
    group("gpu-a", cpu="32", mem="128Gi", gpu=8, price=10.0, max_size=4,
          taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]),
]
SERVED = ["scheduling.k8s.io/v1alpha2", "scheduling.volcano.sh/v1beta1", "scheduling.x-k8s.io/v1alpha1",
          "scheduling.k8s.io/v1alpha1"]


@pytest.fixture(scope="session")
def tls_pair(tmp_path_factory) -> tuple[str, str, str]:
    d = tmp_path_factory.mktemp("certs")
    ca, cert, key = make_pair(["localhost"], ip="127.0.0.1")
    (d / "ca.crt").write_bytes(ca)
    write_pair(str(d / "tls.crt"), str(d / "tls.key"), cert, key)
    return str(d / "ca.crt"), str(d / "tls.crt"), str(d / "tls.key")


def make_config(top: dict[str, Any] | None = None, **admission: Any) -> ControllerConfig:
    # enforce: in dry-run the mutating hook sets no gate (admission.gate_refusal); tests of that say so in `top`
    raw: dict[str, Any] = {"mode": "enforce", **(top or {}),
        "maxGangPods": 64,
        "namespaceCaps": {"capped": {"maxNodes": 2, "maxDollarsPerHour": 15, "maxGPUs": 8, "maxGangPods": 4}},
        "admission": {"servedGangAPIs": SERVED, **admission},
    }
    return ControllerConfig.model_validate(raw)


@dataclass
class Hook:
    server: WebhookServer
    ca: str

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
        ctx = ssl.create_default_context(cafile=self.ca)
        conn = http.client.HTTPSConnection("127.0.0.1", self.server.port, context=ctx, timeout=10)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"{}")
        finally:
            conn.close()

    def review(self, obj: dict, path: str = "/validate", operation: str = "CREATE", namespace: str | None = None,
               **request: Any) -> dict:
        """Send one admission.k8s.io/v1 AdmissionReview and return its response (uid checked)."""
        uid = str(uuid.uuid4())
        ns = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
        api = str(obj.get("apiVersion", "v1"))
        grp, _, ver = api.rpartition("/")
        req = {"uid": uid, "kind": {"group": grp, "version": ver, "kind": obj.get("kind")},
               "resource": {"group": grp, "version": ver, "resource": str(obj.get("kind", "")).lower() + "s"},
               "namespace": ns, "name": (obj.get("metadata") or {}).get("name", ""), "operation": operation,
               "userInfo": {"username": "tester"}, "object": obj, "oldObject": None, "dryRun": False,
               **request}
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}).encode()
        status, doc = self.post(path, body)
        assert status == 200, doc
        assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
        assert doc["response"]["uid"] == uid
        return doc["response"]


def patch_of(response: dict) -> list[dict] | None:
    if "patch" not in response:
        return None
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


@pytest.fixture
def hook_factory(tls_pair):
    ca, cert, key = tls_pair
    servers: list[WebhookServer] = []

    def make(catalog: list[dict] | None = None, top: dict[str, Any] | None = None, *, lookup: Any = None,
             **admission: Any) -> Hook:
        """A server whose config has `admission` keys (and `top`: other top-level keys); `lookup`: Policy.lookup."""
        groups, _ = parse_catalog(CATALOG if catalog is None else catalog)
        cfg = make_config(top, **admission)
        served = cfg.admission.served_gang_apis
        policy = Policy(cfg, tuple(groups), frozenset(served) if served is not None else None, lookup)
        server = start(policy, cert, key)
        servers.append(server)
        return Hook(server, ca)

    yield make
    for s in servers:
        s.shutdown()
        s.server_close()


@pytest.fixture
def hook(hook_factory) -> Hook:
    return hook_factory()


def write_file(path: Path, doc: Any) -> str:
    path.write_text(json.dumps(doc))
    return str(path)
