"""Errors of the live-cluster layer.

They subclass the loader's `InputError` on purpose: a cluster that cannot be
read is, to the CLI, an input that cannot be read (one sentence, exit 2).
"""

from __future__ import annotations

from cloud_adapters.redact import redact_text

from ..loader import InputError


class KubeError(InputError):
    """The API server refused, failed or could not be reached (status 0).

    The message is redacted here, once for every caller: it may quote the
    server URL (user:password@, ?access_token=) or an exec plugin's output.
    """

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(redact_text(message))
        self.status = status
        self.reason = reason


class GoneError(KubeError):
    """410 Gone: the resourceVersion or continue token is too old; list again."""

    def __init__(self, message: str = "resource version too old") -> None:
        super().__init__(message, 410, "Expired")


class KubeConfigError(KubeError):
    """No usable kubeconfig or in-cluster configuration."""
