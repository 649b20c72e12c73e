"""A throwaway PKI for a loopback control plane, made with the openssl CLI.

Modern kube-apiservers have no insecure port, so even a test cluster needs a CA, a serving
certificate valid for 127.0.0.1 and localhost, and a service-account key pair. Clients
authenticate with a static bearer token (no front-proxy / requestheader setup, so no second CA
is needed). Everything is short-lived and lives in the control plane's temp dir.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    token_file: Path
    admin_token: str


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def make_pki(directory: Path, days: int = 2) -> Pki:
    """Create the CA, serving cert, SA key pair and static token file under ``directory``."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is not installed; the control plane needs it for its PKI")
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=d)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-days",
        str(days),
        "-subj",
        "/CN=dsan-test-ca",
        "-out",
        "ca.crt",
        cwd=d,
    )
    _openssl("genrsa", "-out", "apiserver.key", "2048", cwd=d)
    _openssl(
        "req",
        "-new",
        "-key",
        "apiserver.key",
        "-subj",
        "/CN=kube-apiserver",
        "-out",
        "apiserver.csr",
        cwd=d,
    )
    (d / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,IP:10.0.0.1\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "apiserver.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        str(days),
        "-extfile",
        "san.ext",
        "-out",
        "apiserver.crt",
        cwd=d,
    )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    token = secrets.token_hex(16)
    # system:masters bypasses RBAC: the admin identity every test component uses here.
    (d / "tokens.csv").write_text(f'{token},admin,admin-uid,"system:masters"\n')
    return Pki(
        dir=d,
        ca_cert=d / "ca.crt",
        ca_key=d / "ca.key",
        serving_cert=d / "apiserver.crt",
        serving_key=d / "apiserver.key",
        sa_key=d / "sa.key",
        sa_pub=d / "sa.pub",
        token_file=d / "tokens.csv",
        admin_token=token,
    )


def write_kubeconfig(path: Path, server: str, ca_cert: Path, token: str) -> Path:
    """A kubeconfig for ``server`` with a bearer token (read by the Go parts and `dsan serve`)."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: dsan\n  cluster:\n    server: {server}\n"
        f"    certificate-authority: {ca_cert}\n"
        f"users:\n- name: admin\n  user:\n    token: {token}\n"
        "contexts:\n- name: dsan\n  context:\n    cluster: dsan\n    user: admin\n"
        "current-context: dsan\n"
    )
    return path
