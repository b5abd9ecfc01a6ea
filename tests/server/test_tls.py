"""The certificate the API's TCP listener serves: DevCell's own (made once, its key
owner-only, made again when it no longer fits) or the administrator's (checked up front)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography import x509

from devcell.errors import UsageError
from devcell.server import tls


def _names(cert: Path) -> set[str]:
    alt = x509.load_pem_x509_certificate(cert.read_bytes()).extensions \
        .get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n) for n in alt.get_values_for_type(x509.DNSName)} | {
        str(n) for n in alt.get_values_for_type(x509.IPAddress)}


def test_own_certificate_is_made_once_with_an_owner_only_key(tmp_path: Path) -> None:
    cert, key = tls.own_certificate(tmp_path, "127.0.0.1")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / tls.DIRECTORY).stat().st_mode) == 0o700
    assert {"localhost", "127.0.0.1", "::1"} <= _names(cert)
    first = cert.read_bytes()
    assert tls.own_certificate(tmp_path, "localhost") == (cert, key)
    assert cert.read_bytes() == first  # still fits: kept


@pytest.mark.parametrize("umask", [0o077, 0o000], ids=["umask 077", "umask 000"])
def test_own_certificate_and_key_have_their_modes_under_any_umask(
        tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        cert, key = tls.own_certificate(tmp_path, "127.0.0.1")
    finally:
        os.umask(old)
    assert (stat.S_IMODE(cert.stat().st_mode), stat.S_IMODE(key.stat().st_mode)) == (
        0o600, 0o600)  # a state file, owner-only as every other (the certificate is no secret)


def test_own_certificate_is_made_again_for_another_host_or_a_loose_key(tmp_path: Path) -> None:
    cert, key = tls.own_certificate(tmp_path, "127.0.0.1")
    first = cert.read_bytes()
    tls.own_certificate(tmp_path, "dev.example.test")
    assert cert.read_bytes() != first and "dev.example.test" in _names(cert)
    os.chmod(key, 0o644)
    second = cert.read_bytes()
    tls.own_certificate(tmp_path, "dev.example.test")
    assert cert.read_bytes() != second and stat.S_IMODE(key.stat().st_mode) == 0o600


def test_given_certificate_is_checked(tmp_path: Path) -> None:
    cert, key = tls.own_certificate(tmp_path, "127.0.0.1")
    assert tls.given_certificate(str(cert), str(key)) == (cert, key)
    with pytest.raises(UsageError, match="not a certificate"):
        tls.given_certificate(str(key), str(key))
    os.chmod(key, 0o640)
    with pytest.raises(UsageError, match="readable by others"):
        tls.given_certificate(str(cert), str(key))
    with pytest.raises(UsageError):
        tls.given_certificate(str(tmp_path / "none.pem"), str(tmp_path / "none.key"))
