"""`gangscale check`: are the prerequisites for gang-aware scaling in place?

Every line gets a verdict (ok, info, warn, fail) and, when something is off,
what to do about it. Nothing here changes the cluster: the Pod-field probe is
a server-side dry-run create, access is asked with SelfSubjectAccessReviews,
everything else is read.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..model import NodeGroup
from .check_daemonsets import check_daemonsets
from .client import KubeClient
from .discovery import MATURITY, GangApis, ServerInfo, choose_gang_apis, describe, discover
from .errors import KubeError
from .lister import list_all
from .refs import CONFIGMAPS, DAEMONSETS, DEPLOYMENTS, NATIVE_GROUP, NODES, PODS, ResourceRef
from .scope import as_dict

OK, INFO, WARN, FAIL = "ok", "info", "warn", "fail"
EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE = 0, 1, 2

# The native version each release serves, for the "how to enable" hints.
NATIVE_VERSION_BY_MINOR = {35: "v1alpha1", 36: "v1alpha2", 37: "v1beta1"}
PROBE_NAME = "gangscale-check"
CA_STATUS_CONFIGMAP = ("kube-system", "cluster-autoscaler-status")
CA_TAGS = "k8s.io/cluster-autoscaler/enabled, k8s.io/cluster-autoscaler/<cluster-name>"


@dataclass(slots=True)
class CheckResult:
    name: str
    verdict: str  # ok | info | warn | fail
    summary: str
    detail: list[str] = field(default_factory=list)  # facts behind the verdict, then the fix


@dataclass(slots=True)
class CheckReport:
    host: str
    context: str | None
    results: list[CheckResult] = field(default_factory=list)
    unreachable: bool = False

    @property
    def exit_code(self) -> int:
        if self.unreachable:
            return EXIT_UNREACHABLE
        return EXIT_FAILED if any(r.verdict == FAIL for r in self.results) else EXIT_OK

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "context": self.context,
            "exitCode": self.exit_code,
            "results": [asdict(r) for r in self.results],
        }

    def render_text(self) -> str:
        lines = [f"gangscale check: {self.host} (context {self.context or '-'})"]
        for r in self.results:
            lines.append(f"  {r.verdict.upper():<5} {r.name:<19} {r.summary}")
            lines += [f"  {'':<5} {'':<19} - {d}" for d in r.detail]
        lines.append(
            f"result: {self.count(FAIL)} failed, {self.count(WARN)} warnings (exit {self.exit_code})"
        )
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------- helpers


def _native_version_for(minor: int | None) -> str:
    if minor is None:
        return "<version>"
    return NATIVE_VERSION_BY_MINOR.get(minor, "v1beta1" if minor > 37 else "v1alpha1")


def _scheduler_gates(minor: int | None) -> str:
    return (
        "GenericWorkload=true,GangScheduling=true" if (minor or 0) < 37 else "GenericWorkload=true"
    )


def _enable_hint(minor: int | None) -> str:
    v = _native_version_for(minor)
    return (
        f"kube-apiserver --feature-gates=GenericWorkload=true --runtime-config={NATIVE_GROUP}/{v}=true; "
        f"kube-scheduler --feature-gates={_scheduler_gates(minor)}"
    )


def _flags(command: Iterable[str]) -> dict[str, str]:
    """`--name=value` and `--name value` flags of a container command line."""
    out: dict[str, str] = {}
    args = [str(a) for a in command]
    for i, a in enumerate(args):
        if not a.startswith("--"):
            continue
        if "=" in a:
            k, v = a[2:].split("=", 1)
        else:
            k, v = (
                a[2:],
                args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else "true",
            )
        out[k] = f"{out[k]},{v}" if k in out and k in ("nodes", "node-group-auto-discovery") else v
    return out


def _gates(flag: str | None) -> dict[str, bool]:
    gates = {}
    for part in (flag or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            gates[k.strip()] = v.strip().lower() == "true"
    return gates


def _command_lines(pod_or_deploy: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(image, command + args) of each container of a Pod or a Deployment's template."""
    spec = as_dict(pod_or_deploy.get("spec"))
    if pod_or_deploy.get("kind") == "Deployment":
        spec = as_dict(as_dict(spec.get("template")).get("spec"))
    out = []
    for c in spec.get("containers") or []:
        if isinstance(c, dict):
            cmd = [str(x) for x in (*(c.get("command") or []), *(c.get("args") or []))]
            if len(cmd) == 1 and " " in cmd[0]:  # `sh -c "..."`-style single strings
                try:
                    cmd = shlex.split(cmd[0])
                except ValueError:  # unbalanced quotes: still read its flags
                    cmd = cmd[0].split()
            out.append((str(c.get("image") or ""), cmd))
    return out


