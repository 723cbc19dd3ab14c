"""Controller settings: a YAML file (config/deploy/config.yaml) overridable by flags.

Validated with pydantic so a typo stops the controller at start-up with the
field named, instead of silently running with a default; no number may be
infinite or NaN (`resyncSeconds: .inf` would make the loop sleep forever).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..loader import InputError

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
    # the cluster's KubeSchedulerConfiguration the plan is checked against (docs/scheduling.md); none: defaults
    scheduler_config_file: str | None = Field(default=None, alias="schedulerConfigFile")
    # off by default for now: namespace caps, ageing and reservations are decided on the solver's plan, and observe
    # mode's repair can buy for other gangs than those (docs/scheduling.md)
    scheduler_model: Literal["observe", "off"] = Field(default="off", alias="schedulerModel")
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
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: invalid YAML: {exc}") from None
    try:
        cfg = ControllerConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InputError(f"{path}: {where}: {first['msg']}") from None
    if cfg.scheduler_config_file and cfg.scheduler_model == "observe":  # a bad file is refused at start, not per pass
        from ..realize import scheduler_model_from

        try:
            scheduler_model_from(cfg.scheduler_config_file)
        except InputError as exc:
            raise InputError(f"{path}: schedulerConfigFile: {exc}") from None
    return cfg
