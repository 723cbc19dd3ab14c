"""AdmissionReview (admission.k8s.io/v1) bytes in -> (HTTP status, response document) out.

Never raises: a body that is not an AdmissionReview gets a 400 with one
sentence naming what is wrong; an object no rule foresaw is judged by the
`unreadable` rule (validating) or passed unchanged (mutating, whose
failurePolicy is Ignore anyway). The mutating patch is idempotent: a pod that
already carries the gate gets no patch. A gate is set only where a running
controller will lift it (`gate_refusal`): never with `gateMode: off`, in
`dry-run`, or in a system namespace, whatever the webhook configuration's
namespaceSelector lets through.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import orjson

from ..controller.config import AdmissionConfig, ControllerConfig
from ..parse import SYSTEM_NAMESPACES, ObjectError, _group_link
from .rules import GROUP_KINDS, RULE_UNREADABLE, Finding, Policy, review_group, review_pod

API_VERSION = "admission.k8s.io/v1"
MAX_WARNING_CHARS = 512  # the API server truncates longer warnings
# controller/gates.py's opt-in/opt-out key (not imported: it pulls in the scheduler model)
GATE_MODE_KEY = "gangscale.io/gate-mode"


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer (message: one sentence)."""


def parse_review(body: bytes) -> tuple[str, Mapping[str, Any]]:
    """(request uid, request) of an AdmissionReview body."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(review, Mapping):
        raise BadReview("body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(
            f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
            f"{str(review.get('apiVersion'))[:60]} {str(review.get('kind'))[:60]}"
        )
    request = review.get("request")
    if not isinstance(request, Mapping):
        raise BadReview("request is missing")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing")
    return uid, request


def response(
    uid: str,
    allowed: bool = True,
    *,
    message: str = "",
    warnings: list[str] | None = None,
    patch: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        out["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if warnings:
        out["warnings"] = [w[:MAX_WARNING_CHARS] for w in warnings]
    if patch:
        out["patchType"] = "JSONPatch"
        out["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": out}


def _object(request: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The object under review with the namespace and name the API server will give it filled in."""
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return None, ""
    ns = request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "default"
    obj = dict(obj)
    meta = dict(obj.get("metadata") or {}) if isinstance(obj.get("metadata"), Mapping) else {}
    meta["namespace"] = str(ns)
    if not meta.get("name"):  # generateName: the name comes after admission
        meta["name"] = str(request.get("name") or f"{meta.get('generateName') or ''}<generated>")
    obj["metadata"] = meta
    return obj, str(ns)


def findings_for(request: Mapping[str, Any], policy: Policy) -> list[Finding]:
    obj, ns = _object(request)
    if obj is None:
        return []  # DELETE, or no object: nothing to judge
    kind = obj.get("kind") or (request.get("kind") or {}).get("kind")
    try:
        if kind == "Pod":
            return review_pod(obj, ns, policy)
        if kind in GROUP_KINDS:
            return review_group(obj, ns, policy)
    except Exception as exc:  # noqa: BLE001 - a shape no rule foresaw: judged, never a crash
        return [
            Finding(
                RULE_UNREADABLE,
                f"{kind} {ns}/{obj['metadata']['name']} cannot be read "
                f"({type(exc).__name__}: {str(exc)[:200]})",
            )
        ]
    return []


def validate(request: Mapping[str, Any], uid: str, policy: Policy) -> dict[str, Any]:
    rules = policy.config.admission.rules
    deny, warn = [], []
    for f in findings_for(request, policy):
        action = getattr(rules, _attr(f.rule))
        if action == "deny":
            deny.append(f.message)
        elif action == "warn":
            warn.append(f.message)
    if deny:
        return response(uid, False, message="gangscale: " + "; ".join(deny), warnings=warn)
    return response(uid, warnings=warn)


def _attr(rule: str) -> str:
    """camelCase rule key -> the AdmissionRules attribute."""
    return "".join("_" + c.lower() if c.isupper() else c for c in rule)


# ---------------------------------------------------------------- mutating


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def gate_patch(pod: Mapping[str, Any], cfg: AdmissionConfig) -> list[dict[str, Any]] | None:
    """JSONPatch adding the capacity gate to a gang pod, or None (not a gang pod, gated already, or not ours)."""
    meta = _mapping(pod.get("metadata"))
    spec = pod.get("spec")
    if not isinstance(spec, Mapping) or spec.get("nodeName"):
        return None
    try:
        if _group_link(meta, spec) is None:
            return None
    except ObjectError:
        return None  # the validating hook names the field
    notes = _mapping(meta.get("annotations"))
    if str(notes.get(GATE_MODE_KEY, "")).strip().lower() == "false":
        return None  # the pod opts out of gate mode: the controller would lift the gate at once
    gates = spec.get("schedulingGates")
    names = (
        [g.get("name") for g in gates if isinstance(g, Mapping)] if isinstance(gates, list) else []
    )
    if cfg.gate in names:
        return None  # idempotent: reinvocation or a re-sent review adds nothing
    labels = _mapping(meta.get("labels"))
    foreign = [n for n in names if n not in cfg.gate_alongside]
    foreign += [k for k in cfg.foreign_gate_labels if k in labels and k not in cfg.gate_alongside]
    if foreign:
        return None  # another controller (Kueue) releases this pod: leave it alone
    if isinstance(gates, list):
        return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": cfg.gate}}]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": cfg.gate}]}]


def gate_refusal(cfg: ControllerConfig, namespace: str) -> str | None:
    """Why no pod of `namespace` gets the gate under `cfg`, or None when gang pods there may be gated.

    KEP-3521 (Pod Scheduling Readiness): a scheduling gate is set only at creation, and the pod is not scheduled
    until someone removes it. So the hook sets one only where the controller will lift it: not with gate mode
    off (the controller lifts every gate at once), nor in dry-run (it lifts none, and its lease stays fresh,
    so the webhook's fail-open never would either), nor in the system namespaces and gangscale's own."""
    if cfg.gate_mode == "off":
        return "gateMode is off"
    if cfg.mode == "dry-run":
        return "the controller runs in dry-run and lifts no gate"
    if namespace in SYSTEM_NAMESPACES or namespace == cfg.state_namespace:
        return f"{namespace} is a system namespace"
    return None


def mutate(request: Mapping[str, Any], uid: str, config: ControllerConfig) -> dict[str, Any]:
    obj = request.get("object")
    kind = (
        (request.get("kind") or {}).get("kind")
        if isinstance(request.get("kind"), Mapping)
        else None
    )
    if (
        request.get("operation") != "CREATE"
        or not isinstance(obj, Mapping)
        or (obj.get("kind") or kind) != "Pod"
    ):
        return response(uid)  # gates can only be added when the pod is created
    meta = _mapping(obj.get("metadata"))
    if gate_refusal(config, str(request.get("namespace") or meta.get("namespace") or "default")):
        return response(uid)
    try:
        patch = gate_patch(obj, config.admission)
    except Exception:  # noqa: BLE001 - an odd pod is admitted unchanged; the validating hook judges it
        patch = None
    return response(uid, patch=patch)


def handle(path: str, body: bytes, policy: Policy) -> tuple[int, dict[str, Any]]:
    """One POST: `/validate` or `/mutate`."""
    if path not in ("/validate", "/mutate"):
        return 404, {"error": f"no webhook at {path[:100]}; use /validate or /mutate"}
    try:
        uid, request = parse_review(body)
    except BadReview as exc:
        return 400, {"error": str(exc)}
    if path == "/mutate":
        return 200, mutate(request, uid, policy.config)
    return 200, validate(request, uid, policy)