# ---------------------------------------------------------------------- checks


def check_server(info: ServerInfo) -> CheckResult:
    text = f"Kubernetes {info.git_version or '?'}"
    if info.minor is None:
        return CheckResult(
            "server", WARN, f"{text}: version not understood", ["gang API checks assume 1.35+"]
        )
    if info.minor < 35:
        return CheckResult(
            "server",
            WARN,
            f"{text}: no native gang API before 1.35",
            ["only scheduler-plugins and Volcano PodGroups can be read on this server"],
        )
    if info.minor > 37:
        return CheckResult(
            "server", OK, text, ["newer than the releases gangscale is tested against (1.35-1.37)"]
        )
    return CheckResult("server", OK, text)


def check_gang_apis(info: ServerInfo, apis: GangApis) -> CheckResult:
    served = [
        f"{g}: {', '.join(info.groups[g])}"
        for g in sorted(info.groups)
        if g.startswith("scheduling.")
    ]
    detail = [f"served versions: {'; '.join(served) or 'no scheduling group'}"]
    detail += [f"served but not read: {u}" for u in apis.unread]
    detail.append(
        "also read: "
        + (", ".join(r.label for r in apis.inputs) or "no DRA (resource.k8s.io) or Kueue API")
    )
    if not apis.refs:
        detail.append(f"to enable the native API: {_enable_hint(info.minor)}")
        detail.append("or install the scheduler-plugins Coscheduling plugin or Volcano")
        return CheckResult(
            "gang-apis",
            FAIL,
            "no gang API is served: every pod would be planned on its own",
            detail,
        )
    if apis.native_ref is None and (info.minor or 0) >= 35:
        detail.append(f"native API not served; to enable it: {_enable_hint(info.minor)}")
    return CheckResult("gang-apis", OK, f"planner reads {describe(apis)}", detail)


def check_maturity(info: ServerInfo, apis: GangApis) -> CheckResult | None:
    ref = apis.native_ref
    if ref is None:
        if (info.minor or 0) < 35:
            return None
        v = _native_version_for(info.minor)
        return CheckResult(
            "api-maturity",
            INFO,
            f"native gang API ({NATIVE_GROUP}/{v}) is not enabled",
            [f"{MATURITY.get(v, 'alpha')} in Kubernetes 1.{info.minor} and off by default"],
        )
    level = MATURITY.get(ref.version, "alpha")
    if level == "alpha":
        return CheckResult(
            "api-maturity",
            WARN,
            f"{ref.api_version} is alpha (Kubernetes 1.{info.minor}): not for production",
            [
                "alpha APIs are off by default, may change incompatibly in the next minor release, "
                "and have no upgrade or rollback guarantee (objects may have to be deleted before an upgrade)",
                "use it to evaluate; keep a rollback path (scheduler-plugins or Volcano PodGroups, "
                "which gangscale reads too) and test upgrades before relying on it",
            ],
        )
    return CheckResult(
        "api-maturity",
        INFO,
        f"{ref.api_version} is beta but off by default (enabled on this server)",
        [
            "beta APIs keep a migration path between releases but were switched on explicitly here: "
            "managed control planes may not offer the switch, and every cluster needs the same flags",
        ],
    )


