"""A small, stateful Kubernetes API server for tests, on 127.0.0.1 only.

Why not kmock: its KubernetesEmulator (0.8) keeps objects but answers lists
with `resourceVersion: "..."`, ignores `limit`/`continue`, has no bookmarks, no
410 Gone, no dry-run and no version-dependent discovery, which are exactly
what the live layer must survive. This one is a few hundred lines of
`http.server`, deterministic, and lets tests inject faults.

What it serves, per simulated release (1.35, 1.36, 1.37):
- /version, /api, /api/v1, /apis, /apis/<group>/<version> discovery documents;
- list with `limit`/`continue` from a frozen snapshot (410 once compacted);
- watch as chunked JSON lines from any resourceVersion, BOOKMARK events with
  `allowWatchBookmarks`, 410 (as an ERROR event, or HTTP 410) for versions
  older than the last compaction, `timeoutSeconds`;
- the `status` subresource (writes change only `status`), and server-side apply of
  `status.conditions` there (`_apply_status`: list-map by type for built-ins, atomic for CRDs,
  conflicts and `force`, Apply ownership in managedFields);
- create / update (409 on a stale resourceVersion) / merge-patch / JSON patch (RFC 6902) / delete,
  a pod's schedulingGates only ever removed and its required node affinity only narrowed while it is
  gated, never changed once ungated (KEP-3521), a DELETE's preconditions (uid, resourceVersion),
  and server-side dry-run create (`dryRun=All`) that drops the pod's
  `spec.schedulingGroup` / `spec.workloadRef` when GenericWorkload is off or
  the release does not know the field;
- admission webhooks on create (`emulator_admission.py`: mutating JSONPatches, then validating
  denials, `namespaceSelector`, `failurePolicy`); ValidatingAdmissionPolicies and their bindings on
  update, patch and delete (`emulator_policy.py`: CEL by cel-python, the user from `users`), and the service proxy `GET .../services/<svc>/proxy/...`,
  both reaching Services the test maps in `services`;
- SelfSubjectAccessReview answered from a deny list;
- bearer-token auth (401 otherwise): `token` is the admin, `users` maps more tokens to user names;
  with `rbac` on, those users' requests are authorized by the applied RBAC objects (`emulator_rbac.py`);
- the API server's size limits: a ConfigMap's or Secret's data over 1 MiB is 422 Invalid, an object over
  etcd's request limit a 500, a request body over 3 MiB a 413 (`MAX_DATA_BYTES` and below).

Faults: `drop_watches()` cuts every open watch mid-event, `compact()`
expires all older resourceVersions, `fail_next()` answers the next requests
with an error status, `endless_continue = True` makes every list page carry a
`continue` token (the last one loops back to the first page).
"""

from __future__ import annotations

import base64
import bisect
import copy
import datetime as dt
import itertools
import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from .emulator_admission import AdmissionDenied, admit, proxy_get
from .emulator_policy import check as check_policies
from .emulator_policy import request_attributes
from .emulator_rbac import allowed as rbac_allows

SCHED = "scheduling.k8s.io"
COSCHED = "scheduling.x-k8s.io"
VOLCANO = "scheduling.volcano.sh"


@dataclass(frozen=True)
class Kind:
    group: str
    plural: str
    kind: str
    namespaced: bool = True
    builtin: bool = True  # built-in list items carry no apiVersion/kind, CRD items do

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"


CORE = [
    Kind("", "pods", "Pod"),
    Kind("", "nodes", "Node", namespaced=False),
    Kind("", "namespaces", "Namespace", namespaced=False),
    Kind("", "configmaps", "ConfigMap"),
    Kind("", "secrets", "Secret"),
    Kind("", "events", "Event"),
]
APPS = [Kind("apps", "deployments", "Deployment"), Kind("apps", "daemonsets", "DaemonSet")]
LEASES = Kind("coordination.k8s.io", "leases", "Lease")
NATIVE = {
    "workloads": Kind(SCHED, "workloads", "Workload"),
    "podgroups": Kind(SCHED, "podgroups", "PodGroup"),
    "priorityclasses": Kind(SCHED, "priorityclasses", "PriorityClass", namespaced=False),
}
COSCHED_PG = Kind(COSCHED, "podgroups", "PodGroup", builtin=False)
VOLCANO_PG = Kind(VOLCANO, "podgroups", "PodGroup", builtin=False)
VOLCANO_QUEUE = Kind(VOLCANO, "queues", "Queue", namespaced=False, builtin=False)
DRA = "resource.k8s.io"
DRA_KINDS = [Kind(DRA, "resourceclaims", "ResourceClaim"), Kind(DRA, "resourceclaimtemplates", "ResourceClaimTemplate"),
             Kind(DRA, "deviceclasses", "DeviceClass", namespaced=False),
             Kind(DRA, "resourceslices", "ResourceSlice", namespaced=False)]
KUEUE_WL = Kind("kueue.x-k8s.io", "workloads", "Workload", builtin=False)
ADMISSION = [Kind("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
                  namespaced=False),
             Kind("admissionregistration.k8s.io", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
                  namespaced=False),
             Kind("admissionregistration.k8s.io", "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
                  namespaced=False),
             Kind("admissionregistration.k8s.io", "validatingadmissionpolicybindings",
                  "ValidatingAdmissionPolicyBinding", namespaced=False)]

# RBAC objects: stored (apply) for `Emulator.rbac`, not served over HTTP
RBAC = [Kind("rbac.authorization.k8s.io", "roles", "Role"),
        Kind("rbac.authorization.k8s.io", "clusterroles", "ClusterRole", namespaced=False),
        Kind("rbac.authorization.k8s.io", "rolebindings", "RoleBinding"),
        Kind("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding", namespaced=False)]

