"""Controller settings: a YAML file (config/deploy/config.yaml) overridable by flags.

Validated with pydantic so a typo stops the controller at start-up with the
field named, instead of silently running with a default; no number may be
infinite or NaN (`resyncSeconds: .inf` would make the loop sleep forever).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..loader import InputError, read_documents

Mode = Literal["dry-run", "enforce"]


class NamespaceCap(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)
    max_nodes: int | None = Field(default=None, alias="maxNodes", ge=0)
    max_dollars_per_hour: float | None = Field(default=None, alias="maxDollarsPerHour", ge=0)


class ControllerConfig(BaseModel):
    """Every knob of the running loop, in the camelCase of the config file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    mode: Mode = "dry-run"
    # loop
    batch_window_seconds: float = Field(default=0.5, alias="batchWindowSeconds", ge=0)
    max_batch_delay_seconds: float = Field(default=2.0, alias="maxBatchDelaySeconds", ge=0)
    resync_seconds: float = Field(default=30.0, alias="resyncSeconds", gt=0)
    solver_time_limit_seconds: float = Field(default=5.0, alias="solverTimeLimitSeconds", gt=0)
    # provisioning lifecycle
    provisioning_deadline_seconds: float = Field(default=900.0, alias="provisioningDeadlineSeconds", gt=0)
    launch_failure_backoff_seconds: float = Field(default=300.0, alias="launchFailureBackoffSeconds", ge=0)
    cancel_grace_seconds: float = Field(default=60.0, alias="cancelGraceSeconds", ge=0)
    empty_node_grace_seconds: float = Field(default=600.0, alias="emptyNodeGraceSeconds", ge=0)
    orphan_grace_seconds: float = Field(default=600.0, alias="orphanGraceSeconds", ge=0)  # aws-fleet janitor
    scale_down: bool = Field(default=True, alias="scaleDown")
    # fairness and safety
    max_gang_pods: int = Field(default=1024, alias="maxGangPods", ge=1)
    max_gang_gpus: int = Field(default=512, alias="maxGangGPUs", ge=0)
    namespace_caps: dict[str, NamespaceCap] = Field(default_factory=dict, alias="namespaceCaps")
    default_namespace_cap: NamespaceCap = Field(default_factory=NamespaceCap, alias="defaultNamespaceCap")
    ageing_seconds: float = Field(default=600.0, alias="ageingSeconds", gt=0)
    # Kueue decides admission: a Workload it has not admitted is waiting-for-admission; true plans it anyway
    plan_unadmitted: bool = Field(default=False, alias="planUnadmitted")
    # cluster
    node_group_label: str = Field(default="gangscale.io/node-group", alias="nodeGroupLabel")
    watch_namespace: str | None = Field(default=None, alias="watchNamespace")
    state_namespace: str = Field(default="gangscale-system", alias="stateNamespace")
    state_configmap: str = Field(default="gangscale-state", alias="stateConfigMap")
    lease_name: str = Field(default="gangscale-leader", alias="leaseName")
    lease_duration_seconds: float = Field(default=15.0, alias="leaseDurationSeconds", gt=0)
    lease_renew_seconds: float = Field(default=5.0, alias="leaseRenewSeconds", gt=0)
    # cloud
    provider: str = "simulated"
    region: str | None = None
    cluster_name: str | None = Field(default=None, alias="clusterName")
    aws_endpoint_url: str | None = Field(default=None, alias="awsEndpointUrl")
    nodegroups: str | None = None  # catalog seeding the simulated provider
    metrics_address: str = Field(default="0.0.0.0:8080", alias="metricsAddress")

    def cap_for(self, namespace: str) -> NamespaceCap:
        return self.namespace_caps.get(namespace, self.default_namespace_cap)


def load_config(path: str | Path | None) -> ControllerConfig:
    if path is None:
        return ControllerConfig()
    docs = read_documents(path)  # the loader's alias budget and depth limit; one-line InputError
    if len(docs) > 1:
        raise InputError(f"{path}: expected one YAML document, got {len(docs)}")
    raw = docs[0] if docs else {}
    try:
        return ControllerConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InputError(f"{path}: {where}: {first['msg']}") from None
