"""A certificate authority and a serving certificate for the admission webhook.

The API server calls a webhook over TLS only, and trusts exactly the CA bundle in the
ValidatingWebhookConfiguration. ``kgpu manifests`` therefore makes a fresh CA and a
certificate signed by it at render time: the CA goes into the configuration's ``caBundle``,
the certificate and key into the webhook's Secret, and nothing else (no cert-manager) is
needed for a one-command install.

ECDSA P-256 keys: as safe as RSA-3072 for this, made in milliseconds, and accepted by every
Go TLS stack the API server has shipped with. The serving certificate names the service by
every DNS name the API server may use for it (``svc``, ``svc.ns``, ``svc.ns.svc``, with and
without the cluster domain) in subjectAltName, because Go ignores the common name.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DAYS = 3650  # the install is re-rendered to rotate; a short life would break it silently


@dataclass(frozen=True, slots=True)
class WebhookTls:
    """PEM-encoded CA certificate, serving certificate (chain) and serving key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def service_dns_names(service: str, namespace: str) -> list[str]:
    base = f"{service}.{namespace}.svc"
    return [service, f"{service}.{namespace}", base, f"{base}.cluster.local"]


def generate_tls(
    dns_names: list[str],
    ip_addresses: list[str] | None = None,
    *,
    days: int = DEFAULT_DAYS,
    now: datetime.datetime | None = None,
) -> WebhookTls:
    """A new CA and a serving certificate for ``dns_names`` and ``ip_addresses``."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    start = (now or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(minutes=5)
    end = start + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kgpu-webhook-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses or []]
    common = dns_names[0] if dns_names else str(ip_addresses[0] if ip_addresses else "")
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return WebhookTls(
        ca_pem=ca_cert.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
