"""The control endpoint over TLS: certificates made here (an authority and a server certificate for 127.0.0.1),
real sockets on loopback."""

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from dagster_reconf.core.errors import ControlRequestError, SpecError
from dagster_reconf.core.process.control import ControlClient
from dagster_reconf.core.process.control_server import ControlServer
from dagster_reconf.core.process.control_tls import client_context, server_context
from dagster_reconf.core.spec import StreamSpec

TOKEN = "t" * 40


def _certificate(subject: str, key, issuer: str, issuer_key, *, ca: bool, address: str | None = None):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    if address is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(path, obj) -> str:
    if hasattr(obj, "private_bytes"):
        data = obj.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    else:
        data = obj.public_bytes(serialization.Encoding.PEM)
    path.write_bytes(data)
    return str(path)


@pytest.fixture(name="pki")
def pki_fixture(tmp_path):
    """An authority, and certificates it signed for 127.0.0.1 and for another address."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("reconf test CA", ca_key, "reconf test CA", ca_key, ca=True)
    files = {"ca": _pem(tmp_path / "ca.pem", ca)}
    for name, address in (("server", "127.0.0.1"), ("elsewhere", "10.9.9.9")):
        key = ec.generate_private_key(ec.SECP256R1())
        files[name] = _pem(
            tmp_path / f"{name}.pem", _certificate(name, key, "reconf test CA", ca_key, ca=False, address=address)
        )
        files[f"{name}-key"] = _pem(tmp_path / f"{name}-key.pem", key)
    return files


def spec(**fields) -> StreamSpec:
    return StreamSpec.parse({"name": "tls", "entrypoint": "dagster_reconf.workloads.streams:q5", **fields})


def serve(server_spec: StreamSpec) -> ControlServer:
    server = ControlServer(
        TOKEN, {("GET", "/v1/status"): (None, lambda _: {"state": "running"})}, tls=server_context(server_spec)
    )
    server.start()
    return server


def test_a_client_that_trusts_the_authority_talks_https_and_others_are_refused(pki):
    tls = spec(control_tls_cert=pki["server"], control_tls_key=pki["server-key"], control_tls_ca=pki["ca"])
    server = serve(tls)
    try:
        assert server.tls
        assert ControlClient(server.port, TOKEN, tls=client_context(tls)).status() == {"state": "running"}
        with pytest.raises(ControlRequestError, match="unreachable"):  # plain HTTP to an HTTPS endpoint
            ControlClient(server.port, TOKEN).status()
        untrusted = spec(control_tls_cert=pki["server"], control_tls_key=pki["server-key"])  # the system's store
        with pytest.raises(ControlRequestError, match="CERTIFICATE_VERIFY_FAILED"):
            ControlClient(server.port, TOKEN, tls=client_context(untrusted)).status()
        # The server goes on serving after the failed handshakes.
        assert ControlClient(server.port, TOKEN, tls=client_context(tls)).status()["state"] == "running"
    finally:
        server.close()


def test_a_certificate_for_another_address_is_refused(pki):
    elsewhere = spec(control_tls_cert=pki["elsewhere"], control_tls_key=pki["elsewhere-key"], control_tls_ca=pki["ca"])
    server = serve(elsewhere)
    try:
        with pytest.raises(ControlRequestError, match="IP address mismatch|doesn't match"):
            ControlClient(server.port, TOKEN, tls=client_context(elsewhere)).status()
    finally:
        server.close()


def test_bad_tls_settings_are_named_with_the_fix(pki, tmp_path):
    with pytest.raises(SpecError, match="control_tls_cert and control_tls_key go together"):
        spec(control_tls_cert=pki["server"])
    with pytest.raises(SpecError, match="control_tls_ca is the authority of control_tls_cert"):
        spec(control_tls_ca=pki["ca"])
    with pytest.raises(SpecError, match=r"control_tls_key /nowhere/key.pem is not a file on this host"):
        server_context(spec(control_tls_cert=pki["server"], control_tls_key="/nowhere/key.pem"))
    with pytest.raises(SpecError, match="are not a PEM certificate and its private key"):
        server_context(spec(control_tls_cert=pki["server"], control_tls_key=pki["elsewhere-key"]))
    (tmp_path / "junk.pem").write_text("not a certificate")
    junk = spec(
        control_tls_cert=pki["server"], control_tls_key=pki["server-key"], control_tls_ca=str(tmp_path / "junk.pem")
    )
    with pytest.raises(SpecError, match="is not a PEM bundle"):
        client_context(junk)
