"""A model of kube-scheduler: what it does with the nodes a plan buys.

Never imports Kubernetes or boto3; the solver does not import it. Entry point: `simulate`.
"""

from .config import (
    DEFAULT_SCHEDULER,
    Profile,
    SchedulerConfig,
    SchedulerConfigError,
    add_scheduler_config_argument,
    default_config,
    load_scheduler_config,
    parse_scheduler_config,
    scheduler_config_from_args,
    strategy_config,
)
from .simulate import (
    GangOutcome,
    SimNode,
    SimResult,
    arriving_node,
    gang_mode,
    nodes_from_views,
    planned_nodes,
    simulate,
    simulate_iter,
    simulate_seeds,
)

__all__ = [
    "DEFAULT_SCHEDULER",
    "GangOutcome",
    "Profile",
    "SchedulerConfig",
    "SchedulerConfigError",
    "SimNode",
    "SimResult",
    "add_scheduler_config_argument",
    "arriving_node",
    "default_config",
    "gang_mode",
    "load_scheduler_config",
    "nodes_from_views",
    "parse_scheduler_config",
    "planned_nodes",
    "scheduler_config_from_args",
    "simulate",
    "simulate_iter",
    "simulate_seeds",
    "strategy_config",
]