def _probe_pod(namespace: str, link_field: str) -> dict[str, Any]:
    link: dict[str, Any] = (
        {"podGroupName": PROBE_NAME}
        if link_field == "schedulingGroup"
        else {"name": PROBE_NAME, "podGroup": "probe"}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{PROBE_NAME}-",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gangscale"},
        },
        "spec": {
            "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}],
            link_field: link,
        },
    }


def check_pod_field(
    client: KubeClient, info: ServerInfo, apis: GangApis, namespace: str
) -> CheckResult | None:
    if (info.minor or 0) < 35 and apis.native_ref is None:
        return None
    link_field = apis.pod_field or ("workloadRef" if info.minor == 35 else "schedulingGroup")
    where = f"server-side dry-run create of a pod in namespace {namespace}"
    try:
        created = client.post(
            PODS.path(namespace), _probe_pod(namespace, link_field), {"dryRun": "All"}
        )
    except KubeError as exc:
        why = "not allowed to create pods, even as a dry run" if exc.status == 403 else str(exc)
        return CheckResult(
            "pod-field",
            WARN,
            f"could not test spec.{link_field}: {why}",
            [f"{where}; pass -n NAMESPACE to test in a namespace you may write to"],
        )
    kept = isinstance((created.get("spec") or {}).get(link_field), dict)
    if kept:
        return CheckResult("pod-field", OK, f"kube-apiserver keeps spec.{link_field} ({where})")
    detail = [
        f"{where}: the field was accepted and silently removed",
        "pods then carry no link to a native group, and the scheduler places them one by one",
        f"fix: {_enable_hint(info.minor)}",
    ]
    summary = f"kube-apiserver drops spec.{link_field}: the GenericWorkload feature gate is off"
    if (
        apis.native_ref is not None
    ):  # the API is served, the field is not: e.g. API servers with mixed flags
        return CheckResult("pod-field", FAIL, summary, detail)
    if apis.refs:  # scheduler-plugins / Volcano gangs do not need the field
        return CheckResult(
            "pod-field",
            INFO,
            summary,
            [*detail[:1], f"native gangs are unavailable; {describe(apis)} gangs are not affected"],
        )
    return CheckResult("pod-field", WARN, summary, detail)


def _can(client: KubeClient, verb: str, ref: ResourceRef, namespace: str | None) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "verb": verb,
                "group": ref.group,
                "resource": ref.plural,
                "namespace": namespace or "",
            }
        },
    }
    answer = client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    return bool((answer.get("status") or {}).get("allowed"))


def check_rbac(client: KubeClient, apis: GangApis, namespace: str | None) -> CheckResult:
    missing: list[str] = []
    notes: list[str] = []
    try:
        for verb in ("list", "watch"):
            if not _can(client, verb, NODES, None):
                missing.append(f"{verb} nodes")
            if not _can(client, verb, PODS, None):
                if namespace and _can(client, verb, PODS, namespace):
                    notes.append(
                        f"{verb} pods only in {namespace}: free capacity will ignore other namespaces' pods"
                    )
                else:
                    missing.append(f"{verb} pods (all namespaces)")
            for ref in apis.refs:
                if not _can(client, verb, ref, namespace):
                    missing.append(
                        f"{verb} {ref.plural}.{ref.group} ({namespace or 'all namespaces'})"
                    )
            if not _can(client, verb, DAEMONSETS, None):
                notes.append(
                    f"{verb} daemonsets.apps (all namespaces) is not allowed: plans assume no DaemonSet pod "
                    "runs on the nodes they buy"
                )
    except KubeError as exc:
        return CheckResult("rbac", WARN, f"could not ask SelfSubjectAccessReview: {exc}")
    if missing:
        return CheckResult(
            "rbac",
            FAIL,
            f"the planner may not read: {', '.join(missing)}",
            [
                *notes,
                "fix: bind a ClusterRole with get/list/watch on these resources "
                "to the user or service account gangscale runs as",
            ],
        )
    verdict = WARN if notes else OK
    return CheckResult(
        "rbac",
        verdict,
        "the planner may list and watch nodes, pods and "
        + (", ".join(r.plural + "." + r.group for r in apis.refs) or "no gang resource"),
        notes,
    )


