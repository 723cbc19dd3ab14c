"""`gangscale run` flags: argparse only, so building the CLI never imports the Kubernetes client."""

from __future__ import annotations

from typing import Any

from cloud_adapters.registry import PROVIDERS


def add_run_command(sub: Any) -> None:
    p = sub.add_parser(
        "run", help="run the controller (as in the Deployment): watch, plan, scale whole gangs"
    )
    p.add_argument(
        "--config", metavar="FILE", help="controller config (YAML); flags below override it"
    )
    p.add_argument(
        "--mode", choices=("dry-run", "enforce"), help="dry-run (default) plans and reports only"
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument(
        "--provider",
        choices=PROVIDERS,
        help="node-group provider (overrides the config's provider)",
    )
    p.add_argument("--nodegroups", metavar="FILE", help="catalog seeding the simulated provider")
    p.add_argument(
        "--simulated-state", metavar="FILE", help="simulated provider: persist its state here"
    )
    p.add_argument("--region", help="AWS region (overrides the config's region)")
    p.add_argument("--cluster-name", help="cluster name the node groups are discovered by")
    p.add_argument(
        "--node-group-auto-discovery",
        action="append",
        default=None,
        metavar="asg:tag=KEY[=VALUE],...",
        help="discover the groups carrying all these tags, as Cluster Autoscaler's flag (repeatable, "
        "replaces the config's; default: gangscale.io/cluster=<cluster>, or gangscale.io/enabled "
        "with gangscale.io/<cluster>)",
    )
    p.add_argument("--aws-endpoint-url", metavar="URL", help="send AWS calls here (tests, moto)")
    p.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz, /readyz here (default 0.0.0.0:8080)",
    )
    p.add_argument(
        "--health-address",
        metavar="HOST:PORT",
        help="serve /healthz and /readyz here instead, leaving /metrics alone on --metrics-address "
        "(which may then be 127.0.0.1:PORT)",
    )
    p.add_argument(
        "--identity", default=None, help="leader-election identity (default: $POD_NAME or hostname)"
    )
    p.add_argument(
        "--log-level", default="info", help="debug, info, warning or error (default info)"
    )


STATUS_OUTPUTS = ("table", "markdown", "json", "yaml")


def add_status_command(sub: Any) -> None:
    from ..kube.flags import add_kube_flags  # argparse only

    p = sub.add_parser(
        "status",
        help="every gang's provisioning state (or its last plan's decision), age, nodes "
        "requested and deadline; `status nodegroups`: every node group's target, ready, "
        "upcoming, min and max size and backoff (read-only, from the controller's "
        "ConfigMaps)",
    )
    p.add_argument(
        "view",
        nargs="?",
        choices=("gangs", "nodegroups"),
        default="gangs",
        help="gangs (default) or nodegroups",
    )
    add_kube_flags(p)
    p.add_argument(
        "--state-namespace",
        default="gangscale-system",
        help="namespace of the controller's state ConfigMap (default gangscale-system)",
    )
    p.add_argument(
        "--state-configmap",
        default="gangscale-state",
        help="name of the controller's state ConfigMap (default gangscale-state)",
    )
    p.add_argument(
        "--status-configmap",
        default="gangscale-status",
        help="name of the status ConfigMap the leader publishes after each pass (default gangscale-status)",
    )
    p.add_argument(
        "--state",
        action="append",
        default=None,
        metavar="STATE[,STATE...]",
        help="only gangs in these states: a record's (provisioning, running, timed-out, ...) or a plan's "
        "decision (infeasible, below-quorum, invalid, scale-up, ...); repeatable",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=STATUS_OUTPUTS,
        default=None,
        help="output format (default: table on a terminal, json otherwise)",
    )
    p.add_argument("--output-file", metavar="FILE", help="write the status here instead of stdout")


def add_ungate_command(sub: Any) -> None:
    from ..kube.flags import add_kube_flags  # argparse only

    p = sub.add_parser(
        "ungate",
        help="lift the gangscale.io/capacity scheduling gate from every pod that has it "
        "(before uninstalling gate mode; the Helm chart's pre-delete hook runs it)",
    )
    add_kube_flags(p)
    p.add_argument("--dry-run", action="store_true", help="list the gated pods, change nothing")
    p.add_argument(
        "--delete-mutating-webhook",
        metavar="NAME",
        help="first delete this MutatingWebhookConfiguration (gangscale's gating hook), so no pod is "
        "gated after the lift (the Helm pre-delete hook passes `gangscale` when the webhook is on)",
    )
