"""What the API server does with ValidatingAdmissionPolicies, for the emulator (tests only).

Invariant: a write passes every installed policy as the API server judges it (admissionregistration.k8s.io/v1,
kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating): a binding with `Deny` among its
`validationActions` applies its policy; the policy matches when a `matchConstraints.resourceRules` entry names the
request's group, version, resource and operation and every `matchConditions` expression is true; then every
`validations` expression must be true, else the request is refused with the validation's `message` (HTTP 422,
reason Invalid, the default `reason`). An expression that fails to evaluate counts under `failurePolicy` (Fail
unless it says Ignore). `variables` are evaluated when first referenced, as the API server does, so a variable that
cannot be evaluated only fails the expressions that use it. CEL is cel-python's (`celpy`); the expressions are
the policy's own text. Not covered: params, namespace/object selectors, audit and warn actions, messageExpression.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import celpy
from celpy import json_to_cel

from .emulator_admission import AdmissionDenied

_PROGRAMS: dict[str, Any] = {}  # compiled once per expression text (the CEL parser is built on first use)
_VARIABLE = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")


def _program(expression: str) -> Any:
    prg = _PROGRAMS.get(expression)
    if prg is None:
        env = _PROGRAMS.setdefault("", celpy.Environment())
        prg = _PROGRAMS[expression] = env.program(env.compile(expression))
    return prg


class _Variables:
    """The policy's `variables`, each evaluated once, when an expression first names it."""

    def __init__(self, specs: list[Mapping[str, Any]], activation: dict[str, Any]) -> None:
        self.exprs = {str(v["name"]): str(v["expression"]) for v in specs}
        self.activation = activation
        self.values: dict[str, Any] = {}

    def run(self, expression: str) -> Any:
        """The value of `expression`, with the variables it names bound; raises celpy.CELEvalError."""
        names = {n for n in _VARIABLE.findall(expression) if n in self.exprs}
        for name in names:
            if name not in self.values:
                try:
                    self.values[name] = self.run(self.exprs[name])
                except celpy.CELEvalError as exc:
                    self.values[name] = exc
        # a variable that failed is bound as its error: CEL's `&&`, `||` and `?:` absorb an error on the side they
        # do not need, as the API server's lazy variables are never evaluated on that side
        bound = {n: self.values[n] for n in names}
        activation = dict(self.activation)
        activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in bound.items()})
        result = _program(expression).evaluate(activation)
        if isinstance(result, celpy.CELEvalError):
            raise result
        return result


def _matches(policy: Mapping[str, Any], gvr: tuple[str, str, str], operation: str) -> bool:
    group, version, plural = gvr

    def has(rule: Mapping[str, Any], field: str, value: str) -> bool:
        return any(v in ("*", value) for v in rule.get(field) or [])

    rules = ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []
    return any(has(r, "apiGroups", group) and has(r, "apiVersions", version) and has(r, "resources", plural)
               and has(r, "operations", operation) for r in rules)


def request_attributes(gvr: tuple[str, str, str], kind: str, operation: str, namespace: str, name: str,
                       username: str) -> dict[str, Any]:
    """The `request` variable: an admission.k8s.io/v1 AdmissionRequest without the objects."""
    group, version, plural = gvr
    return {"kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": plural},
            "namespace": namespace, "name": name, "operation": operation, "userInfo": {"username": username}}


def check(policies: list[dict[str, Any]], bindings: list[dict[str, Any]], request: dict[str, Any],
          obj: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
    """Raise AdmissionDenied when an installed, bound policy refuses this request."""
    by_name = {str(p["metadata"]["name"]): p for p in policies}
    res = request["resource"]
    gvr = (str(res["group"]), str(res["version"]), str(res["resource"]))
    for binding in sorted(bindings, key=lambda b: str(b["metadata"]["name"])):
        spec = binding.get("spec") or {}
        policy = by_name.get(str(spec.get("policyName")))
        if policy is None or "Deny" not in (spec.get("validationActions") or []) \
                or not _matches(policy, gvr, str(request["operation"])):
            continue
        _judge(policy, str(binding["metadata"]["name"]), request, obj, old)


def _judge(policy: Mapping[str, Any], binding: str, request: dict[str, Any], obj: dict[str, Any] | None,
           old: dict[str, Any] | None) -> None:
    spec = policy.get("spec") or {}
    name = str(policy["metadata"]["name"])
    activation = {"request": json_to_cel(request), "object": json_to_cel(obj), "oldObject": json_to_cel(old)}
    variables = _Variables(list(spec.get("variables") or []), activation)
    fail = spec.get("failurePolicy", "Fail") != "Ignore"
    try:
        if not all(bool(variables.run(str(c["expression"]))) for c in spec.get("matchConditions") or []):
            return
    except celpy.CELEvalError as exc:
        if fail:
            raise AdmissionDenied(403, "Forbidden", f"policy '{name}' failed to evaluate a match condition: {exc}")
        return
    for v in spec.get("validations") or []:
        try:
            ok = bool(variables.run(str(v["expression"])))
        except celpy.CELEvalError as exc:
            if not fail:
                continue
            raise AdmissionDenied(422, "Invalid", f"ValidatingAdmissionPolicy '{name}' with binding '{binding}' "
                                  f"denied request: expression '{v['expression']}' resulted in error: {exc}") from None
        if not ok:
            raise AdmissionDenied(422, str(v.get("reason") or "Invalid"), f"ValidatingAdmissionPolicy '{name}' "
                                  f"with binding '{binding}' denied request: {v.get('message') or 'failed expression: ' + str(v['expression'])}")
