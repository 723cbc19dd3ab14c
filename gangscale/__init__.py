"""gangscale: a gang-aware scale planner for Kubernetes node groups."""

__version__ = "0.1.0"
