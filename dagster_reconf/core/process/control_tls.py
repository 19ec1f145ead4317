"""TLS for the control endpoint, where the stream's spec gives a certificate.

The endpoint carries the bearer token and every control request; across hosts a network the control plane does not
own may see it. With ``control_tls_cert`` and ``control_tls_key`` the driver serves HTTPS only (TLS 1.2 or later),
and every client (the supervisor beside it, a control plane on another host) verifies the certificate against
``control_tls_ca`` (else the system's trust store) and the address it connects to: a record in the object store
pointing elsewhere cannot lead a client to hand its token to another server.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.spec import StreamSpec

__all__ = ["client_context", "server_context"]


def server_context(spec: StreamSpec) -> ssl.SSLContext | None:
    """The driver's TLS context for ``spec`` (None: plain HTTP); a SpecError naming the file and the fix."""
    if spec.control_tls_cert is None or spec.control_tls_key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _readable(spec.control_tls_cert, "control_tls_cert")
    _readable(spec.control_tls_key, "control_tls_key")
    try:
        context.load_cert_chain(spec.control_tls_cert, spec.control_tls_key)
    except ssl.SSLError as exc:
        raise SpecError(
            f"control_tls_cert {spec.control_tls_cert} and control_tls_key {spec.control_tls_key} are not a PEM "
            f"certificate and its private key ({exc.reason or exc}); give the pair the endpoint presents"
        ) from None
    return context


def client_context(spec: StreamSpec) -> ssl.SSLContext | None:
    """A client's TLS context for ``spec``'s endpoint (None: plain HTTP), verifying its certificate and address."""
    if spec.control_tls_cert is None:
        return None
    if spec.control_tls_ca is not None:
        _readable(spec.control_tls_ca, "control_tls_ca")
    try:
        context = ssl.create_default_context(cafile=spec.control_tls_ca)
    except ssl.SSLError as exc:
        raise SpecError(f"control_tls_ca {spec.control_tls_ca} is not a PEM bundle of certificates ({exc})") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _readable(path: str, field: str) -> None:
    if not Path(path).is_file():
        raise SpecError(f"{field} {path} is not a file on this host; put the PEM file there or fix the path")
