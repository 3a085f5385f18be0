"""``ssl.cipher.suites``: the IANA names Java takes, and OpenSSL's names for them.

The table is JDK 17's enabled cipher suites in its order of preference (what
``SSLEngine.getEnabledCipherSuites()`` lists, less the renegotiation SCSV); every
one of them has an OpenSSL name (``openssl ciphers -stdname``). kctl offers this
list by default, as a Java client does, and accepts any subset of it in
``ssl.cipher.suites``; any other name is refused. OpenSSL's DSS suites need a DSA
server key and are harmless to offer.
"""

from __future__ import annotations

__all__ = ["JDK17_CIPHER_SUITES", "TLS13_CIPHER_SUITES", "iana_name", "openssl_cipher_string"]

#: TLS 1.3 suites: the same names in IANA and OpenSSL. Python's ``ssl`` cannot narrow
#: them (no ``SSL_CTX_set_ciphersuites``): they are offered all or none.
TLS13_CIPHER_SUITES: tuple[str, ...] = (
    "TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256")

#: IANA name -> OpenSSL name, TLS 1.2 suites, JDK 17's order.
_TLS12: dict[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_DSS_WITH_AES_256_GCM_SHA384": "DHE-DSS-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_DSS_WITH_AES_128_GCM_SHA256": "DHE-DSS-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_DSS_WITH_AES_256_CBC_SHA256": "DHE-DSS-AES256-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_DSS_WITH_AES_128_CBC_SHA256": "DHE-DSS-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_DHE_DSS_WITH_AES_256_CBC_SHA": "DHE-DSS-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_DHE_DSS_WITH_AES_128_CBC_SHA": "DHE-DSS-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}

#: Every suite kctl accepts, JDK 17's default order (TLS 1.3 first).
JDK17_CIPHER_SUITES: tuple[str, ...] = TLS13_CIPHER_SUITES + tuple(_TLS12)


def openssl_cipher_string(suites: tuple[str, ...]) -> str:
    """The OpenSSL cipher list for the TLS 1.2 suites among ``suites`` (IANA names from
    ``JDK17_CIPHER_SUITES``), in their order; empty when there are none."""
    return ":".join(_TLS12[s] for s in suites if s in _TLS12)


_BY_OPENSSL: dict[str, str] = {v: k for k, v in _TLS12.items()} | {s: s for s in TLS13_CIPHER_SUITES}


def iana_name(openssl_name: str | None) -> str | None:
    """The IANA name of a suite OpenSSL names (those in the table), else ``None``."""
    return _BY_OPENSSL.get(openssl_name or "")
