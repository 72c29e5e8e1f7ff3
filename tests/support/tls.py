"""A private CA and a server certificate it signed, for test servers that speak TLS.

Made with the ``cryptography`` package when it is installed, else with the ``openssl`` command
line; either way a CA (``ca.crt``) a client may trust alone, and a certificate for 127.0.0.1
and ``localhost`` (``server.crt``, ``server.key``).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.servers import skip_or_fail


@dataclass(frozen=True)
class Tls:
    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def make_tls(directory: Path) -> Tls:
    directory.mkdir(parents=True, exist_ok=True)
    tls = Tls(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    try:
        import cryptography  # noqa: F401
    except ImportError:
        _with_openssl(tls)
    else:
        _with_cryptography(tls)
    return tls


def _with_cryptography(tls: Tls) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test cluster CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(
              digital_signature=True, key_cert_sign=True, crl_sign=True,
              content_commitment=False, key_encipherment=False, data_encipherment=False,
              key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    tls.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))


def _with_openssl(tls: Tls) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        skip_or_fail("neither the cryptography package nor openssl is installed")
        return
    ca_key = tls.ca.with_suffix(".key")
    extensions = tls.cert.with_suffix(".ext")
    extensions.write_text("basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n"
                          "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    csr = tls.cert.with_suffix(".csr")
    for args in (
        ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", ca_key, "-out", tls.ca, "-days", "1", "-subj", "/CN=test cluster CA",
         "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"],
        ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", tls.key, "-out", csr, "-subj", "/CN=kubernetes"],
        ["x509", "-req", "-in", csr, "-CA", tls.ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", tls.cert, "-days", "1", "-extfile", extensions],
    ):
        subprocess.run([openssl, *map(str, args)], check=True, capture_output=True, timeout=60)
