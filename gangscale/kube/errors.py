"""Errors of the live-cluster layer.

They subclass the loader's `InputError` on purpose: a cluster that cannot be
read is, to the CLI, an input that cannot be read (one sentence, exit 2).
"""

from __future__ import annotations

from ..loader import InputError


class KubeError(InputError):
    """The API server refused, failed or could not be reached (status 0)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class GoneError(KubeError):
    """410 Gone: the resourceVersion or continue token is too old; list again."""

    def __init__(self, message: str = "resource version too old") -> None:
        super().__init__(message, 410, "Expired")


class KubeConfigError(KubeError):
    """No usable kubeconfig or in-cluster configuration."""
