"""TLS for broker connections: the ``SSLContext`` from ``ssl.*`` properties, and
one-line explanations of handshake failures.

Both clients wrap their sockets with ``context_for(security)`` and
``server_hostname`` set to the broker's host as given (bootstrap address or
metadata), so host name verification checks what the user or the cluster named
(Java's ``ssl.endpoint.identification.algorithm=https``, the default; empty
turns it off, the CA check stays).

The context offers TLS 1.2 and 1.3 and the cipher suites JDK 17 enables
(``kctl/cipher_suites.py``), or those ``ssl.cipher.suites`` names, so a broker
that a Java client reaches (RSA key exchange, CBC suites) is reached too. An
encrypted key without ``ssl.key.password`` is a one-line error, never OpenSSL's
pass phrase prompt.

When a handshake fails in a way its alert cannot explain (a handshake_failure
alert: no cipher suite in common, or a client certificate required; a protocol
version alert; an expired certificate), ``probe`` opens one more connection that
accepts anything and reports what the broker chose (version, suite, certificate
dates), and ``tls_failure`` words that.

``listener_context(cert, key)`` is the server side, for ``kctl inspect`` terminating
TLS from clients (its upstream side uses ``context_for`` like every other client).
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
from dataclasses import dataclass
from functools import lru_cache

from kctl.cipher_suites import JDK17_CIPHER_SUITES, TLS13_CIPHER_SUITES, iana_name, openssl_cipher_string
from kctl.config import SecurityConfig
from kctl.errors import AuthenticationError, ConfigError

__all__ = ["Probe", "context_for", "listener_context", "needs_probe", "probe", "tls_failure"]


class _KeyIsEncrypted(Exception):
    """Raised by the password callback when no password was given."""


def _no_password() -> str:
    # OpenSSL asks for a password only for an encrypted key; without this callback it
    # would prompt on the terminal ("Enter PEM pass phrase:") and block.
    raise _KeyIsEncrypted


def load_key_pair(ctx: ssl.SSLContext, certificate: str, key: str | None, password: str | None,
                  *, what: str, key_setting: str, password_setting: str) -> None:
    """``ctx.load_cert_chain`` with one-line errors naming the settings that fix them."""
    shown = f"{what} {certificate!r}" + (f" / key {key!r}" if key else "")
    try:
        ctx.load_cert_chain(certificate, key, password=password if password is not None else _no_password)
    except _KeyIsEncrypted:
        raise ConfigError(f"cannot load the {shown}: the key is encrypted; set {password_setting} "
                          "to its password (or @file)") from None
    except OSError as e:
        if isinstance(e, ssl.SSLError):
            reason = e.reason or str(e)
            empty = next((f for f in (certificate, key) if f and _no_pem_block(f)), None)
            if empty is not None:
                reason = _no_pem_block(empty)
            elif "KEY_VALUES_MISMATCH" in reason:
                reason = "the key does not belong to the certificate"
            elif password is not None and ("BAD_DECRYPT" in reason or "PEM lib" in str(e)
                                           and _has_private_key(key or certificate)):
                reason = f"the key does not decrypt with {password_setting} (wrong password?)"
            elif not _has_private_key(key or certificate):
                reason = (f"no private key in {key or certificate!r}"
                          + ("" if key else f"; set {key_setting} to the key's PEM file"))
        else:
            reason = e.strerror or str(e)
        raise ConfigError(f"cannot load the {shown}: {reason}") from None


def _no_pem_block(path: str) -> str | None:
    """Why ``path`` cannot be PEM (empty, or no ``-----BEGIN`` line), or None when it may be."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 22)
    except OSError:
        return None  # the load itself said why
    if b"-----BEGIN " in data:
        return None
    return f"{path!r} holds no PEM block ({'it is empty' if not data.strip() else 'no -----BEGIN line'})"