# What each release can serve in scheduling.k8s.io (when enabled), and the pod field it knows.
RELEASE_NATIVE = {
    "1.35": {"v1alpha1": ["workloads"]},
    "1.36": {"v1alpha2": ["workloads", "podgroups"]},
    "1.37": {"v1beta1": ["workloads", "podgroups"], "v1alpha3": ["workloads", "podgroups"]},
}
RELEASE_DEFAULT_ON = {"1.35": ("v1alpha1",), "1.36": ("v1alpha2",), "1.37": ("v1beta1",)}
RELEASE_POD_FIELD = {"1.35": "workloadRef", "1.36": "schedulingGroup", "1.37": "schedulingGroup"}
LINK_FIELDS = ("workloadRef", "schedulingGroup")
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
ADMIN = "kubernetes-admin"  # the user `Emulator.token` authenticates

# The API server's size limits on what a write may carry and store.
# k8s.io/kubernetes pkg/apis/core/validation/validation.go `ValidateConfigMap` / `ValidateSecret`: the values of
# `data` (+ `binaryData`; a Secret's decoded bytes) over `core.MaxSecretSize` (pkg/apis/core/types.go, 1 MiB) are
# one `field.TooLong` error (apimachinery util/validation/field/errors.go: "Too long: may not be more than N
# bytes"), on the path "[]" (`field.NewPath("")`) for a ConfigMap and "data" for a Secret: 422 Invalid.
MAX_DATA_BYTES = 1024 * 1024
# etcd refuses a put over `--max-request-bytes` (1.5 MiB by default, etcd's docs "System limits"); the API server
# passes that on as a 500 "etcdserver: request is too large" (kubernetes/kubernetes#112152). etcd stores the
# object's protobuf, smaller than its JSON: measuring the JSON is the stricter side.
MAX_STORED_BYTES = 1536 * 1024
# k8s.io/apiserver pkg/server/config.go `MaxRequestBodyBytes` (3 MiB, twice etcd's limit: JSON is converted to the
# smaller protobuf); endpoints/handlers/rest.go `limitedReadBody` answers a larger body 413 RequestEntityTooLarge.
MAX_BODY_BYTES = 3 * 1024 * 1024


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


class _Dropped(Exception):
    """A fault: cut this watch connection without ending the chunked body."""


@dataclass
class _Event:
    rv: int
    key: str  # Kind.key
    type: str
    obj: dict[str, Any]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]


@dataclass
class _Route:
    kind: Kind
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None = None  # "status"


def _data_bytes(kind: Kind, obj: dict[str, Any]) -> int:
    """The bytes `ValidateConfigMap` / `ValidateSecret` count: the values, not the keys (a Secret's decoded)."""
    if kind.kind == "ConfigMap":
        return sum(len(str(v).encode()) for part in ("data", "binaryData") for v in (obj.get(part) or {}).values())
    total = sum(len(str(v).encode()) for v in (obj.get("stringData") or {}).values())
    for v in (obj.get("data") or {}).values():
        try:
            total += len(base64.b64decode(str(v), validate=True))
        except ValueError:
            total += len(str(v))
    return total


def _check_size(kind: Kind, obj: dict[str, Any]) -> None:
    """A write the real API server refuses for its size (see MAX_DATA_BYTES and MAX_STORED_BYTES)."""
    name = (obj.get("metadata") or {}).get("name", "")
    if kind.kind in ("ConfigMap", "Secret") and _data_bytes(kind, obj) > MAX_DATA_BYTES:
        where = "[]" if kind.kind == "ConfigMap" else "data"
        raise ApiError(422, "Invalid", f'{kind.kind} "{name}" is invalid: {where}: Too long: may not be more than '
                       f"{MAX_DATA_BYTES} bytes")
    if len(json.dumps(obj, separators=(",", ":"))) > MAX_STORED_BYTES:
        raise ApiError(500, "InternalError", "etcdserver: request is too large")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pointer(doc: Any, path: str) -> tuple[Any, str | int]:
    """The parent container and last key of an RFC 6901 pointer (422 when a step is missing)."""
    steps = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    if not steps:
        raise ApiError(422, "Invalid", "the root cannot be patched")
    cur = doc
    for step in steps[:-1]:
        try:
            cur = cur[int(step)] if isinstance(cur, list) else cur[step]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(422, "Invalid", f"the server rejected our request: path {path} does not exist") from None
    last = steps[-1]
    if isinstance(cur, list):
        if last == "-":
            return cur, len(cur)
        try:
            return cur, int(last)
        except ValueError:
            raise ApiError(422, "Invalid", f"path {path}: {last!r} is not a list index") from None
    if not isinstance(cur, dict):
        raise ApiError(422, "Invalid", f"path {path} does not exist")
    return cur, last


