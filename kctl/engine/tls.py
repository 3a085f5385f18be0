"""TLS for broker connections: the ``SSLContext`` from ``ssl.*`` properties, and
one-line explanations of handshake failures.

Both clients wrap their sockets with ``context_for(security)`` and
``server_hostname`` set to the broker's host as given (bootstrap address or
metadata), so host name verification checks what the user or the cluster named
(Java's ``ssl.endpoint.identification.algorithm=https``, the default; empty
turns it off, the CA check stays).

``listener_context(cert, key)`` is the server side, for ``kctl inspect`` terminating
TLS from clients (its upstream side uses ``context_for`` like every other client).
"""

from __future__ import annotations

import ssl
from functools import lru_cache

from kctl.config import SecurityConfig
from kctl.errors import AuthenticationError, ConfigError

__all__ = ["context_for", "listener_context", "tls_failure"]


@lru_cache(maxsize=8)
def context_for(security: SecurityConfig) -> ssl.SSLContext:
    """A client context: the CA file (or the system's CAs), the client certificate, host checks."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = security.ssl_check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    if security.ssl_ca_location:
        try:
            ctx.load_verify_locations(cafile=security.ssl_ca_location)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot load ssl.ca.location {security.ssl_ca_location!r}: "
                              f"{getattr(e, 'strerror', None) or e}") from None
    if security.ssl_certificate_location:
        try:
            ctx.load_cert_chain(security.ssl_certificate_location, security.ssl_key_location,
                                password=security.ssl_key_password)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"cannot load the client certificate {security.ssl_certificate_location!r}"
                + (f" / key {security.ssl_key_location!r}" if security.ssl_key_location else "")
                + f": {getattr(e, 'strerror', None) or getattr(e, 'reason', None) or e}"
                + " (wrong ssl.key.password?)" * (security.ssl_key_password is not None)) from None
    elif security.ssl_key_location:
        raise ConfigError("ssl.key.location is set but ssl.certificate.location is not")
    return ctx


def listener_context(certificate_location: str, key_location: str | None = None,
                     key_password: str | None = None) -> ssl.SSLContext:
    """A server context presenting ``certificate_location`` (PEM chain; the key may be in
    the same file). Clients are not asked for a certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(certificate_location, key_location, password=key_password)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"cannot load the listener certificate {certificate_location!r}"
            + (f" / key {key_location!r}" if key_location else "")
            + f": {getattr(e, 'strerror', None) or getattr(e, 'reason', None) or e}") from None
    return ctx


def tls_failure(address: str, error: BaseException) -> AuthenticationError:
    """One line: which broker, and why TLS failed, with the setting that fixes it."""
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = error.verify_message or error.reason or str(error)
        # 62: X509_V_ERR_HOSTNAME_MISMATCH, 64: X509_V_ERR_IP_ADDRESS_MISMATCH
        if error.verify_code in (62, 64) or "mismatch" in (detail or ""):
            reason = (f"its certificate does not match the host name ({detail}); connect by a name "
                      "the certificate lists, or set ssl.endpoint.identification.algorithm= (empty) "
                      "to skip the host name check")
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
        if "CERTIFICATE_REQUIRED" in code or "HANDSHAKE_FAILURE" in code and "ALERT" in code:
            reason = ("the broker requires a client certificate "
                      "(set ssl.certificate.location and ssl.key.location)")
        elif "WRONG_VERSION_NUMBER" in code or "RECORD_LAYER_FAILURE" in code or "PACKET_LENGTH" in code:
            reason = "the broker did not answer with TLS (is it a PLAINTEXT listener? check security.protocol)"
        elif "UNKNOWN_CA" in code or "BAD_CERTIFICATE" in code:
            reason = f"the broker rejected kctl's client certificate ({error.reason})"
        else:
            reason = error.reason or str(error)
    else:
        reason = str(error) or type(error).__name__
    return AuthenticationError(f"TLS with broker {address} failed: {reason}")
