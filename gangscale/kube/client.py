"""A thin raw-JSON client over the official `kubernetes` package.

The official client brings kubeconfig and in-cluster loading, every auth
plugin (tokens, client certs, exec plugins such as `aws eks get-token`) and its
urllib3 pool; its typed models do not serve API versions newer than the client
(scheduling.k8s.io/v1beta1 on a 1.37 server, CRDs), so every body here is read
as raw JSON into plain dicts. One client release then serves 1.35-1.37 servers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import urllib3
from kubernetes import config as kconfig
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config as _kube_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.exec_provider import ExecProvider

from cloud_adapters.redact import install_log_redaction, redact_url

from .errors import GoneError, KubeConfigError, KubeError

USER_AGENT = "gangscale (kubernetes-python)"
Query = Mapping[str, str]


def _status_message(body: Any) -> tuple[str, str]:
    """(message, reason) of a Kubernetes Status body, or of whatever came back."""
    if isinstance(body, bytes):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body[:200].decode("utf-8", "replace").strip(), ""
    if isinstance(body, Mapping):
        return str(body.get("message") or ""), str(body.get("reason") or "")
    return str(body or "")[:200], ""


MAX_EVENT_BYTES = 64 * 2**20  # far above the API server's own request limits for one object


class WatchStream:
    """The events of one watch response, parsed line by line.

    `close()` may be called from another thread: it ends a read that is blocked
    waiting for the next event, which is how an informer stops promptly.
    """

    def __init__(
        self,
        resp: urllib3.BaseHTTPResponse,
        where: str,
        on_malformed: Callable[[bytes], None] | None = None,
    ) -> None:
        self._resp = resp
        self._where = where
        self._closed = False
        self._on_malformed = on_malformed
        self.malformed = 0  # lines that were not a JSON event object

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            event = None
        if isinstance(event, dict):
            return event
        self.malformed += 1
        if self._on_malformed is not None:
            self._on_malformed(line)
        return None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buf = bytearray()
        try:
            for chunk in self._resp.stream(64 * 1024, decode_content=True):
                buf += chunk
                while (nl := buf.find(b"\n")) >= 0:
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    if line.strip() and (event := self._parse(line)) is not None:
                        yield event
                if len(buf) > MAX_EVENT_BYTES:  # no newline in sight: a broken server, not an event
                    raise ValueError(f"an event line exceeded {MAX_EVENT_BYTES} bytes")
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if self._closed:
                return
            raise KubeError(f"watch {self._where}: stream broken: {exc}") from None
        if buf.strip() and not self._closed and (event := self._parse(bytes(buf))) is not None:
            yield event  # a last event without its newline

    def close(self) -> None:
        self._closed = True
        try:
            shutdown = getattr(self._resp, "shutdown", None)  # urllib3 >= 2.3 unblocks a read
            if shutdown is not None:
                shutdown()
            self._resp.close()
            self._resp.release_conn()
        except Exception:  # noqa: BLE001 - closing a dead socket must not fail the caller
            pass


class KubeClient:
    """GET/POST raw JSON, and watch streams, with the official client's auth."""

    def __init__(
        self, api_client: ApiClient, *, context: str | None = None, timeout: float = 30.0
    ) -> None:
        self._api = api_client
        self.context = context
        self.timeout = timeout

    @property
    def host(self) -> str:
        """The server URL as configured: for requests only, never for output (see `display_host`)."""
        return str(self._api.configuration.host)

    @property
    def display_host(self) -> str:
        """The server URL without user:password@ or credential query parameters, for output and logs."""
        return redact_url(self.host)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a pool of dead sockets must not fail
            self._api.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ calls

    def _request(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: Any,
        timeout: float | tuple[float, float] | None,
        content_type: str = "application/json",
    ) -> urllib3.BaseHTTPResponse:
        headers = {
            "Accept": "application/json",
            "Content-Type": content_type,
            "User-Agent": USER_AGENT,
        }
        params = list((query or {}).items())
        try:
            # call_api() would do the same, but it crashes on TLS errors (it
            # decodes a body that is None); doing its two steps here avoids that.
            self._api.update_params_for_auth(headers, params, ["BearerToken"])
            return self._api.request(
                method,
                self.host + path,
                query_params=params,
                headers=headers,
                body=body,
                _preload_content=False,
                _request_timeout=timeout if timeout is not None else self.timeout,
            )
        except ApiException as exc:
            message, reason = _status_message(exc.body)
            if exc.status == 410:
                raise GoneError(message or "resource version too old") from None
            text = f"{method} {path}: {exc.status} {reason or exc.reason}"
            raise KubeError(
                f"{text}: {message}" if message else text, int(exc.status or 0), reason
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"cannot reach the API server at {self.display_host}: {exc}") from None
        except ConfigException as exc:  # an exec/token refresh failed
            raise KubeConfigError(f"credentials: {exc}") from None

    def _json(self, resp: urllib3.BaseHTTPResponse, what: str) -> dict[str, Any]:
        try:
            data = resp.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"{what}: response broken: {exc}") from None
        finally:
            resp.release_conn()
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise KubeError(f"{what}: the server did not answer with JSON") from None
        if not isinstance(doc, dict):
            raise KubeError(f"{what}: expected a JSON object, got {type(doc).__name__}")
        return doc

    def _call(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        resp = self._request(
            method, path, query, None if body is None else dict(body), timeout, content_type
        )
        return self._json(resp, f"{method} {path}")

    def get(
        self, path: str, query: Query | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        return self._call("GET", path, query, timeout=timeout)

    def post(
        self, path: str, body: Mapping[str, Any], query: Query | None = None
    ) -> dict[str, Any]:
        return self._call("POST", path, query, body)

    def put(self, path: str, body: Mapping[str, Any], query: Query | None = None) -> dict[str, Any]:
        """Replace; 409 (a KubeError with status 409) when body's resourceVersion is stale."""
        return self._call("PUT", path, query, body)

    def patch(
        self, path: str, body: Mapping[str, Any], query: Query | None = None
    ) -> dict[str, Any]:
        """JSON merge patch (RFC 7386): works for CRDs too, unlike strategic merge."""
        return self._call("PATCH", path, query, body, content_type="application/merge-patch+json")

    def json_patch(
        self, path: str, ops: Sequence[Mapping[str, Any]], query: Query | None = None
    ) -> dict[str, Any]:
        """JSON patch (RFC 6902): the only way to remove one entry of a list such as spec.schedulingGates."""
        resp = self._request(
            "PATCH", path, query, [dict(o) for o in ops], None, "application/json-patch+json"
        )
        return self._json(resp, f"PATCH {path}")

    def apply(
        self, path: str, body: Mapping[str, Any], *, field_manager: str, force: bool = False
    ) -> dict[str, Any]:
        """Server-side apply: `body` is the whole intent of `field_manager`, which then owns exactly its fields."""
        query = {"fieldManager": field_manager, **({"force": "true"} if force else {})}
        return self._call("PATCH", path, query, body, content_type="application/apply-patch+yaml")

    def delete(
        self, path: str, query: Query | None = None, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """DELETE; `body` is DeleteOptions (e.g. preconditions.uid: 409 when the object was replaced)."""
        return self._call("DELETE", path, query, body)

    def watch(
        self,
        path: str,
        query: Query,
        *,
        read_timeout: float,
        on_malformed: Callable[[bytes], None] | None = None,
    ) -> WatchStream:
        resp = self._request("GET", path, query, None, (min(self.timeout, 30.0), read_timeout))
        return WatchStream(resp, path, on_malformed)


# ------------------------------------------------------------------- config

# urllib3's retry warnings quote the request URL, and the client logs an exec
# plugin's failure (its stderr) on the root logger: redact both at the source.
install_log_redaction(
    "urllib3.connectionpool",
    "urllib3.poolmanager",
    "urllib3.util.retry",
    "urllib3.connection",
    "kubernetes.client.rest",
    "",
)

_exec_failures = threading.local()


class QuietExecProvider(ExecProvider):
    """An exec credential plugin run without a terminal, its stderr captured and never shown.

    The client's own provider passes stderr through on a terminal and quotes
    it in its error otherwise; plugins print tokens and request dumps there.
    A failure is one sentence naming the command and its exit code.
    Same protocol as `ExecProvider.run`, always non-interactive.
    """

    def run(self, previous_response: Any = None) -> Any:
        command = os.path.basename(str(self.args[0])) if self.args else "?"
        spec: dict[str, Any] = {"interactive": False}
        if previous_response:
            spec["response"] = previous_response
        if self.cluster:
            spec["cluster"] = self.cluster.value
        self.env["KUBERNETES_EXEC_INFO"] = orjson.dumps(
            {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        ).decode()
        try:
            proc = subprocess.run(
                self.args,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                env=self.env,
                text=True,
                shell=self.shell,
                check=False,
            )
        except OSError as exc:  # not found, not executable
            raise self._failed(
                f"exec credential plugin {command!r} could not run: "
                f"{exc.strerror or type(exc).__name__}"
            ) from None
        if proc.returncode != 0:
            raise self._failed(
                f"exec credential plugin {command!r} exited with status {proc.returncode} "
                "(its stderr is not shown, it may hold secrets: run the command by hand to see it)"
            )
        try:
            data = orjson.loads(proc.stdout)
        except orjson.JSONDecodeError:
            raise self._failed(
                f"exec credential plugin {command!r} did not print an ExecCredential JSON object"
            ) from None
        if not isinstance(data, dict) or not all(
            k in data for k in ("apiVersion", "kind", "status")
        ):
            raise self._failed(
                f"exec credential plugin {command!r}: its ExecCredential lacks apiVersion, "
                "kind or status"
            )
        if data["apiVersion"] != self.api_version:
            raise self._failed(
                f"exec credential plugin {command!r}: answered {data['apiVersion']}, "
                f"asked for {self.api_version}"
            )
        return data["status"]

    @staticmethod
    def _failed(text: str) -> ConfigException:
        _exec_failures.last = text
        return ConfigException(text)


_kube_config.ExecProvider = QuietExecProvider  # the loader looks the class up when it runs a plugin


class _DropKubeConfigLog(logging.Filter):
    """While a kubeconfig loads: its loader logs errors we report ourselves as one sentence."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.replace(os.sep, "/").endswith("kubernetes/config/kube_config.py")


def _check_tls_files(cfg: Configuration) -> None:
    """A CA or client certificate the kubeconfig names must parse now, not as an SSL error per request."""
    ca = getattr(cfg, "ssl_ca_cert", None)
    if ca:
        try:
            ssl.create_default_context(cafile=ca)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise KubeConfigError(
                f"kubeconfig: certificate-authority(-data) is not a PEM certificate ({_ssl_reason(exc)})"
            ) from None
    cert, key = getattr(cfg, "cert_file", None), getattr(cfg, "key_file", None)
    if cert:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key or None)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise KubeConfigError(
                f"kubeconfig: client-certificate(-data) or client-key(-data) is not a usable PEM pair "
                f"({_ssl_reason(exc)})"
            ) from None


def _ssl_reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__)


def _kubeconfig_paths(kubeconfig: str | None) -> list[Path]:
    """The files the kubeconfig loader will read: --kubeconfig, else $KUBECONFIG's list, else ~/.kube/config."""
    if kubeconfig:
        return [Path(kubeconfig).expanduser()]
    env = os.environ.get("KUBECONFIG")
    names = [p for p in env.split(os.pathsep) if p] if env else ["~/.kube/config"]
    return [Path(p).expanduser() for p in names]


def _check_kubeconfig_files(kubeconfig: str | None) -> None:
    """Each kubeconfig file through gangscale's loader first: the client's own `yaml.safe_load` expands an
    alias bomb of a few hundred bytes for minutes and gigabytes; ours refuses it (and deep nesting) in one line."""
    from ..loader import InputError, read_documents

    for path in _kubeconfig_paths(kubeconfig):
        if path.is_file():
            try:
                read_documents(path)
            except InputError as exc:
                raise KubeConfigError(f"kubeconfig: {exc}") from None


def _default_kubeconfig_present() -> bool:
    env = os.environ.get("KUBECONFIG")
    if env:
        return any(Path(p).expanduser().is_file() for p in env.split(os.pathsep) if p)
    return Path("~/.kube/config").expanduser().is_file()


def connect(
    kubeconfig: str | None = None, context: str | None = None, *, timeout: float = 30.0
) -> KubeClient:
    """A client from --kubeconfig/--context, $KUBECONFIG, ~/.kube/config or the pod's service account."""
    cfg = Configuration()
    active: str | None = context
    _exec_failures.last = ""
    quiet = _DropKubeConfigLog()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        if kubeconfig or context or _default_kubeconfig_present():
            if kubeconfig and not Path(kubeconfig).expanduser().is_file():
                raise KubeConfigError(f"{kubeconfig}: no such kubeconfig file")
            _check_kubeconfig_files(kubeconfig)
            kconfig.load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=cfg,
                persist_config=False,
            )
            if active is None:
                try:
                    active = kconfig.list_kube_config_contexts(config_file=kubeconfig)[1].get(
                        "name"
                    )
                except (ConfigException, IndexError, AttributeError, TypeError):
                    active = None
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            kconfig.load_incluster_config(client_configuration=cfg)
            active = "in-cluster"
        else:
            raise KubeConfigError(
                "no kubeconfig found ($KUBECONFIG, ~/.kube/config) and not running inside a cluster: "
                "pass --kubeconfig FILE, or --cluster FILE to plan from a file"
            )
    except ConfigException as exc:
        raise KubeConfigError(f"kubeconfig: {exc}") from None
    except (ValueError, TypeError) as exc:  # base64 (binascii.Error), malformed data fields
        raise KubeConfigError(
            "kubeconfig: certificate-authority-data, client-certificate-data or client-key-data is not valid "
            f"base64 ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
        ) from None
    finally:
        root.removeFilter(quiet)
    if _exec_failures.last:
        raise KubeConfigError(f"kubeconfig: {_exec_failures.last}")
    _check_tls_files(cfg)
    return KubeClient(ApiClient(cfg), context=active, timeout=timeout)
