"""The certificate the API serves TCP with: the administrator's (--tls-cert/--tls-key), or one
DevCell makes for itself in the state directory.

Its own is a self-signed ECDSA P-256 certificate for localhost, 127.0.0.1, ::1 and the host
it listens on, valid for a year, kept as `api-tls/cert.pem` and `api-tls/key.pem` (the key
owner-only, written 0600 from the start; the directory 0700). It is made again when it is
missing, expired within a week, or does not name the host listened on. A client trusts it
by pinning the certificate (`curl --cacert <state>/api-tls/cert.pem`).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from devcell.errors import UsageError
from devcell.names import printable

DIRECTORY = "api-tls"
VALID_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=7)
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def own_certificate(state_dir: Path, host: str) -> tuple[Path, Path]:
    """(certificate, key) of DevCell's own certificate for `host`, made when needed."""
    folder = state_dir / DIRECTORY
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    cert, key = folder / "cert.pem", folder / "key.pem"
    names = sorted({*LOCAL_NAMES, host} - {"0.0.0.0", "::", ""})
    if not _usable(cert, key, names):
        _make(cert, key, names)
    return cert, key


def _usable(cert: Path, key: Path, names: list[str]) -> bool:
    from cryptography import x509

    try:
        loaded = x509.load_pem_x509_certificate(cert.read_bytes())
        if key.lstat().st_mode & 0o077 or not key.is_file() or key.is_symlink():
            return False
        alt = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {str(n) for n in alt.get_values_for_type(x509.DNSName)} | {
        str(n) for n in alt.get_values_for_type(x509.IPAddress)}
    now = datetime.datetime.now(datetime.UTC)
    return set(names) <= have and loaded.not_valid_after_utc - now > RENEW_BEFORE


def _make(cert: Path, key: Path, names: list[str]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "devcell api")])
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    made = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(private.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(private, hashes.SHA256()))
    key_bytes = private.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
    _write(key, key_bytes, 0o600)
    _write(cert, made.public_bytes(serialization.Encoding.PEM), 0o600)  # state: owner-only


def _write(path: Path, data: bytes, mode: int) -> None:
    """Written whole under a temporary name with its mode from the start, then renamed: never
    readable by others, never half-written, never through a link planted at the path."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(fd, mode)  # whatever the umask
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def given_certificate(cert: str, key: str) -> tuple[Path, Path]:
    """The administrator's certificate and key, checked now (readable, a key not readable by
    others) so a mistake stops the daemon before it starts."""
    import ssl

    key_path = Path(key)
    try:
        if key_path.stat().st_mode & 0o077:
            raise UsageError(f"--tls-key {printable(key)}: readable by others; chmod 600 it")
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError as exc:  # an OSError too: first
        raise UsageError(f"--tls-cert {printable(cert)} with --tls-key {printable(key)}: "
                         f"not a certificate and its key ({printable(exc.reason or '')})"
                         ) from None
    except OSError as exc:
        raise UsageError(f"--tls-cert/--tls-key: {printable(exc.strerror or str(exc))}"
                         ) from None
    return Path(cert), key_path