def _autoscaler_deployments(client: KubeClient) -> tuple[list[dict[str, Any]], str]:
    err = ""
    for ns in (None, "kube-system"):
        try:
            return list_all(client, DEPLOYMENTS, ns).items, ""
        except KubeError as exc:
            if exc.status == 0:
                raise
            err = str(exc)
    return [], err


def _is_autoscaler(obj: dict[str, Any]) -> bool:
    name = str((obj.get("metadata") or {}).get("name") or "")
    return "cluster-autoscaler" in name or any(
        "cluster-autoscaler" in img for img, _ in _command_lines(obj)
    )


def check_cluster_autoscaler(client: KubeClient, nodegroups: Sequence[str] | None) -> CheckResult:
    found: list[str] = []
    detail: list[str] = []
    deployments, err = _autoscaler_deployments(client)
    for d in deployments:
        if not _is_autoscaler(d):
            continue
        meta = d.get("metadata") or {}
        found.append(f"Deployment {meta.get('namespace')}/{meta.get('name')}")
        for image, cmd in _command_lines(d):
            if "cluster-autoscaler" not in image and not any(
                "cluster-autoscaler" in a for a in cmd
            ):
                continue
            flags = _flags(cmd)
            if flags.get("nodes"):
                named = [n.split(":")[-1] for n in re.split(r",(?=\d+:)", flags["nodes"]) if n]
                detail.append(f"its --nodes: {', '.join(named)}")
                overlap = sorted(set(named) & set(nodegroups or ()))
                if overlap:
                    detail.append(f"CA and gangscale both scale: {', '.join(overlap)}")
            if flags.get("node-group-auto-discovery"):
                detail.append(
                    f"its --node-group-auto-discovery: {flags['node-group-auto-discovery']}"
                )
    try:
        client.get(CONFIGMAPS.path(CA_STATUS_CONFIGMAP[0], CA_STATUS_CONFIGMAP[1]))
        found.append(
            f"ConfigMap {'/'.join(CA_STATUS_CONFIGMAP)} (written by a running CA, managed ones too)"
        )
    except KubeError as exc:
        if exc.status not in (404, 403):
            raise
        if exc.status == 403:
            err = err or str(exc)
    if not found:
        if err:
            return CheckResult(
                "cluster-autoscaler", WARN, "could not look for Cluster Autoscaler", [err]
            )
        return CheckResult("cluster-autoscaler", OK, "no Cluster Autoscaler found")
    detail += [
        "if CA manages the node groups gangscale scales, both act on them: CA adds nodes pod by pod for gangs "
        "gangscale sizes whole, and scales down nodes gangscale just bought",
        f"fix: remove CA's auto-discovery tags ({CA_TAGS}) from gangscale's node groups, or drop them "
        "from CA's --nodes; give gangscale node groups of its own (found by gangscale.io/enabled and "
        "gangscale.io/<cluster>; `gangscale check --provider ...` names the groups both manage)",
    ]
    return CheckResult(
        "cluster-autoscaler", WARN, f"Cluster Autoscaler is running: {'; '.join(found)}", detail
    )


