"""Live cluster: discovery, paginated list + watch into a local cache, prerequisites check, dump.

Reads raw JSON (never the client's typed models) so one `kubernetes` client
release serves 1.35, 1.36 and 1.37 servers; produces plain dicts for
`gangscale.ingest.ingest()`. Names load lazily: importing this package does not
import `kubernetes`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "KubeClient": "client",
    "WatchStream": "client",
    "connect": "client",
    "KubeError": "errors",
    "GoneError": "errors",
    "KubeConfigError": "errors",
    "ResourceRef": "refs",
    "NODES": "refs",
    "PODS": "refs",
    "ServerInfo": "discovery",
    "GangApis": "discovery",
    "discover": "discovery",
    "choose_gang_apis": "discovery",
    "list_all": "lister",
    "ListResult": "lister",
    "Informer": "informer",
    "ClusterCache": "informer",
    "Backoff": "informer",
    "InformerStats": "informer",
    "LiveCluster": "live",
    "read_cluster": "live",
    "CheckReport": "check",
    "CheckResult": "check",
    "run_checks": "check",
    "dump_document": "dump",
    "redact": "dump",
    "in_scope": "scope",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gangscale.kube' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
