"""A small IAM policy evaluator, enough to test the intent of config/iam-policy.json.

It follows the documented evaluation logic for one identity policy: an explicit
Deny wins, else any Allow whose Action, Resource and every Condition match,
else the implicit deny. Supported: Action/NotAction and Resource/NotResource
with `*` and `?` wildcards (actions case-insensitive), and the condition
operators the policies use: StringEquals, StringNotEquals, StringEqualsIgnoreCase,
StringLike, StringNotLike, ArnEquals, ArnLike (ARNs compared as `*`/`?` globs, as
StringLike), Bool, Null, each optionally `ForAllValues:`/`ForAnyValue:`
prefixed or `IfExists` suffixed. `${NAME}` placeholders are substituted first;
one left over is an error, so a test cannot pass on an unfilled template.
It is not AWS: no SCPs, boundaries, sessions or resource policies.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

ALLOW, DENY = "Allow", "Deny"
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

Context = Mapping[str, "str | Sequence[str]"]


@dataclass(frozen=True)
class Request:
    """One authorization question: may `action` act on `resource`, given these condition keys?"""

    action: str
    resource: str
    context: Context = field(default_factory=dict)


def load_policy(path: str | Path, values: Mapping[str, str]) -> dict[str, Any]:
    """The policy with every `${NAME}` replaced by values[NAME]."""
    text = Path(path).read_text()

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"placeholder ${{{m.group(1)}}} has no value")
        return values[m.group(1)]

    return json.loads(_PLACEHOLDER.sub(sub, text))


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


def _matches_any(patterns: Any, value: str, *, ignore_case: bool) -> bool:
    return any(_glob(str(p), value, ignore_case=ignore_case) for p in _list(patterns))


def _string_test(op: str, policy_value: str, value: str) -> bool:
    if op == "StringEquals":
        return value == policy_value
    if op == "StringNotEquals":
        return value != policy_value
    if op == "StringEqualsIgnoreCase":
        return value.lower() == policy_value.lower()
    if op == "StringLike":
        return _glob(policy_value, value)
    if op == "StringNotLike":
        return not _glob(policy_value, value)
    if op in ("ArnEquals", "ArnLike"):  # IAM compares ARNs component-wise; with the policies' ARNs a glob is the same
        return _glob(policy_value, value)
    if op == "Bool":
        return value.lower() == policy_value.lower()
    raise ValueError(f"condition operator {op} is not supported by this simulator")


_NEGATED = ("StringNotEquals", "StringNotLike")


def _condition_key(op_full: str, key: str, wanted: Any, context: Context) -> bool:
    op, qualifier, if_exists = op_full, "", False
    if ":" in op:
        qualifier, op = op.split(":", 1)
        if qualifier not in ("ForAllValues", "ForAnyValue"):
            raise ValueError(f"set qualifier {qualifier} is not supported")
    if op.endswith("IfExists"):
        op, if_exists = op[: -len("IfExists")], True
    present = key in context and context[key] is not None
    if op == "Null":
        return all((str(w).lower() == "true") == (not present) for w in _list(wanted))
    if not present:
        return if_exists or qualifier == "ForAllValues"
    raw = context[key]
    values = [raw] if isinstance(raw, str) else [str(v) for v in raw]
    policy_values = [str(w) for w in _list(wanted)]
    if op in _NEGATED:  # negated operators: no policy value may match
        def one(v: str) -> bool:
            return all(_string_test(op, w, v) for w in policy_values)
    else:
        def one(v: str) -> bool:
            return any(_string_test(op, w, v) for w in policy_values)
    if qualifier == "ForAllValues":
        return all(one(v) for v in values)
    return any(one(v) for v in values)  # ForAnyValue, and a single-valued key


def _conditions_hold(conditions: Mapping[str, Mapping[str, Any]] | None, context: Context) -> bool:
    return all(_condition_key(op, key, wanted, context)
               for op, keys in (conditions or {}).items() for key, wanted in keys.items())


def _statement_applies(st: Mapping[str, Any], req: Request) -> bool:
    if "Action" in st:
        action_ok = _matches_any(st["Action"], req.action, ignore_case=True)
    else:
        action_ok = not _matches_any(st["NotAction"], req.action, ignore_case=True)
    if "Resource" in st:
        resource_ok = _matches_any(st["Resource"], req.resource, ignore_case=False)
    else:
        resource_ok = not _matches_any(st["NotResource"], req.resource, ignore_case=False)
    return action_ok and resource_ok and _conditions_hold(st.get("Condition"), req.context)


def evaluate(policy: Mapping[str, Any], req: Request) -> tuple[str, list[str]]:
    """(Allow or Deny, the Sids that decided it)."""
    statements = _list(policy["Statement"])
    applying = [st for st in statements if _statement_applies(st, req)]
    denies = [str(st.get("Sid", "?")) for st in applying if st["Effect"] == DENY]
    if denies:
        return DENY, denies
    allows = [str(st.get("Sid", "?")) for st in applying if st["Effect"] == ALLOW]
    return (ALLOW, allows) if allows else (DENY, [])


def allowed(policy: Mapping[str, Any], action: str, resource: str, context: Context | None = None) -> bool:
    return evaluate(policy, Request(action, resource, context or {}))[0] == ALLOW