def check_control_plane(client: KubeClient, info: ServerInfo) -> CheckResult | None:
    """Feature gates of kube-scheduler/kube-apiserver, when they run as visible static pods (kubeadm, kind)."""
    if (info.minor or 0) < 35:
        return None
    try:
        pods = list_all(client, PODS, "kube-system", label_selector="tier=control-plane").items
    except KubeError as exc:
        if exc.status == 0:
            raise
        pods = []
    gates: dict[str, dict[str, bool]] = {}
    for p in pods:
        component = str(((p.get("metadata") or {}).get("labels") or {}).get("component") or "")
        if component in ("kube-scheduler", "kube-apiserver"):
            for _, cmd in _command_lines(p):
                gates.setdefault(component, {}).update(_gates(_flags(cmd).get("feature-gates")))
    if "kube-scheduler" not in gates:
        return CheckResult(
            "scheduler",
            INFO,
            "kube-scheduler's feature gates are not visible (managed control plane?)",
            [f"make sure kube-scheduler runs with --feature-gates={_scheduler_gates(info.minor)}"],
        )
    sched = gates["kube-scheduler"]
    needed = ["GenericWorkload"] + (["GangScheduling"] if (info.minor or 0) < 37 else [])
    off = [g for g in needed if not sched.get(g)]
    if (
        "GangScheduling" not in needed and sched.get("GangScheduling") is False
    ):  # beta, on by default, unless...
        off.append("GangScheduling")
    seen = ", ".join(f"{k}={str(v).lower()}" for k, v in sorted(sched.items())) or "none set"
    if off:
        return CheckResult(
            "scheduler",
            FAIL,
            f"kube-scheduler runs without {', '.join(off)}",
            [
                f"its --feature-gates: {seen}",
                "PodGroups are stored, but pods are scheduled one by one, without gang semantics",
                f"fix: {_enable_hint(info.minor)}",
            ],
        )
    return CheckResult(
        "scheduler",
        OK,
        f"kube-scheduler has {', '.join(needed)} on",
        [f"its --feature-gates: {seen}"],
    )


def check_iam_scope(provider: Any, cluster_name: str) -> CheckResult:
    """Discovered groups the shipped IAM policy would not let gangscale scale (not tagged as it asks)."""
    from cloud_adapters import CloudError
    from cloud_adapters.tags import own_tags_hint

    tag = own_tags_hint(cluster_name, cluster_in_arn=provider.name == "aws-eks")
    try:
        found = provider.discover()
    except CloudError as exc:
        return CheckResult(
            "iam-scope", WARN, f"could not discover {provider.name} node groups: {exc}"
        )
    names = sorted(g.name for g in found.groups)
    unscoped = sorted(set(getattr(provider, "iam_unscoped", ())) & set(names))
    if unscoped:
        return CheckResult(
            "iam-scope",
            WARN,
            f"{len(unscoped)} of {len(names)} {provider.name} node groups lack gangscale's "
            f"tags ({tag}): config/iam/{provider.name}.json denies scaling them: {', '.join(unscoped)}",
            [
                "they were found by --node-group-auto-discovery filters the IAM policy does not trust",
                f"fix: tag them {tag} (and their launch templates gangscale.io/cluster=<cluster>, for aws-fleet)",
            ],
        )
    if not names:
        filters = ", ".join(str(f) for f in getattr(provider, "filters", ())) or tag
        return CheckResult(
            "iam-scope",
            WARN,
            f"no {provider.name} node group matches the discovery tags ({filters})",
            [f"fix: tag gangscale's groups {tag}"],
        )
    return CheckResult(
        "iam-scope",
        OK,
        f"every {provider.name} node group gangscale scales is tagged {tag}",
        [f"groups: {', '.join(names)}"],
    )


