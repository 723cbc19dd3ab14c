"""Self-signed bootstrap for clusters without cert-manager: a CA, a serving pair, the caBundle patched in.

Each start makes a fresh CA and pair (nothing secret is stored in the
cluster) and rewrites caBundle of both webhook configurations, so a restart is
the rotation (docs/webhook.md). Needs the `cryptography` package (extra
`webhook`).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import logging
import os
from typing import Any

VALID_DAYS = 365
CONFIG_PATHS = (
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
)


def dns_names(service: str) -> list[str]:
    """`name.namespace` -> the names the API server may dial."""
    name, _, ns = service.partition(".")
    ns = ns or "default"
    return [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}"]


def make_pair(names: list[str], ip: str | None = None) -> tuple[bytes, bytes, bytes]:
    """(CA cert PEM, serving cert PEM, serving key PEM) for `names` (and `ip`, for tests on 127.0.0.1)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gangscale-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    alt: list[Any] = [x509.DNSName(n) for n in names] + (
        [x509.IPAddress(ipaddress.ip_address(ip))] if ip else []
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


def write_pair(cert_path: str, key_path: str, cert_pem: bytes, key_pem: bytes) -> None:
    os.makedirs(os.path.dirname(cert_path) or ".", exist_ok=True)
    for path, data, mode in ((key_path, key_pem, 0o600), (cert_path, cert_pem, 0o644)):
        tmp = f"{path}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)  # the server never reads half a file


def patch_ca_bundle(client: Any, name: str, ca_pem: bytes, admission: Any = None) -> list[str]:
    """Set caBundle on every webhook of both configurations named `name`; returns what was patched.

    `admission` (AdmissionConfig): also write its failurePolicy (validating; mutating stays Ignore) and
    timeoutSeconds, so the config file is the one place they are set."""
    bundle = base64.b64encode(ca_pem).decode()
    done = []
    for base in CONFIG_PATHS:
        obj = client.get(f"{base}/{name}")
        for hook in obj.get("webhooks") or []:
            hook.setdefault("clientConfig", {})["caBundle"] = bundle
            if admission is not None:
                hook["timeoutSeconds"] = admission.timeout_seconds
                hook["failurePolicy"] = (
                    admission.failure_policy if "validating" in base else "Ignore"
                )
        client.put(
            f"{base}/{name}", obj
        )  # carries resourceVersion: a concurrent edit gets 409, not lost
        done.append(f"{base.rsplit('/', 1)[1]}/{name}")
    return done


def bootstrap(
    args: argparse.Namespace, cert_path: str, key_path: str, admission: Any = None
) -> None:
    from ..kube.commands import _connect

    ca_pem, cert_pem, key_pem = make_pair(dns_names(args.service))
    write_pair(cert_path, key_path, cert_pem, key_pem)
    with _connect(args) as client:
        done = patch_ca_bundle(client, args.webhook_configuration, ca_pem, admission)
    logging.getLogger("gangscale.webhook").info(
        "self-signed certificate made, caBundle patched", extra={"patched": done}
    )