def _json_patch(target: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902 add / remove / replace / test, all or nothing (as the API server applies it)."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise ApiError(400, "BadRequest", f"malformed JSON patch operation: {op!r}")
        parent, key = _pointer(doc, op["path"])
        kind = op.get("op")
        missing = (key not in parent) if isinstance(parent, dict) else not (0 <= key < len(parent))  # type: ignore[operator]
        if kind == "add":
            if isinstance(parent, list):
                parent.insert(key, copy.deepcopy(op.get("value")))  # type: ignore[arg-type]
            else:
                parent[key] = copy.deepcopy(op.get("value"))
        elif kind in ("remove", "replace", "test"):
            if missing:
                raise ApiError(422, "Invalid", f"the server rejected our request: path {op['path']} does not exist")
            if kind == "remove":
                del parent[key]
            elif kind == "replace":
                parent[key] = copy.deepcopy(op.get("value"))
            elif parent[key] != op.get("value"):
                raise ApiError(422, "Invalid", f"the server rejected our request: test failed at {op['path']}")
        else:
            raise ApiError(400, "BadRequest", f"unsupported JSON patch operation {kind!r}")
    return doc


def _check_gates_only_removed(old: dict[str, Any], new: dict[str, Any]) -> None:
    """KEP-3521: after creation a pod's scheduling gates can only be removed, never added."""
    before = {g.get("name") for g in (old.get("spec") or {}).get("schedulingGates") or [] if isinstance(g, dict)}
    for g in (new.get("spec") or {}).get("schedulingGates") or []:
        name = g.get("name") if isinstance(g, dict) else None
        if name not in before:
            raise ApiError(422, "Invalid", f"Pod \"{old['metadata']['name']}\" is invalid: spec.schedulingGates: "
                           f"Forbidden: only deletion is allowed, but found new scheduling gate '{name}'")


def _required_terms(spec: Any) -> list[Any] | None:
    """spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms (None: unset)."""
    node = ((spec or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    return None if required is None else list(required.get("nodeSelectorTerms") or [])


def _check_node_affinity_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """KEP-3521 mutable scheduling directives, as kubernetes pkg/apis/core/validation ValidatePodUpdate judges them
    against the stored pod: while it has scheduling gates, required node affinity may be set when absent, else only
    narrowed (validateNodeAffinityMutation: the same number of terms, each keeping its matchExpressions and
    matchFields as a prefix, an empty term gaining none) and nodeSelector keys only added; without gates neither
    may change at all (the spec is immutable)."""
    name = old["metadata"]["name"]
    ospec, nspec = old.get("spec") or {}, new.get("spec") or {}
    before, after = _required_terms(ospec), _required_terms(nspec)
    if not ospec.get("schedulingGates"):
        if before != after or (ospec.get("nodeSelector") or {}) != (nspec.get("nodeSelector") or {}):
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change '
                           "fields other than `spec.containers[*].image`, ... (node affinity of an ungated pod)")
        return
    for k, v in (ospec.get("nodeSelector") or {}).items():
        if (nspec.get("nodeSelector") or {}).get(k) != v:
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.nodeSelector: Invalid value: only '
                           "additions to spec.nodeSelector are allowed (no mutations or deletions)")
    if not before:
        return
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    if len(before) != len(after or []):
        raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: {path}: Invalid value: no additions/deletions to '
                       "non-empty NodeSelectorTerms list are allowed")
    for i, (o, n) in enumerate(zip(before, after or [])):
        grown = not (o.get("matchExpressions") or o.get("matchFields")) and bool(
            n.get("matchExpressions") or n.get("matchFields"))
        kept = all((n.get(f) or [])[:len(o.get(f) or [])] == (o.get(f) or []) for f in ("matchExpressions", "matchFields"))
        if grown or not kept:
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: {path}[{i}]: Invalid value: only additions are '
                           "allowed (no mutations or deletions)")


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def _condition_key(ctype: str) -> str:
    return "k:" + json.dumps({"type": ctype}, separators=(",", ":"))


def _condition_owners(obj: dict[str, Any]) -> dict[str, str]:
    """Who applied which `status.conditions` entry ("*": the whole atomic list), from managedFields."""
    owners: dict[str, str] = {}
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        fields = ((entry.get("fieldsV1") or {}).get("f:status") or {}).get("f:conditions")
        if fields is None or entry.get("operation") != "Apply":
            continue
        if not fields:
            owners["*"] = entry["manager"]
        for k in fields:
            owners[json.loads(k[2:])["type"]] = entry["manager"]
    return owners


def _conflict(manager: str, what: str) -> ApiError:
    return ApiError(409, "Conflict", f'Apply failed with 1 conflict: conflict with "{manager}" with subresource '
                    f'"status": {what}')


