"""Throwaway certificates for TLS tests and benchmarks, made with the `openssl` command
(Debian's, installed by `make sysdeps`): a CA, certificates it signs, and a second CA
whose certificates the first does not accept."""

from __future__ import annotations

import subprocess
from pathlib import Path

Pki = dict[str, tuple[Path, Path]]  # name -> (certificate, key)


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            f"/CN={name}", "-keyout", str(key), "-out", str(cert))  # fmt: skip
    return cert, key


def make_cert(directory: Path, name: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    key, csr, cert = (directory / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", str(key), "-out", str(csr))  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
            "-CAcreateserial", "-days", "2", "-out", str(cert))  # fmt: skip
    return cert, key


def make_pki(directory: Path) -> Pki:
    """ca, node and client (signed by ca), stranger (signed by another CA)."""
    ca, other_ca = make_ca(directory, "ca"), make_ca(directory, "other-ca")
    return {
        "ca": ca,
        "node": make_cert(directory, "node", ca),
        "client": make_cert(directory, "client", ca),
        "stranger": make_cert(directory, "stranger", other_ca),
    }


def tls_args(pki: Pki, cert: str = "node") -> list[str]:
    """A node's TLS directives on the command line, with certificate `cert`."""
    return ["--tls-cert-file", str(pki[cert][0]), "--tls-key-file", str(pki[cert][1]),
            "--tls-ca-cert-file", str(pki["ca"][0])]  # fmt: skip
