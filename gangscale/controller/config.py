"""Controller settings: a YAML file (config/deploy/config.yaml) overridable by flags.

Validated with pydantic so a typo stops the controller at start-up with the
field named, instead of silently running with a default; no number may be
infinite or NaN (`resyncSeconds: .inf` would make the loop sleep forever).
The file may say `apiVersion: gangscale.io/v1alpha1` / `kind: ControllerConfig`
(an unversioned file is read as v1alpha1), and every `*Seconds` key takes a
number of seconds or a duration such as `30s`, `15m`, `1h30m` or `500ms`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from cloud_adapters.tags import parse_auto_discovery

from ..loader import InputError, read_documents
from ..parse import (  # the mutating hook never gates them, nor gangscale's own (`stateNamespace`)
    SYSTEM_NAMESPACES as SYSTEM_NAMESPACES,
)
from .keep import KeepRule, KeepSettings

Mode = Literal["dry-run", "enforce"]
# which gangs wait behind gangscale.io/capacity (docs/scheduling.md, "Which mode"): `opt-out` (the default) gates every
# gang pod outside the system namespaces and the namespaces labelled gangscale.io/gate-mode=false; `opt-in` only
# namespaces (or gangs) that ask; `all` holds every gated gang while the hook gates as under opt-in; `off` none
GateMode = Literal["off", "opt-in", "all", "opt-out"]
DEFAULT_GATE_MODE: GateMode = "opt-out"
API_VERSION: Final = "gangscale.io/v1alpha1"
KIND: Final = "ControllerConfig"

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(value: object) -> object:
    """`30s`, `15m`, `1h30m`, `500ms` → seconds; anything else goes on to pydantic's float check unchanged."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        try:
            return float(text)
        except ValueError:
            raise ValueError(
                f"{value!r} is not a number of seconds or a duration like 30s, 15m, 1h"
            ) from None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


Seconds = Annotated[float, BeforeValidator(parse_duration)]


# the one way to lift a cap or the ceiling: written on purpose, never by omission
UNLIMITED = "unlimited"
# The shipped defaults (config/deploy/config.yaml, the chart's values): a config that says nothing about caps gets
# these, never "no limit" (docs/controller.md, Default caps and the cluster ceiling).
DEFAULT_NAMESPACE_NODES = 64
DEFAULT_NAMESPACE_DOLLARS_PER_HOUR = 2000.0
DEFAULT_CEILING_NODES = 256
DEFAULT_CEILING_GPUS = 512
DEFAULT_CEILING_DOLLARS_PER_HOUR = 5000.0


def parse_limit(value: object) -> object:
    """`unlimited` -> None (no limit of that kind); a missing value (YAML `null`, an empty key) is refused, so a
    limit is only ever lifted by writing `unlimited`; anything else goes on to pydantic's number check."""
    if value is None:
        raise ValueError(f"no value: write a number, or {UNLIMITED!r} to lift the limit")
    if isinstance(value, str) and value.strip().lower() == UNLIMITED:
        return None
    return value


Limit = Annotated[int | None, BeforeValidator(parse_limit)]
DollarLimit = Annotated[float | None, BeforeValidator(parse_limit)]


class NamespaceCap(BaseModel):
    """One namespace's caps on the capacity held or planned for its gangs; a key not written keeps its default
    (maxNodes 64, maxDollarsPerHour 2000: the shipped caps), `unlimited` lifts it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)
    max_nodes: Limit = Field(default=DEFAULT_NAMESPACE_NODES, alias="maxNodes", ge=0)
    max_dollars_per_hour: DollarLimit = Field(
        default=DEFAULT_NAMESPACE_DOLLARS_PER_HOUR, alias="maxDollarsPerHour", ge=0
    )
    # admission only (docs/webhook.md): unset = no cap of that kind (the cluster ceiling still holds); maxGangPods
    # falls back to the top-level one
    max_gpus: int | None = Field(default=None, alias="maxGPUs", ge=0)
    max_gang_pods: int | None = Field(default=None, alias="maxGangPods", ge=1)

    @field_validator("max_gpus", "max_gang_pods", mode="before")
    @classmethod
    def _unlimited(cls, value: object) -> object:
        return None if isinstance(value, str) and value.strip().lower() == UNLIMITED else value


class ClusterCeiling(BaseModel):
    """`clusterCeiling:` the most the owned node groups may hold together, counted on their desired sizes plus
    what the plan buys: nodes, GPUs and $/h (None: `unlimited`, lifted on purpose)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)
    max_nodes: Limit = Field(default=DEFAULT_CEILING_NODES, alias="maxNodes", ge=0)
    max_gpus: Limit = Field(default=DEFAULT_CEILING_GPUS, alias="maxGPUs", ge=0)
    max_dollars_per_hour: DollarLimit = Field(
        default=DEFAULT_CEILING_DOLLARS_PER_HOUR, alias="maxDollarsPerHour", ge=0
    )

    def describe(self) -> str:
        """`maxNodes 256, maxGPUs 512, maxDollarsPerHour 5000` (`unlimited` where lifted)."""

        def text(v: float | None) -> str:
            return UNLIMITED if v is None else f"{v:g}"

        return (
            f"maxNodes {text(self.max_nodes)}, maxGPUs {text(self.max_gpus)}, "
            f"maxDollarsPerHour {text(self.max_dollars_per_hour)}"
        )