def check_limits(cfg: Any, source: str | None) -> CheckResult:
    """The spending limits the controller applies with `cfg` (a ControllerConfig): the cluster-wide ceiling, the
    namespaces' default cap and the per-namespace caps; a warning when any is lifted (`unlimited`)."""
    from ..controller.config import UNLIMITED

    def cap_text(c: Any) -> str:
        nodes = UNLIMITED if c.max_nodes is None else f"{c.max_nodes}"
        dollars = UNLIMITED if c.max_dollars_per_hour is None else f"{c.max_dollars_per_hour:g}"
        return f"maxNodes {nodes}, maxDollarsPerHour {dollars}"

    ceiling = cfg.cluster_ceiling
    where = source or "the controller's built-in defaults (no --config)"
    detail = [
        f"read from {where}",
        f"defaultNamespaceCap: {cap_text(cfg.default_namespace_cap)}",
        *(f"namespaceCaps.{ns}: {cap_text(c)}" for ns, c in sorted(cfg.namespace_caps.items())),
    ]
    lifted = [
        name
        for name, value in (
            ("clusterCeiling.maxNodes", ceiling.max_nodes),
            ("clusterCeiling.maxGPUs", ceiling.max_gpus),
            ("clusterCeiling.maxDollarsPerHour", ceiling.max_dollars_per_hour),
            ("defaultNamespaceCap.maxNodes", cfg.default_namespace_cap.max_nodes),
            (
                "defaultNamespaceCap.maxDollarsPerHour",
                cfg.default_namespace_cap.max_dollars_per_hour,
            ),
        )
        if value is None
    ]
    summary = f"cluster ceiling in force: {ceiling.describe()}"
    if lifted:
        return CheckResult(
            "limits",
            WARN,
            f"{summary}; lifted: {', '.join(lifted)}",
            [
                *detail,
                (
                    "nothing stops gangscale buying without bound there: set a number unless "
                    "that is meant (docs/controller.md, Default caps and the cluster ceiling)"
                ),
            ],
        )
    return CheckResult("limits", OK, summary, detail)