def _has_private_key(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return b"PRIVATE KEY-----" in f.read(1 << 20)
    except OSError:
        return True  # the load itself said why


def _load_cas(ctx: ssl.SSLContext, location: str) -> None:
    """``ssl.ca.location``: a PEM file, or a directory whose PEM files are all loaded
    (librdkafka takes a directory too)."""
    try:
        if not os.path.isdir(location):
            ctx.load_verify_locations(cafile=location)
            return
        loaded = 0
        for name in sorted(os.listdir(location)):
            path = os.path.join(location, name)
            if os.path.isfile(path) and not _is_hash_link(location, name) and _has_certificate(path):
                ctx.load_verify_locations(cafile=path)
                loaded += 1
        if not loaded:
            raise ConfigError(f"ssl.ca.location {location!r} is a directory without PEM certificate "
                              "files") from None
    except (OSError, ssl.SSLError) as e:
        why = isinstance(e, ssl.SSLError) and not os.path.isdir(location) and _no_pem_block(location)
        raise ConfigError(f"cannot load ssl.ca.location {location!r}: "
                          f"{why or getattr(e, 'strerror', None) or e}") from None


def _is_hash_link(directory: str, name: str) -> bool:
    """c_rehash's ``1a2b3c4d.0`` links point at files loaded under their own names."""
    return os.path.islink(os.path.join(directory, name)) and len(name.split(".")[0]) == 8


def _has_certificate(path: str) -> bool:
    with open(path, "rb") as f:
        return b"-----BEGIN CERTIFICATE-----" in f.read(1 << 22)


@lru_cache(maxsize=8)
def context_for(security: SecurityConfig) -> ssl.SSLContext:
    """A client context: the CA file (or the system's CAs), the client certificate, host
    checks, TLS 1.2/1.3 and JDK 17's cipher suites (or ``ssl.cipher.suites``)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = security.ssl_check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    suites = security.ssl_cipher_suites or JDK17_CIPHER_SUITES
    tls12 = openssl_cipher_string(suites)
    if tls12:
        ctx.set_ciphers(tls12)
    else:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3   # only TLS 1.3 suites named
    if not any(s in TLS13_CIPHER_SUITES for s in suites):
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2   # as Java: no 1.3 suite, no TLS 1.3
    if security.ssl_ca_location:
        _load_cas(ctx, security.ssl_ca_location)
    if security.ssl_certificate_location:
        load_key_pair(ctx, security.ssl_certificate_location, security.ssl_key_location,
                      security.ssl_key_password, what="client certificate",
                      key_setting="ssl.key.location", password_setting="ssl.key.password")
    elif security.ssl_key_location:
        raise ConfigError("ssl.key.location is set but ssl.certificate.location is not")
    return ctx


def listener_context(certificate_location: str, key_location: str | None = None,
                     key_password: str | None = None) -> ssl.SSLContext:
    """A server context presenting ``certificate_location`` (PEM chain; the key may be in
    the same file). Clients are not asked for a certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    load_key_pair(ctx, certificate_location, key_location, key_password,
                  what="listener certificate", key_setting="--listen-tls-key",
                  password_setting="--listen-tls-key-password")
    return ctx


# -- explaining a failure -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Probe:
    """What a broker chose when offered everything (``probe``), or why even that failed."""

    version: str | None = None          # "TLSv1.2"
    cipher: str | None = None           # OpenSSL's name
    not_before: str | None = None
    not_after: str | None = None
    error: str | None = None


def needs_probe(error: BaseException) -> bool:
    """Whether ``tls_failure`` can say more after a ``probe``: the broker's alert alone
    does not tell what is wrong (no shared suite or version, a missing client
    certificate, a certificate out of its validity dates)."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return error.verify_code in (9, 10)   # X509_V_ERR_CERT_NOT_YET_VALID, _HAS_EXPIRED
    code = (getattr(error, "reason", None) or "").upper()
    return isinstance(error, ssl.SSLError) and any(
        c in code for c in ("HANDSHAKE_FAILURE", "PROTOCOL_VERSION", "UNSUPPORTED_PROTOCOL",
                            "NO_PROTOCOLS_AVAILABLE", "NO_SHARED_CIPHER", "NO_CIPHERS_AVAILABLE"))


def probe(host: str, port: int, timeout_s: float) -> Probe:
    """One handshake offering every version and suite OpenSSL has, no certificate checks
    and no client certificate; then closed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        ctx.set_ciphers("ALL:@SECLEVEL=0")
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    except (ssl.SSLError, ValueError):
        pass
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as tls:
            cipher = tls.cipher()
            der = tls.getpeercert(binary_form=True)
            not_before, not_after = _validity(der) if der else (None, None)
            return Probe(tls.version(), cipher[0] if cipher else None, not_before, not_after)
    except (OSError, ValueError) as e:
        return Probe(error=getattr(e, "reason", None) or str(e) or type(e).__name__)


def _der(buf: bytes, i: int) -> tuple[int, int, int]:
    """One DER element at ``i``: (tag, start of its content, end of its content)."""
    tag, length = buf[i], buf[i + 1]
    i += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(buf[i:i + n], "big")
        i += n
    return tag, i, i + length


def _validity(cert: bytes) -> tuple[str | None, str | None]:
    """A DER certificate's notBefore and notAfter, as ``2020-02-01 00:00:00 UTC``."""
    try:
        _, tbs_at, _ = _der(cert, 0)             # Certificate
        _, i, _ = _der(cert, tbs_at)             # TBSCertificate
        tag, _, end = _der(cert, i)
        if tag == 0xA0:                          # [0] version
            i = end
        for _ in range(3):                       # serialNumber, signature, issuer
            _, _, i = _der(cert, i)
        _, i, _ = _der(cert, i)                  # validity
        times = []
        for _ in range(2):
            tag, start, i = _der(cert, i)
            text = cert[start:i].decode("ascii")
            fmt = "%y%m%d%H%M%SZ" if tag == 0x17 else "%Y%m%d%H%M%SZ"
            times.append(datetime.datetime.strptime(text, fmt).strftime("%Y-%m-%d %H:%M:%S UTC"))
        return times[0], times[1]
    except (IndexError, ValueError, UnicodeDecodeError):
        return None, None


def _iana(openssl_name: str | None) -> str:
    return iana_name(openssl_name) or f"{openssl_name} (OpenSSL's name)"


def tls_failure(address: str, error: BaseException, *, security: SecurityConfig | None = None,
                probed: Probe | None = None) -> AuthenticationError:
    """One line: which broker, and why TLS failed, with the setting that fixes it.
    ``probed``: what ``probe`` found, when ``needs_probe(error)``."""
    has_cert = security is not None and security.ssl_certificate_location is not None
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = error.verify_message or error.reason or str(error)
        # 62: X509_V_ERR_HOSTNAME_MISMATCH, 64: X509_V_ERR_IP_ADDRESS_MISMATCH
        if error.verify_code in (62, 64) or "mismatch" in (detail or ""):
            reason = (f"its certificate does not match the host name ({detail}); connect by a name "
                      "the certificate lists, or set ssl.endpoint.identification.algorithm= (empty) "
                      "to skip the host name check")
        elif error.verify_code == 10:
            when = (f"expired on {probed.not_after} (its notAfter)" if probed and probed.not_after
                    else "has expired (past its notAfter date)")
            reason = (f"its certificate {when}; the broker needs a renewed certificate "
                      "(ssl.ca.location does not change this)")
        elif error.verify_code == 9:
            when = f" before {probed.not_before}" if probed and probed.not_before else ""
            reason = (f"its certificate is not valid yet{when} (notBefore); check the broker's "
                      "certificate and both clocks")
        else:
            reason = (f"its certificate is not trusted ({detail}); set ssl.ca.location to the CA "
                      "that signed it")
    elif isinstance(error, ssl.SSLEOFError) or "UNEXPECTED_EOF" in (getattr(error, "reason", "") or ""):
        # TLS 1.3: the client's handshake ends before the broker checks the client's
        # certificate, so a refusal shows up as the connection closing at the first request.
        reason = ("the broker closed the TLS connection; it probably requires a client certificate "
                  "(set ssl.certificate.location and ssl.key.location) or rejected the one sent")
    elif isinstance(error, ssl.SSLError):
        code = (error.reason or "").upper()
        if "CERTIFICATE_REQUIRED" in code:
            reason = ("the broker requires a client certificate "
                      "(set ssl.certificate.location and ssl.key.location)")
        elif needs_probe(error):
            reason = _handshake_refused(code, probed, has_cert)
        elif "WRONG_VERSION_NUMBER" in code or "RECORD_LAYER_FAILURE" in code or "PACKET_LENGTH" in code:
            reason = "the broker did not answer with TLS (is it a PLAINTEXT listener? check security.protocol)"
        elif "UNKNOWN_CA" in code or "BAD_CERTIFICATE" in code:
            reason = f"the broker rejected kctl's client certificate ({error.reason})"
        else:
            reason = error.reason or str(error)
    else:
        reason = str(error) or type(error).__name__
    return AuthenticationError(f"TLS with broker {address} failed: {reason}")


def _handshake_refused(code: str, probed: Probe | None, has_cert: bool) -> str:
    """A handshake the broker refused (handshake_failure / protocol_version alert)."""
    if probed is not None and probed.version is not None:
        if probed.version in ("TLSv1", "TLSv1.1", "SSLv3"):
            return (f"the broker offers only {probed.version.replace('TLSv1', 'TLS 1')} or older; "
                    "kctl, like the Java client, needs TLS 1.2 or 1.3")
        if "PROTOCOL_VERSION" in code or "UNSUPPORTED_PROTOCOL" in code:
            return (f"no TLS version in common: the broker chose {probed.version}, which "
                    "ssl.cipher.suites rules out (TLS 1.3 needs its three suites listed)")
        suite = _iana(probed.cipher)
        fix = (f"add {suite} to ssl.cipher.suites (or leave ssl.cipher.suites empty)"
               if iana_name(probed.cipher) in JDK17_CIPHER_SUITES
               else "a suite neither kctl nor the Java client (JDK 17) enables; the broker "
                    "needs a stronger one")
        return f"no cipher suite in common: offered everything, the broker chose {suite} ({probed.version}): {fix}"
    if probed is not None and not has_cert:
        return ("the broker requires a client certificate (set ssl.certificate.location and "
                "ssl.key.location)")
    if probed is not None:
        return f"the broker refused the handshake ({code.lower()}), also with every suite and version offered"
    if "PROTOCOL_VERSION" in code or "UNSUPPORTED_PROTOCOL" in code or "NO_PROTOCOLS" in code:
        return ("no TLS version in common: kctl, like the Java client, needs TLS 1.2 or 1.3; the "
                "broker may offer only TLS 1.1 or older")
    return ("the broker refused the handshake: no cipher suite in common (ssl.cipher.suites)"
            + ("" if has_cert else ", or it requires a client certificate (ssl.certificate.location "
                                   "and ssl.key.location)"))