RuleAction = Literal["deny", "warn", "off"]


class AdmissionRules(BaseModel):
    """What each validating rule does when it fires: deny the request, warn (admit with a warning), or off."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    cross_namespace_group: RuleAction = Field(default="deny", alias="crossNamespaceGroup")
    min_count: RuleAction = Field(default="deny", alias="minCount")
    namespace_caps: RuleAction = Field(default="deny", alias="namespaceCaps")
    no_node_group_fits: RuleAction = Field(default="deny", alias="noNodeGroupFits")
    gang_feature_off: RuleAction = Field(default="warn", alias="gangFeatureOff")
    unreadable: RuleAction = Field(default="deny", alias="unreadable")


class AdmissionConfig(BaseModel):
    """`admission:` of the config file: the webhook's rules (version 1; a new meaning gets a new version)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)
    version: Literal[1] = 1
    rules: AdmissionRules = Field(default_factory=AdmissionRules)
    failure_policy: Literal["Ignore", "Fail"] = Field(
        default="Ignore", alias="failurePolicy"
    )  # validating hook
    timeout_seconds: int = Field(default=5, alias="timeoutSeconds", ge=1, le=5)
    gate: str = "gangscale.io/capacity"
    # pods another controller gates (Kueue) are left alone unless their gate is listed here
    # a pod with another scheduling gate, or with a label in foreignGateLabels (Kueue's queue label: Kueue
    # gates it, perhaps after this hook ran), is left alone unless that gate or label is in gateAlongside
    foreign_gate_labels: list[str] = Field(
        default_factory=lambda: ["kueue.x-k8s.io/queue-name"], alias="foreignGateLabels"
    )
    gate_alongside: list[str] = Field(default_factory=list, alias="gateAlongside")
    # apiVersions serving gang objects; None: ask the API server at start-up (discovery)
    served_gang_apis: list[str] | None = Field(default=None, alias="servedGangAPIs")
    max_body_bytes: int = Field(default=3 * 1024 * 1024, alias="maxBodyBytes", ge=1024)