WEBHOOK_CONFIGS = (
    ("mutating", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"),
    ("validating", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"),
)
WEBHOOK_SUFFIX = ".gangscale.io"  # validate.gangscale.io, gate.gangscale.io (config/deploy/webhook)
WEBHOOK_PROBE_SECONDS = 3.0


def _gangscale_hooks(client: KubeClient) -> dict[str, list[dict[str, Any]]]:
    """kind (mutating/validating) -> gangscale's webhooks installed in the cluster."""
    out: dict[str, list[dict[str, Any]]] = {}
    for kind, path in WEBHOOK_CONFIGS:
        items = client.get(path).get("items") or []
        out[kind] = [
            h
            for cfg in items
            for h in (cfg.get("webhooks") or [])
            if str(h.get("name", "")).endswith(WEBHOOK_SUFFIX)
        ]
    return out


def _probe_hook(client: KubeClient, hook: dict[str, Any]) -> str | None:
    """None when the hook's server answers /healthz over TLS with its caBundle, else why not."""
    import base64
    import ssl
    import urllib.parse
    import urllib.request

    cc = hook.get("clientConfig") or {}
    if not cc.get("caBundle"):
        return "caBundle is empty (cert-manager's cainjector, or `gangscale webhook --self-signed`, fills it)"
    svc = cc.get("service")
    try:
        if svc:  # through the API server's service proxy
            client.get(
                f"/api/v1/namespaces/{svc.get('namespace')}/services/https:{svc.get('name')}:"
                f"{svc.get('port', 443)}/proxy/healthz",
                timeout=WEBHOOK_PROBE_SECONDS,
            )
            return None
        ctx = ssl.create_default_context(cadata=base64.b64decode(cc["caBundle"]).decode())
        url = urllib.parse.urljoin(str(cc.get("url", "")), "/healthz")
        with urllib.request.urlopen(url, timeout=WEBHOOK_PROBE_SECONDS, context=ctx) as resp:  # noqa: S310 - https
            return None if resp.status == 200 else f"/healthz answered {resp.status}"
    except (KubeError, OSError, ValueError) as exc:
        return f"not reachable: {str(exc)[:160]}"


def check_webhooks(client: KubeClient) -> CheckResult:
    """Are gangscale's admission webhooks installed, and does their server answer?"""
    try:
        hooks = _gangscale_hooks(client)
    except KubeError as exc:
        return CheckResult("webhooks", WARN, f"cannot list webhook configurations: {exc}")
    installed = [k for k, hs in hooks.items() if hs]
    if not installed:
        return CheckResult(
            "webhooks",
            INFO,
            "gangscale's admission webhooks are not installed (optional)",
            ["install: the config/deploy/webhook kustomize component (docs/webhook.md)"],
        )
    problems = [
        f"{h.get('name')}: {why}"
        for hs in hooks.values()
        for h in hs
        if (why := _probe_hook(client, h))
    ]
    missing = [k for k in hooks if k not in installed]
    detail = [
        f"{k}: {', '.join(str(h.get('name')) for h in hooks[k])}" for k in installed
    ] + problems
    if missing:
        detail.append(f"no {' or '.join(missing)} gangscale webhook: install the whole component")
    if problems or missing:
        return CheckResult(
            "webhooks",
            WARN,
            "gangscale's admission webhooks are installed but "
            + ("not reachable" if problems else "incomplete"),
            detail,
        )
    return CheckResult(
        "webhooks", OK, "gangscale's admission webhooks are installed and answer", detail
    )


def check_ca_overlap(provider: Any) -> CheckResult | None:
    """Groups gangscale discovered that Cluster Autoscaler's auto-discovery tags also mark (after a discover())."""
    from cloud_adapters.tags import ENABLED_TAG

    if not hasattr(provider, "ca_managed"):
        return None
    both = sorted(provider.ca_managed)
    if not both:
        return CheckResult(
            "ca-overlap",
            OK,
            f"no {provider.name} node group gangscale scales carries Cluster "
            "Autoscaler's auto-discovery tags",
        )
    return CheckResult(
        "ca-overlap",
        WARN,
        f"Cluster Autoscaler also manages {len(both)} {provider.name} node groups gangscale "
        f"scales (they carry {CA_TAGS}): {', '.join(both)}",
        [
            "both would act on them: CA adds nodes pod by pod for gangs gangscale sizes whole, and scales down "
            "nodes gangscale just bought",
            f"fix: remove {ENABLED_TAG} from these groups (gangscale finds them by its own tags), or keep CA off "
            "them with a narrower --node-group-auto-discovery / --nodes on CA; to hand a group back to CA, remove "
            "gangscale's tags instead",
        ],
    )


def run_checks(
    client: KubeClient,
    *,
    namespace: str | None = None,
    nodegroups: Sequence[str] | None = None,
    groups: Sequence[NodeGroup] | None = None,
) -> CheckReport:
    """`groups`: the catalog's node groups (`--nodegroups`), to check the DaemonSets against."""
    report = CheckReport(client.display_host, client.context)
    try:
        info = discover(client)
    except KubeError as exc:
        report.unreachable = exc.status == 0 or exc.status == 401
        report.results.append(CheckResult("server", FAIL, f"cannot read the API server: {exc}"))
        return report
    apis = choose_gang_apis(info)
    report.results.append(check_server(info))
    report.results.append(check_gang_apis(info, apis))
    steps = (
        lambda: check_maturity(info, apis),
        lambda: check_pod_field(client, info, apis, namespace or "default"),
        lambda: check_control_plane(client, info),
        lambda: check_rbac(client, apis, namespace),
        lambda: check_cluster_autoscaler(client, nodegroups),
        lambda: check_webhooks(client),
        lambda: CheckResult("daemonsets", *check_daemonsets(client, groups)),
    )
    for step in steps:
        try:
            result = step()
        except KubeError as exc:  # the server went away in the middle: say so, keep going
            report.unreachable = report.unreachable or exc.status == 0
            result = CheckResult("api", FAIL, f"request failed: {exc}")
        if result is not None:
            report.results.append(result)
    return report
