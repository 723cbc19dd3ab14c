"""What the API server's RBAC authorizer decides, for the emulator (tests only).

Invariant: a request by a user other than the emulator's admin is allowed when a rule of a Role or ClusterRole bound
to it allows it, as kubernetes plugin/pkg/auth/authorizer/rbac (rbac.go, `RuleAllows`) decides: ClusterRoleBindings
grant their ClusterRole everywhere, RoleBindings grant their Role or ClusterRole in their own namespace; a rule
matches when its apiGroups, resources (`pods`, `pods/status`, or `*`) and verbs name the request's, and its
resourceNames, when set, name the object (so they never match a list, watch or create). Subjects are ServiceAccounts
(`system:serviceaccount:<ns>:<name>`), Users, and the groups every such account is in (`system:authenticated`,
`system:serviceaccounts`, `system:serviceaccounts:<ns>`). Not covered: aggregation, non-resource URLs (always
allowed here, as system:discovery allows them), impersonation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

GROUP = "rbac.authorization.k8s.io"


def _groups(username: str) -> set[str]:
    out = {"system:authenticated"}
    if username.startswith("system:serviceaccount:"):
        out |= {"system:serviceaccounts", f"system:serviceaccounts:{username.split(':')[2]}"}
    return out


def _subject_matches(subject: Mapping[str, Any], username: str, binding_ns: str) -> bool:
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "ServiceAccount":
        return username == f"system:serviceaccount:{subject.get('namespace') or binding_ns}:{name}"
    if kind == "User":
        return username == name
    return kind == "Group" and name in _groups(username)


def _rule_allows(rule: Mapping[str, Any], verb: str, group: str, resource: str, name: str) -> bool:
    def has(field: str, value: str) -> bool:
        return any(v in ("*", value) for v in rule.get(field) or [])

    names = rule.get("resourceNames") or []
    return has("apiGroups", group) and has("resources", resource) and has("verbs", verb) \
        and (not names or (bool(name) and name in names))


def allowed(objects: Iterable[Mapping[str, Any]], username: str, verb: str, group: str, resource: str,
            namespace: str, name: str) -> bool:
    """May `username` `verb` the `resource` (with its subresource: "pods/status") named `name` in `namespace`?"""
    objs = list(objects)
    roles = {(o["kind"], str(o["metadata"].get("namespace") or ""), str(o["metadata"]["name"])): o for o in objs
             if o.get("kind") in ("Role", "ClusterRole")}
    for b in objs:
        if b.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        b_ns = str(b["metadata"].get("namespace") or "")
        if b["kind"] == "RoleBinding" and b_ns != namespace:
            continue
        if not any(_subject_matches(s, username, b_ns) for s in b.get("subjects") or []):
            continue
        ref = b.get("roleRef") or {}
        role = roles.get((ref.get("kind"), b_ns if ref.get("kind") == "Role" else "", str(ref.get("name"))))
        if role and any(_rule_allows(r, verb, group, resource, name) for r in role.get("rules") or []):
            return True
    return False
