"""What the API server does with admission webhooks and Services, for the emulator (tests only).

Invariant: objects created over HTTP pass the registered webhooks as the API server passes them
(mutating first, each JSONPatch applied, then validating; `namespaceSelector` against the
namespace's labels plus `kubernetes.io/metadata.name`; `failurePolicy` on a call that fails), so
a test can show what a real cluster with gangscale's webhook installed stores. Webhooks are called
over HTTPS, verified with their `caBundle`, at a `url` or at a Service the test maps to a local
address (`Emulator.services`); the same map serves the API server's service proxy
(`/api/v1/namespaces/<ns>/services/https:<name>:<port>/proxy/<path>`), which `gangscale check` uses.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from typing import Any

PatchFn = Callable[[dict[str, Any], Any], dict[str, Any]]


class AdmissionDenied(Exception):
    """A webhook refused the object, or failed under failurePolicy Fail: (HTTP code, message)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels AND every matchExpression); an empty or absent one matches all."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _rule_matches(rule: Mapping[str, Any], group: str, version: str, plural: str, operation: str) -> bool:
    def has(field: str, value: str) -> bool:
        return any(v in ("*", value) for v in rule.get(field) or [])

    return (has("apiGroups", group) and has("apiVersions", version) and has("resources", plural)
            and has("operations", operation))


def _endpoint(hook: Mapping[str, Any], services: Mapping[tuple[str, str], str]) -> str | None:
    cc = hook.get("clientConfig") or {}
    if cc.get("url"):
        return str(cc["url"])
    svc = cc.get("service") or {}
    base = services.get((str(svc.get("namespace")), str(svc.get("name"))))
    return f"{base}{svc.get('path') or ''}" if base else None


def _call(hook: Mapping[str, Any], url: str, request: dict[str, Any]) -> dict[str, Any]:
    """POST one AdmissionReview; the response's `response`, or an OSError/ValueError."""
    bundle = (hook.get("clientConfig") or {}).get("caBundle")
    ctx = ssl.create_default_context(cadata=base64.b64decode(bundle).decode()) if bundle else \
        ssl.create_default_context()
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=float(hook.get("timeoutSeconds") or 10), context=ctx) as resp:  # noqa: S310
        doc = json.loads(resp.read())
    out = doc.get("response") if isinstance(doc, dict) else None
    if not isinstance(out, dict) or out.get("uid") != request["uid"]:
        raise ValueError("the webhook answered no response for this uid")
    return out


def admit(configs: Mapping[str, list[dict[str, Any]]], services: Mapping[tuple[str, str], str],
          ns_labels: Mapping[str, str] | None, gvr: tuple[str, str, str], kind: str, namespace: str,
          obj: dict[str, Any], apply_patch: PatchFn, warnings: list[str]) -> dict[str, Any]:
    """The object after every matching webhook (CREATE), or AdmissionDenied; warnings are appended."""
    group, version, plural = gvr
    labels = {**(ns_labels or {}), "kubernetes.io/metadata.name": namespace} if namespace else {}
    for phase in ("mutating", "validating"):
        for cfg in sorted(configs.get(phase, []), key=lambda c: str(c["metadata"]["name"])):
            for hook in cfg.get("webhooks") or []:
                if not any(_rule_matches(r, group, version, plural, "CREATE") for r in hook.get("rules") or []):
                    continue
                if namespace and not selector_matches(hook.get("namespaceSelector"), labels):
                    continue
                obj = _one(hook, services, phase, (group, version, kind, plural), namespace, obj, apply_patch, warnings)
    return obj


def _one(hook: Mapping[str, Any], services: Mapping[tuple[str, str], str], phase: str, gvkr: tuple[str, str, str, str],
         namespace: str, obj: dict[str, Any], apply_patch: PatchFn, warnings: list[str]) -> dict[str, Any]:
    group, version, kind, plural = gvkr
    name = str(hook.get("name"))
    request = {"uid": str(uuid.uuid4()), "kind": {"group": group, "version": version, "kind": kind},
               "resource": {"group": group, "version": version, "resource": plural}, "namespace": namespace,
               "name": (obj.get("metadata") or {}).get("name", ""), "operation": "CREATE",
               "userInfo": {"username": "emulator"}, "object": obj, "oldObject": None, "dryRun": False}
    url = _endpoint(hook, services)
    try:
        if url is None:
            raise OSError("no endpoints available for the service")
        resp = _call(hook, url, request)
    except (OSError, ValueError, urllib.error.URLError) as exc:
        if hook.get("failurePolicy", "Fail") == "Ignore":
            return obj
        raise AdmissionDenied(500, "InternalError", f'Internal error occurred: failed calling webhook "{name}": {exc}')
    warnings.extend(resp.get("warnings") or [])
    if not resp.get("allowed"):
        status = resp.get("status") or {}
        raise AdmissionDenied(int(status.get("code") or 403), str(status.get("reason") or "Forbidden"),
                              f'admission webhook "{name}" denied the request: {status.get("message", "")}')
    if phase == "mutating" and resp.get("patch"):
        obj = apply_patch(obj, json.loads(base64.b64decode(resp["patch"])))
    return obj


def proxy_get(services: Mapping[tuple[str, str], str], namespace: str, target: str, path: str) -> tuple[int, bytes]:
    """The API server's service proxy: GET `path` of Service `scheme:name:port` (certificate not verified)."""
    parts = target.split(":")
    name = parts[1] if len(parts) == 3 else parts[0]
    base = services.get((namespace, name))
    if base is None:
        return 503, json.dumps({"kind": "Status", "status": "Failure", "reason": "ServiceUnavailable", "code": 503,
                                "message": f'no endpoints available for service "{name}"'}).encode()
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"{base}/{path}", timeout=5, context=ctx) as resp:  # noqa: S310
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError as exc:
        return 503, json.dumps({"kind": "Status", "status": "Failure", "reason": "ServiceUnavailable", "code": 503,
                                "message": f"error trying to reach service: {exc}"}).encode()