class ControllerConfig(BaseModel):
    """Every knob of the running loop, in the camelCase of the config file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    api_version: Literal["gangscale.io/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["ControllerConfig"] = KIND
    mode: Mode = "dry-run"
    # loop
    batch_window_seconds: Seconds = Field(default=0.5, alias="batchWindowSeconds", ge=0)
    max_batch_delay_seconds: Seconds = Field(default=2.0, alias="maxBatchDelaySeconds", ge=0)
    resync_seconds: Seconds = Field(default=30.0, alias="resyncSeconds", gt=0)
    solver_time_limit_seconds: Seconds = Field(default=5.0, alias="solverTimeLimitSeconds", gt=0)
    # the cluster's KubeSchedulerConfiguration the plan is checked against (docs/scheduling.md); none: defaults
    scheduler_config_file: str | None = Field(default=None, alias="schedulerConfigFile")
    # observe: each plan is checked and repaired against the scheduler model, with the reservations and the held
    # gangs in it, and the caps counted on what it buys (docs/scheduling.md); off: the solver's plan alone
    scheduler_model: Literal["observe", "off"] = Field(default="observe", alias="schedulerModel")
    # provisioning lifecycle
    provisioning_deadline_seconds: Seconds = Field(
        default=900.0, alias="provisioningDeadlineSeconds", gt=0
    )
    launch_failure_backoff_seconds: Seconds = Field(
        default=300.0, alias="launchFailureBackoffSeconds", ge=0
    )
    cancel_grace_seconds: Seconds = Field(default=60.0, alias="cancelGraceSeconds", ge=0)
    # launches still on their way this long after their gang's booking, two or more, with as long left before the
    # deadline, are bought again once and the gang binds on whichever nodes are Ready first (docs/controller.md,
    # Late launches): a gang waits for the slowest of its launches, and one more chance at each cuts that tail
    # (docs/simulate.md); 0: never
    late_launch_seconds: Seconds = Field(default=240.0, alias="lateLaunchSeconds", ge=0)
    # the plan already keeps every empty node a pending gang can use, so this only bets on gangs not yet arrived;
    # a long grace bills every empty node for sure and saves at most one launch (docs/controller.md, Scale-down),
    # so the default only guards a pod not yet seen
    empty_node_grace_seconds: Seconds = Field(default=10.0, alias="emptyNodeGraceSeconds", ge=0)
    # how long an empty node is kept for gangs not yet arrived (keep.py, docs/controller.md, Scale-down):
    # ski-rental keeps it while that costs less than launching again for the fitting work likely to come, at most
    # emptyNodeKeepRatio x the cost of the best choice in hindsight; grace keeps every node emptyNodeGraceSeconds.
    # Unset: grace when the file sets emptyNodeGraceSeconds (its fixed grace, as before), else ski-rental
    empty_node_keep: KeepRule | None = Field(default=None, alias="emptyNodeKeep")
    empty_node_keep_ratio: float = Field(default=11.0, alias="emptyNodeKeepRatio", ge=2, le=100)
    empty_node_max_keep_seconds: Seconds = Field(
        default=3600.0, alias="emptyNodeMaxKeepSeconds", ge=0
    )
    # fitting arrivals are counted over this long; a group's boot time until one is measured on its nodes
    empty_node_arrival_window_seconds: Seconds = Field(
        default=3600.0, alias="emptyNodeArrivalWindowSeconds", gt=0
    )
    empty_node_boot_seconds: Seconds = Field(default=120.0, alias="emptyNodeBootSeconds", gt=0)
    # what starting a gang an hour sooner is worth, in the relaunch cost the keep is weighed against
    empty_node_wait_dollars_per_hour: float = Field(
        default=4.0, alias="emptyNodeWaitDollarsPerHour", ge=0, le=1e6
    )
    # buying ahead (keep.py, docs/controller.md, Buying ahead): where the keep rule would keep one more empty node
    # of a group, one is bought for the gangs likely to come, up to this many per group empty or on their way
    # (0: never), while the nodes bought ahead that no gang has used cost at most the dollars per hour below
    empty_node_buy_ahead: int = Field(default=4, alias="emptyNodeBuyAhead", ge=0, le=1000)
    empty_node_buy_ahead_max_dollars_per_hour: float = Field(
        default=20.0, alias="emptyNodeBuyAheadMaxDollarsPerHour", ge=0, le=1e6
    )
    orphan_grace_seconds: Seconds = Field(
        default=600.0, alias="orphanGraceSeconds", ge=0
    )  # aws-fleet janitor
    scale_down: bool = Field(default=True, alias="scaleDown")
    # gate mode (docs/scheduling.md): which gangs wait behind gangscale.io/capacity until their capacity is Ready
    gate_mode: GateMode = Field(default=DEFAULT_GATE_MODE, alias="gateMode")
    # narrow each released pod's required node affinity to its planned node in the patch that lifts the gate
    # (KEP-3521); false: lift only, and the scheduler's scoring decides where the pods go
    gate_narrowing: bool = Field(default=True, alias="gateNarrowing")
    # a pod released narrowed whose node is gone or NotReady this long is deleted, so its owner recreates it
    narrowed_node_grace_seconds: Seconds = Field(
        default=120.0, alias="narrowedNodeGraceSeconds", ge=0
    )
    # the webhook lifts every gangscale.io/capacity gate once the controller's lease has been stale this long, so a
    # gate never outlives gangscale (docs/webhook.md, Fail-open); 0: never
    gate_fail_open_seconds: Seconds = Field(default=600.0, alias="gateFailOpenSeconds", ge=0)
    # fairness and safety
    max_gang_pods: int = Field(default=1024, alias="maxGangPods", ge=1)
    max_gang_gpus: int = Field(default=512, alias="maxGangGPUs", ge=0)
    namespace_caps: dict[str, NamespaceCap] = Field(default_factory=dict, alias="namespaceCaps")
    default_namespace_cap: NamespaceCap = Field(
        default_factory=NamespaceCap, alias="defaultNamespaceCap"
    )
    cluster_ceiling: ClusterCeiling = Field(default_factory=ClusterCeiling, alias="clusterCeiling")
    ageing_seconds: Seconds = Field(default=600.0, alias="ageingSeconds", gt=0)
    # status (docs/controller.md): an Event's repeats are written at most this often (CA: one per 5 minutes),
    # and CA-style TriggeredScaleUp/NotTriggerScaleUp events go to at most this many pending pods per gang
    event_refresh_seconds: Seconds = Field(default=300.0, alias="eventRefreshSeconds", ge=0)
    pod_events_per_gang: int = Field(default=10, alias="podEventsPerGang", ge=0)
    # the gangscale.io/CapacityReady condition on PodGroup status (server-side apply, field manager gangscale)
    podgroup_conditions: bool = Field(default=True, alias="podGroupConditions")
    # Kueue decides admission: a Workload it has not admitted is waiting-for-admission; true plans it anyway
    plan_unadmitted: bool = Field(default=False, alias="planUnadmitted")
    # cluster
    node_group_label: str = Field(default="gangscale.io/node-group", alias="nodeGroupLabel")
    watch_namespace: str | None = Field(default=None, alias="watchNamespace")
    state_namespace: str = Field(default="gangscale-system", alias="stateNamespace")
    state_configmap: str = Field(default="gangscale-state", alias="stateConfigMap")
    lease_name: str = Field(default="gangscale-leader", alias="leaseName")
    lease_duration_seconds: Seconds = Field(default=15.0, alias="leaseDurationSeconds", gt=0)
    lease_renew_seconds: Seconds = Field(default=5.0, alias="leaseRenewSeconds", gt=0)
    # cloud
    provider: str = "simulated"
    region: str | None = None
    cluster_name: str | None = Field(default=None, alias="clusterName")
    # CA-style `asg:tag=<key>[=<value>],...` filters; empty: gangscale's own tags (cloud_adapters/tags.py)
    node_group_auto_discovery: list[str] = Field(
        default_factory=list, alias="nodeGroupAutoDiscovery"
    )
    aws_endpoint_url: str | None = Field(default=None, alias="awsEndpointUrl")
    nodegroups: str | None = None  # catalog seeding the simulated provider
    metrics_address: str = Field(default="0.0.0.0:8080", alias="metricsAddress")
    # /healthz and /readyz on their own address; None: on metricsAddress with /metrics. Set, /metrics alone stays on
    # metricsAddress, which may then be loopback (127.0.0.1:8080) while the kubelet's probes reach the pod's IP
    health_address: str | None = Field(default=None, alias="healthAddress")
    # admission webhook (`gangscale webhook`, docs/webhook.md)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)

    @field_validator("node_group_auto_discovery")
    @classmethod
    def _filters_parse(cls, specs: list[str]) -> list[str]:
        for spec in specs:
            parse_auto_discovery(spec)  # TagError (a ValueError): pydantic names the field
        return specs

    def keep_settings(self) -> KeepSettings:
        """The empty-node keep rule's settings (keep.py), the rule resolved as `emptyNodeKeep` says."""
        rule = self.empty_node_keep
        if rule is None:
            explicit = "empty_node_grace_seconds" in self.model_fields_set
            rule = KeepRule.GRACE if explicit else KeepRule.SKI_RENTAL
        return KeepSettings(
            rule,
            self.empty_node_keep_ratio,
            self.empty_node_max_keep_seconds,
            self.empty_node_arrival_window_seconds,
            self.empty_node_boot_seconds,
            self.empty_node_grace_seconds,
            self.empty_node_wait_dollars_per_hour,
            self.provisioning_deadline_seconds,
            self.empty_node_buy_ahead,
            self.empty_node_buy_ahead_max_dollars_per_hour,
        )

    def cap_for(self, namespace: str) -> NamespaceCap:
        return self.namespace_caps.get(namespace, self.default_namespace_cap)

    def gang_size_cap(self, namespace: str) -> int:
        """Largest minCount a gang of `namespace` may ask for (its cap's maxGangPods, else the global one)."""
        cap = self.cap_for(namespace).max_gang_pods
        return cap if cap is not None else self.max_gang_pods


def load_config(path: str | Path | None) -> ControllerConfig:
    if path is None:
        return ControllerConfig()
    docs = read_documents(path)  # the loader's alias budget and depth limit; one-line InputError
    if len(docs) > 1:
        raise InputError(f"{path}: expected one YAML document, got {len(docs)}")
    raw = docs[0] if docs else {}
    try:
        cfg = ControllerConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InputError(f"{path}: {where}: {first['msg']}") from None
    if (
        cfg.scheduler_config_file
    ):  # a bad file is refused at start, not per pass (gate mode reads it too)
        from ..realize import scheduler_model_from

        try:
            scheduler_model_from(cfg.scheduler_config_file)
        except InputError as exc:
            raise InputError(f"{path}: schedulerConfigFile: {exc}") from None
    return cfg