def _apply_status(kind: Kind, current: dict[str, Any], body: dict[str, Any], query: dict[str, str],
                  version: str) -> dict[str, Any]:
    """Server-side apply of `status.conditions` (only what this emulator needs, honestly).

    Built-in kinds: conditions is a list-map keyed by `type` (`+listType=map`): the applier's
    entries are merged by type, entries it applied before and omits now are removed, other
    managers' entries are kept; applying a type another manager applied is a 409 unless
    `force=true`. CRD kinds (no list-type marker): the list is atomic, so the applier replaces
    and owns the whole list. Ownership is recorded in `metadata.managedFields` (Apply entries only).
    """
    manager = query.get("fieldManager")
    if not manager:
        raise ApiError(400, "BadRequest", "PATCH: fieldManager is required for apply requests")
    force = query.get("force") == "true"
    applied = body.get("status") if isinstance(body.get("status"), dict) else {}
    out = copy.deepcopy(current)
    status = out.get("status") if isinstance(out.get("status"), dict) else {}
    owners = _condition_owners(out)
    new = [c for c in applied.get("conditions") or [] if isinstance(c, dict)]
    if kind.builtin:
        mine = [c.get("type") for c in new]
        for t in mine:
            if owners.get(t, manager) != manager and not force:
                raise _conflict(owners[t], f'.status.conditions[type="{t}"]')
        dropped = {t for t, m in owners.items() if m == manager} - set(mine)
        by_type = {c.get("type"): c for c in new}
        merged = [by_type.pop(c.get("type"), c) for c in status.get("conditions") or []
                  if isinstance(c, dict) and c.get("type") not in dropped]
        status["conditions"] = merged + list(by_type.values())
        fields = {_condition_key(t): {".": {}, **{f"f:{k}": {} for k in by_t}} for t, by_t in
                  ((c.get("type"), c) for c in new)}
    else:
        if owners.get("*", manager) != manager and not force:
            raise _conflict(owners["*"], ".status.conditions")
        status["conditions"] = new
        fields = {}
    status.update({k: v for k, v in applied.items() if k != "conditions"})
    out["status"] = status
    managed = [e for e in (out["metadata"].get("managedFields") or [])
               if not (e.get("manager") == manager and e.get("operation") == "Apply")]
    if not kind.builtin or force:  # forced or atomic: the others lose what this applier now owns
        taken = set(fields) if kind.builtin else {"*"}
        for e in managed:
            conds = ((e.get("fieldsV1") or {}).get("f:status") or {}).get("f:conditions")
            if conds is not None and e.get("operation") == "Apply":
                if "*" in taken or not conds:
                    e["fieldsV1"]["f:status"].pop("f:conditions")
                for k in taken & set(conds):
                    conds.pop(k)
    managed.append({"manager": manager, "operation": "Apply", "subresource": "status",
                    "apiVersion": f"{kind.group}/{version}" if kind.group else version, "time": _now(),
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": fields}}})
    out["metadata"]["managedFields"] = managed
    return out


@dataclass
class Emulator:
    """State and behaviour; `start()` serves it over HTTP on 127.0.0.1."""

    release: str = "1.36"
    native_versions: tuple[str, ...] | None = None  # None: the release's default on-versions; (): API off
    generic_workload: bool | None = None  # the gate; None: on iff a native version is served
    coscheduling: bool = False
    volcano: bool = False
    dra_versions: tuple[str, ...] = ()  # resource.k8s.io versions served, e.g. ("v1",) or ("v1beta1",)
    kueue: bool = False  # Kueue's Workload CRD (kueue.x-k8s.io/v1beta1)
    token: str = "test-token"
    # more bearer tokens, each the user it authenticates (`request.userInfo.username` for admission policies);
    # `token` authenticates ADMIN
    users: dict[str, str] = field(default_factory=dict)
    rbac: bool = False  # True: requests of `users` are authorized by the applied Roles and bindings (emulator_rbac.py)
    bookmark_interval: float = 0.2
    gone_as_http: bool = False  # 410 for a too-old watch as HTTP status instead of an ERROR event
    denied: set[tuple[str, str, str]] = field(default_factory=set)  # (verb, group, resource) denied to SSAR
    forbidden: set[tuple[str, str]] = field(default_factory=set)  # (group, resource) whose list and watch get 403
    requests: list[Request] = field(default_factory=list)
    # called with (method, path) after each successful write, before it is answered (outside the lock): a test's
    # stand-in for another client acting in between two of the controller's calls
    after_write: Callable[[str, str], None] | None = None
    # Service (namespace, name) -> "https://127.0.0.1:<port>": where webhooks and the service proxy reach it
    services: dict[tuple[str, str], str] = field(default_factory=dict)
    admission_warnings: list[str] = field(default_factory=list)  # what webhooks answered as `warnings`

    def __post_init__(self) -> None:
        if self.release not in RELEASE_NATIVE:
            raise ValueError(f"unknown release {self.release}")
        if self.native_versions is None:
            self.native_versions = RELEASE_DEFAULT_ON[self.release]
        if self.generic_workload is None:
            self.generic_workload = bool(self.native_versions)
        self._cond = threading.Condition()
        self._rv = 100
        self._compacted = 0
        self._log: list[_Event] = []
        self._store: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._pages: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self._page_ids = itertools.count(1)
        self._drop_gen = 0
        self._failures: list[tuple[int, str]] = []
        self._closing = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.open_watches = 0
        self.expire_continue_after = 0  # fault: compact right before serving the N-th continue page
        self.endless_continue = False  # fault: every list page carries a continue token (back to the start)
        self._continues = 0
        for ns in ("default", "kube-system"):
            self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ------------------------------------------------------------- serving

    def start(self) -> Emulator:
        emu = self

        class Handler(_Handler):
            emulator = emu

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, path: str, *, token: str | None = None) -> str:
        """Write a kubeconfig for this server (context `emulator`) and return its path."""
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": token or self.token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester"}}],
        }
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        return path

    # ---------------------------------------------------------- discovery

    def served(self) -> dict[str, dict[str, list[Kind]]]:
        """group -> version -> kinds, as this simulated server has them enabled."""
        groups: dict[str, dict[str, list[Kind]]] = {"apps": {"v1": APPS}, LEASES.group: {"v1": [LEASES]},
                                                    ADMISSION[0].group: {"v1": ADMISSION}}
        native: dict[str, list[Kind]] = {"v1": [NATIVE["priorityclasses"]]}
        for v in self.native_versions or ():
            native[v] = [NATIVE[p] for p in RELEASE_NATIVE[self.release][v]]
        groups[SCHED] = native
        if self.coscheduling:
            groups[COSCHED] = {"v1alpha1": [COSCHED_PG]}
        if self.volcano:
            groups[VOLCANO] = {"v1beta1": [VOLCANO_PG, VOLCANO_QUEUE]}
        if self.dra_versions:
            groups[DRA] = {v: DRA_KINDS for v in self.dra_versions}
        if self.kueue:
            groups[KUEUE_WL.group] = {"v1beta1": [KUEUE_WL]}
        return groups

    def _kind_for(self, group: str, version: str, plural: str) -> Kind | None:
        if group == "":
            return next((k for k in CORE if k.plural == plural), None) if version == "v1" else None
        return next((k for k in self.served().get(group, {}).get(version, []) if k.plural == plural), None)

    def _kind_of(self, obj: dict[str, Any]) -> tuple[Kind, str]:
        api = str(obj.get("apiVersion", ""))
        group, _, version = api.rpartition("/")
        for k in CORE + APPS + [LEASES] + list(NATIVE.values()) + [COSCHED_PG, VOLCANO_PG, VOLCANO_QUEUE] \
                + DRA_KINDS + [KUEUE_WL] + ADMISSION + RBAC:
            if k.group == group and k.kind == obj.get("kind"):
                return k, version
        raise ValueError(f"emulator does not know {api} {obj.get('kind')}")

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        if parts == ["version"]:
            minor = self.release.split(".")[1]
            return {"major": "1", "minor": minor, "gitVersion": f"v{self.release}.0", "platform": "linux/amd64"}
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if parts == ["api", "v1"]:
            return self._resource_list("", "v1", CORE)
        if parts == ["apis"]:
            groups = []
            for g, versions in self.served().items():
                order = sorted(versions, key=lambda v: (2 if "alpha" in v else 1 if "beta" in v else 0, v))
                gvs = [{"groupVersion": f"{g}/{v}", "version": v} for v in order]
                groups.append({"name": g, "versions": gvs, "preferredVersion": gvs[0]})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if len(parts) == 3 and parts[0] == "apis":
            kinds = self.served().get(parts[1], {}).get(parts[2])
            if kinds is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._resource_list(parts[1], parts[2], kinds)
        return None

    @staticmethod
    def _resource_list(group: str, version: str, kinds: list[Kind]) -> dict[str, Any]:
        resources = []
        for k in kinds:
            resources.append({"name": k.plural, "singularName": k.kind.lower(), "namespaced": k.namespaced,
                              "kind": k.kind, "verbs": VERBS})
            resources.append({"name": f"{k.plural}/status", "singularName": "", "namespaced": k.namespaced,
                              "kind": k.kind, "verbs": ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": resources}

    # -------------------------------------------------- state, from Python

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (any served version), as a controller would."""
        kind, _ = self._kind_of(obj)
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace") or ("default" if kind.namespaced else ""), meta["name"])
        with self._cond:
            if key in self._store.get(kind.key, {}):
                body = copy.deepcopy(obj)
                body.setdefault("metadata", {}).pop("resourceVersion", None)
                return self._update(kind, key, body)
            return self._create(kind, key[0], copy.deepcopy(obj), dry_run=False)

    def apply_all(self, objs: list[dict[str, Any]]) -> None:
        for o in objs:
            self.apply(o)

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        k, _ = self._kind_of({"apiVersion": api_version, "kind": kind})
        with self._cond:
            self._delete(k, (namespace if k.namespaced else "", name))

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        k, _ = self._kind_of({"apiVersion": api_version, "kind": kind})
        with self._cond:
            obj = self._store.get(k.key, {}).get((namespace if k.namespaced else "", name))
            return copy.deepcopy(obj) if obj else None

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def compact(self) -> None:
        """Etcd compaction: every older resourceVersion and continue token now answers 410."""
        with self._cond:
            self._compacted = self._rv
            self._log = [e for e in self._log if e.rv > self._compacted]
            self._cond.notify_all()

    def drop_watches(self) -> None:
        """Cut every open watch in the middle of an event (the client sees a broken chunk)."""
        with self._cond:
            self._drop_gen += 1
            self._cond.notify_all()

    def emit_raw(self, api_version: str, kind: str, data: bytes) -> None:
        """Send `data` as one line to every watch of that resource (a malformed event, say)."""
        k, _ = self._kind_of({"apiVersion": api_version, "kind": kind})
        with self._cond:
            self._log.append(_Event(self._bump(), k.key, "RAW", {"data": data.decode(), "metadata": {}}))
            self._cond.notify_all()

    def fail_next(self, count: int, status: int = 503, path_contains: str = "") -> None:
        """Answer the next `count` matching requests with `status`."""
        with self._cond:
            self._failures += [(status, path_contains)] * count

    def wait_for_watches(self, n: int, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.open_watches < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def count(self, method: str, path: str, **query: str) -> int:
        return sum(1 for r in list(self.requests) if r.method == method and r.path == path
                   and all(r.query.get(k) == v for k, v in query.items()))

    # ------------------------------------------------ state, under _cond

    def _bump(self) -> int:
        self._rv += 1
        return self._rv

    def _record(self, kind: Kind, type_: str, obj: dict[str, Any]) -> None:
        self._log.append(_Event(int(obj["metadata"]["resourceVersion"]), kind.key, type_, copy.deepcopy(obj)))
        self._cond.notify_all()

    def _drop_pod_fields(self, obj: dict[str, Any], strict: bool) -> list[str]:
        """The pod link fields this server would not keep; raises for unknown fields when Strict."""
        spec = obj.get("spec") or {}
        dropped = []
        for f in LINK_FIELDS:
            if f not in spec:
                continue
            known = RELEASE_POD_FIELD[self.release] == f
            if not known and strict:
                raise ApiError(400, "BadRequest", f'strict decoding error: unknown field "spec.{f}"')
            if not known or not self.generic_workload:  # disabled fields are dropped silently
                del spec[f]
                dropped.append(f)
        return dropped

    def _create(self, kind: Kind, namespace: str, obj: dict[str, Any], *, dry_run: bool,
                strict: bool = False) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        ns = (namespace or meta.get("namespace") or "default") if kind.namespaced else ""
        if kind.namespaced and ("", ns) not in self._store.get("/namespaces", {}):
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')
        store = self._store.setdefault(kind.key, {})
        if (ns, meta["name"]) in store:
            raise ApiError(409, "AlreadyExists", f'{kind.plural} "{meta["name"]}" already exists')
        if kind.kind == "Pod":
            self._drop_pod_fields(obj, strict)
        if kind.namespaced:
            meta["namespace"] = ns
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=meta.get("creationTimestamp") or _now())
        _check_size(kind, obj)
        if dry_run:
            meta["resourceVersion"] = ""
            return obj
        meta["resourceVersion"] = str(self._bump())
        store[(ns, meta["name"])] = obj
        self._record(kind, "ADDED", obj)
        return obj

    def _update(self, kind: Kind, key: tuple[str, str], obj: dict[str, Any]) -> dict[str, Any]:
        store = self._store.get(kind.key, {})
        old = store.get(key)
        if old is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{key[1]}" not found')
        meta = obj.setdefault("metadata", {})
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{key[1]}": '
                           "the object has been modified; please apply your changes to the latest version")
        if kind.kind == "Pod":
            self._drop_pod_fields(obj, False)
            _check_gates_only_removed(old, obj)
            _check_node_affinity_update(old, obj)
        for k in ("uid", "creationTimestamp", "namespace"):
            if k in old["metadata"]:
                meta[k] = old["metadata"][k]
        if "managedFields" not in meta and "managedFields" in old["metadata"]:  # omitted: the server keeps them
            meta["managedFields"] = old["metadata"]["managedFields"]
        meta["name"] = key[1]
        _check_size(kind, obj)
        meta["resourceVersion"] = str(self._bump())
        store[key] = obj
        self._record(kind, "MODIFIED", obj)
        return obj

    def _delete(self, kind: Kind, key: tuple[str, str]) -> dict[str, Any]:
        obj = self._store.get(kind.key, {}).pop(key, None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{key[1]}" not found')
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self._bump())
        self._record(kind, "DELETED", obj)
        return obj

    def _view(self, kind: Kind, version: str, obj: dict[str, Any], *, in_list: bool) -> dict[str, Any]:
        """The object as served in `version` (the same object in every enabled version)."""
        out = copy.deepcopy(obj)
        if in_list and kind.builtin:
            out.pop("apiVersion", None)
            out.pop("kind", None)
        else:
            out["apiVersion"] = f"{kind.group}/{version}" if kind.group else version
            out["kind"] = kind.kind
        return out

    # --------------------------------------------------------------- HTTP

    def _route(self, parts: list[str]) -> _Route | None:
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        sub = rest[2] if len(rest) == 3 and rest[2] == "status" else None
        if not rest or len(rest) > (3 if sub else 2):
            return None
        kind = self._kind_for(group, version, rest[0])
        if kind is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return _Route(kind, version, namespace, rest[1] if len(rest) >= 2 else None, sub)

    def handle(self, h: _Handler, method: str) -> None:
        url = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        parts = [p for p in url.path.split("/") if p]
        self.requests.append(Request(method, url.path, query))
        h.body_read = False
        try:
            h.username = self._user(h.headers.get("Authorization") or "")
            with self._cond:
                for i, (status, needle) in enumerate(self._failures):
                    if needle in url.path:
                        del self._failures[i]
                        raise ApiError(status, "ServiceUnavailable", "injected failure")
            doc = self._discovery(parts) if method == "GET" else None
            if doc is not None:
                return h.send_json(200, doc)
            if parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] and method == "POST":
                return h.send_json(201, self._access_review(h.read_json()))
            if len(parts) >= 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "services" \
                    and parts[6] == "proxy" and method == "GET":
                return h.send_raw(*proxy_get(self.services, parts[3], parts[5], "/".join(parts[7:])))
            route = self._route(parts)
            if route is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            self._authorize(h.username, method, route, query)
            if method == "GET" and route.name is None and (route.kind.group, route.kind.plural) in self.forbidden:
                raise ApiError(403, "Forbidden", f'{route.kind.plural}.{route.kind.group} is forbidden: User cannot '
                                                 f'list resource "{route.kind.plural}" in API group "{route.kind.group}"')
            if method == "GET" and route.name is None and query.get("watch") in ("true", "1"):
                return self._watch(h, route, query)
            if method == "GET" and route.name is None:
                return h.send_json(200, self._list(route, query))
            answer = self._mutate(h, method, route, query)
            if self.after_write is not None:  # a test's hook: the cluster moves on before the writer hears back
                self.after_write(method, url.path)
            h.send_json(*answer)
        except ApiError as exc:
            h.drain()  # a body left unread would be parsed as the next request on this connection
            h.send_json(exc.code, exc.status())
        except _Dropped:
            h.abort()

    def _user(self, authorization: str) -> str:
        """The user a bearer token authenticates; 401 for any other (no token needed when `token` is empty)."""
        token = authorization.removeprefix("Bearer ")
        if not self.token:
            return self.users.get(token, ADMIN)
        if authorization.startswith("Bearer ") and token == self.token:
            return ADMIN
        if authorization.startswith("Bearer ") and token in self.users:
            return self.users[token]
        raise ApiError(401, "Unauthorized", "Unauthorized")

    def _authorize(self, username: str, method: str, route: _Route, query: dict[str, str]) -> None:
        """403 unless RBAC (when on) lets `username` make this request; the admin may do anything."""
        if not self.rbac or username == ADMIN:
            return
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method) or (
            "get" if route.name else "watch" if query.get("watch") in ("true", "1") else "list")
        kind = route.kind
        resource = f"{kind.plural}/{route.subresource}" if route.subresource else kind.plural
        with self._cond:
            objs = [o for k in RBAC for o in self._store.get(k.key, {}).values()]
        if not rbac_allows(objs, username, verb, kind.group, resource, route.namespace or "", route.name or ""):
            where = f' in the namespace "{route.namespace}"' if route.namespace else " at the cluster scope"
            raise ApiError(403, "Forbidden", f'{resource} "{route.name or ""}" is forbidden: User "{username}" cannot '
                           f'{verb} resource "{resource}" in API group "{kind.group}"{where}')

    def _policies(self, route: _Route, operation: str, obj: dict[str, Any] | None, old: dict[str, Any] | None,
                  username: str) -> None:
        """Refuse the write (422) when an installed ValidatingAdmissionPolicy denies it (call under the lock)."""
        policies = list(self._store.get("admissionregistration.k8s.io/validatingadmissionpolicies", {}).values())
        if not policies or route.subresource:
            return
        bindings = list(self._store.get("admissionregistration.k8s.io/validatingadmissionpolicybindings", {}).values())
        kind = route.kind
        meta = (obj or old or {}).get("metadata") or {}
        request = request_attributes((kind.group, route.version, kind.plural), kind.kind, operation,
                                     route.namespace or "", str(meta.get("name") or route.name or ""), username)
        try:
            check_policies(policies, bindings, request, obj, old)
        except AdmissionDenied as exc:
            raise ApiError(exc.code, exc.reason, exc.message) from None

    def _access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
        allowed = (attrs.get("verb"), attrs.get("group", ""), attrs.get("resource")) not in self.denied
        body["status"] = {"allowed": allowed, **({} if allowed else {"reason": "denied by the test"})}
        return body

    def _mutate(self, h: _Handler, method: str, route: _Route, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        kind, ns = route.kind, route.namespace or ""
        admitted = self._admitted(route, ns, h.read_json()) if method == "POST" and route.name is None else None
        with self._cond:
            if method == "GET":
                obj = self._store.get(kind.key, {}).get((ns if kind.namespaced else "", route.name or ""))
                if obj is None:
                    raise ApiError(404, "NotFound", f'{kind.plural} "{route.name}" not found')
                return 200, self._view(kind, route.version, obj, in_list=False)
            if method == "POST" and route.name is None:
                obj = self._create(kind, ns, admitted or {}, dry_run=query.get("dryRun") == "All",
                                   strict=query.get("fieldValidation") == "Strict")
                return 201, self._view(kind, route.version, obj, in_list=False)
            key = (ns if kind.namespaced else "", route.name or "")
            if method == "PUT" and route.name:
                body = h.read_json()
                if route.subresource:
                    body = self._status_only(kind, key, body)
                self._policies(route, "UPDATE", body, self._store.get(kind.key, {}).get(key), h.username)
                return 200, self._view(kind, route.version, self._update(kind, key, body), in_list=False)
            if method == "PATCH" and route.name:
                current = self._store.get(kind.key, {}).get(key)
                if current is None:
                    raise ApiError(404, "NotFound", f'{kind.plural} "{route.name}" not found')
                ctype = h.headers.get("Content-Type") or ""
                if ctype.startswith("application/apply-patch+yaml"):
                    if route.subresource != "status":
                        raise ApiError(415, "UnsupportedMediaType", "this emulator applies only to the status subresource")
                    patched = _apply_status(kind, current, h.read_json(), query, route.version)
                elif ctype.startswith("application/json-patch+json"):
                    patched = _json_patch(current, h.read_any())
                else:
                    patched = _merge_patch(current, h.read_json())
                if route.subresource:
                    patched = self._status_only(kind, key, patched)
                patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self._policies(route, "UPDATE", patched, current, h.username)
                return 200, self._view(kind, route.version, self._update(kind, key, patched), in_list=False)
            if method == "DELETE" and route.name:
                body = h.read_any() if int(h.headers.get("Content-Length") or 0) else None
                pre = ((body or {}).get("preconditions") or {}) if isinstance(body, dict) else {}
                uid, rv = pre.get("uid"), pre.get("resourceVersion")
                current = self._store.get(kind.key, {}).get(key)
                if uid and current is not None and current["metadata"].get("uid") != uid:
                    raise ApiError(409, "Conflict", f'Precondition failed: UID in precondition: {uid}, UID in object '
                                   f'meta: {current["metadata"].get("uid")}')
                if rv and current is not None and current["metadata"].get("resourceVersion") != rv:
                    raise ApiError(409, "Conflict", f"Precondition failed: ResourceVersion in precondition: {rv}, "
                                   f'ResourceVersion in object meta: {current["metadata"].get("resourceVersion")}')
                if current is not None:
                    self._policies(route, "DELETE", None, current, h.username)
                return 200, self._view(kind, route.version, self._delete(kind, key), in_list=False)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    def _admitted(self, route: _Route, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        """The created object after the registered admission webhooks (called outside the lock)."""
        kind = route.kind
        with self._cond:
            configs = {phase: [copy.deepcopy(c) for c in self._store.get(f"admissionregistration.k8s.io/{phase}"
                                                                             "webhookconfigurations", {}).values()]
                       for phase in ("mutating", "validating")}
            space = self._store.get("/namespaces", {}).get(("", ns)) if kind.namespaced else None
            labels = dict((space or {}).get("metadata", {}).get("labels") or {})
        if not configs["mutating"] and not configs["validating"]:
            return obj
        try:
            return admit(configs, dict(self.services), labels, (kind.group, route.version, kind.plural), kind.kind,
                         ns if kind.namespaced else "", obj, _json_patch, self.admission_warnings)
        except AdmissionDenied as exc:
            raise ApiError(exc.code, exc.reason, exc.message) from None

    def _status_only(self, kind: Kind, key: tuple[str, str], body: dict[str, Any]) -> dict[str, Any]:
        """A write to the status subresource changes `status` (and managedFields), nothing else."""
        current = self._store.get(kind.key, {}).get(key)
        if current is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{key[1]}" not found')
        out = copy.deepcopy(current)
        out["status"] = copy.deepcopy(body.get("status"))
        if out["status"] is None:
            del out["status"]
        managed = (body.get("metadata") or {}).get("managedFields")
        if managed is not None:
            out["metadata"]["managedFields"] = managed
        rv = (body.get("metadata") or {}).get("resourceVersion")
        out["metadata"]["resourceVersion"] = rv or current["metadata"]["resourceVersion"]
        return out

    def _list(self, route: _Route, query: dict[str, str]) -> dict[str, Any]:
        kind = route.kind
        limit = int(query.get("limit") or 0)
        selector = query.get("labelSelector") or ""
        with self._cond:
            token = query.get("continue")
            if token and self.expire_continue_after:
                self._continues += 1
                if self._continues >= self.expire_continue_after:
                    self.expire_continue_after = self._continues = 0
                    self._bump()  # something changed since the first page...
                    self._compacted = self._rv  # ...and history before it is gone
            if token:
                try:
                    state = json.loads(base64.b64decode(token))
                    rv, items = self._pages[state["id"]]
                    start = int(state["start"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "continue key is not valid") from None
                if rv < self._compacted:
                    raise ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                   "consistent list result. You can start a new list without the continue parameter.")
            else:
                rv, start = self._rv, 0
                objs = [o for (ns, _), o in sorted(self._store.get(kind.key, {}).items())
                        if route.namespace is None or ns == route.namespace]
                fields = query.get("fieldSelector") or ""
                items = [self._view(kind, route.version, o, in_list=True) for o in objs
                         if self._selected(o, selector) and self._fields(kind.kind, o, fields)]
                state = {"id": str(next(self._page_ids))}
                self._pages[state["id"]] = (rv, items)
        end = start + limit if limit > 0 else len(items)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if end < len(items):
            meta["continue"] = base64.b64encode(json.dumps({"id": state["id"], "start": end}).encode()).decode()
            meta["remainingItemCount"] = len(items) - end
        elif self.endless_continue:  # a broken server: the last page points back at the first
            meta["continue"] = base64.b64encode(json.dumps({"id": state["id"], "start": 0}).encode()).decode()
        api = f"{kind.group}/{route.version}" if kind.group else route.version
        return {"kind": f"{kind.kind}List", "apiVersion": api, "metadata": meta, "items": items[start:end]}

    @staticmethod
    def _fields(kind: str, obj: dict[str, Any], selector: str) -> bool:
        """`fieldSelector` terms `field=value`: a Pod's spec.nodeName and status.phase, any object's metadata.name
        and metadata.namespace (the fields pkg/registry/core/pod/strategy.go ToSelectableFields lists); another
        field is refused as the API server refuses it."""
        paths = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}
        if kind == "Pod":
            paths |= {"spec.nodeName": ("spec", "nodeName"), "status.phase": ("status", "phase")}
        for term in filter(None, selector.split(",")):
            field, _, want = term.partition("=")
            if field not in paths:
                raise ApiError(400, "BadRequest", f'"{field}" is not a known field selector')
            outer, inner = paths[field]
            if str((obj.get(outer) or {}).get(inner) or "") != want.removeprefix("="):
                return False
        return True

    @staticmethod
    def _selected(obj: dict[str, Any], selector: str) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for term in filter(None, selector.split(",")):
            k, _, v = term.partition("=")
            if labels.get(k) != v:
                return False
        return True

    def _watch(self, h: _Handler, route: _Route, query: dict[str, str]) -> None:
        kind = route.kind
        rv_text = query.get("resourceVersion") or ""
        bookmarks = query.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        with self._cond:
            if rv_text not in ("", "0") and int(rv_text) < self._compacted:
                message = f"too old resource version: {rv_text} ({self._compacted})"
                if self.gone_as_http:
                    raise ApiError(410, "Expired", message)
                start: list[dict[str, Any]] | None = [{"type": "ERROR",
                                                       "object": ApiError(410, "Expired", message).status()}]
                pos = self._rv
            elif rv_text in ("", "0"):
                start = [{"type": "ADDED", "object": self._view(kind, route.version, o, in_list=False)}
                         for (ns, _), o in sorted(self._store.get(kind.key, {}).items())
                         if route.namespace is None or ns == route.namespace]
                pos = self._rv
            else:
                start, pos = [], int(rv_text)
            gen = self._drop_gen
            self.open_watches += 1
            self._cond.notify_all()
        try:
            h.start_stream()
            for ev in start or []:
                h.send_chunk(json.dumps(ev).encode() + b"\n")
                if ev["type"] == "ERROR":
                    return h.end_stream()
            last_bookmark = time.monotonic()
            while True:
                with self._cond:
                    while True:
                        now = time.monotonic()
                        if self._closing or now >= deadline or gen != self._drop_gen:
                            break
                        if self._log and self._log[-1].rv > pos:
                            break
                        if bookmarks and now - last_bookmark >= self.bookmark_interval:
                            break
                        wait = deadline - now
                        if bookmarks:
                            wait = min(wait, self.bookmark_interval - (now - last_bookmark))
                        self._cond.wait(max(0.001, wait))
                    if gen != self._drop_gen:
                        raise _Dropped()
                    if self._closing or time.monotonic() >= deadline:
                        break
                    if pos < self._compacted:  # compacted while we were behind
                        events = [{"type": "ERROR", "object": ApiError(
                            410, "Expired", f"too old resource version: {pos} ({self._compacted})").status()}]
                    else:
                        i = bisect.bisect_right(self._log, pos, key=lambda e: e.rv)  # no copy of the whole log per wake-up
                        events = [{"type": e.type, "object": e.obj if e.type == "RAW" else
                                   self._view(kind, route.version, e.obj, in_list=False)}
                                  for e in self._log[i:] if e.key == kind.key and (
                                      route.namespace is None or e.obj["metadata"].get("namespace") == route.namespace)]
                    pos = self._rv
                for ev in events:
                    if ev["type"] == "RAW":
                        h.send_chunk(ev["object"]["data"].encode() + b"\n")
                        continue
                    h.send_chunk(json.dumps(ev).encode() + b"\n")
                    if ev["type"] == "ERROR":
                        return h.end_stream()
                if bookmarks and time.monotonic() - last_bookmark >= self.bookmark_interval:
                    api = f"{kind.group}/{route.version}" if kind.group else route.version
                    bm = {"type": "BOOKMARK", "object": {"kind": kind.kind, "apiVersion": api,
                                                         "metadata": {"resourceVersion": str(pos)}}}
                    h.send_chunk(json.dumps(bm).encode() + b"\n")
                    last_bookmark = time.monotonic()
            h.end_stream()
        except _Dropped:
            h.send_chunk(b'{"type":"MODIFIED","object":{"metadata":{"na')  # half an event, then the cut
            h.abort()
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True
        finally:
            with self._cond:
                self.open_watches -= 1
                self._cond.notify_all()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms delayed-ACK stall
    emulator: Emulator
    username = ADMIN  # who sent the request being handled (`Emulator.handle` sets it from the bearer token)

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.emulator.handle(self, "GET")

    def do_POST(self) -> None:  # noqa: N802
        self.emulator.handle(self, "POST")

    def do_PUT(self) -> None:  # noqa: N802
        self.emulator.handle(self, "PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self.emulator.handle(self, "PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self.emulator.handle(self, "DELETE")

    def drain(self) -> None:
        if not getattr(self, "body_read", True):
            self.body_read = True
            self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _body(self) -> bytes:
        """The request body; over the API server's MaxRequestBodyBytes a 413, as `limitedReadBody` answers."""
        self.body_read = True
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n)
        if n > MAX_BODY_BYTES:
            raise ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY_BYTES}")
        return data

    def read_any(self) -> Any:
        data = self._body()
        try:
            return json.loads(data or b"null")
        except ValueError:
            raise ApiError(400, "BadRequest", "the body is not JSON") from None

    def read_json(self) -> dict[str, Any]:
        data = self._body()
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            raise ApiError(400, "BadRequest", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body is not a JSON object")
        return body

    def send_raw(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, code: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def abort(self) -> None:
        """Cut the connection: no terminating chunk, the client sees a broken stream."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
