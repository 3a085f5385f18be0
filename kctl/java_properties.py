"""Java client properties for machinery kctl does not have, judged by their value.

How this works
--------------
A Java ``producer.properties`` or ``consumer.properties`` carries properties that
configure the JVM side of a client: serializers, interceptors, metric reporters, JMX,
key stores, Kerberos and OAuth logins, rebootstrapping, two-phase commit, KIP-714
metrics push. kctl has none of that machinery, so it cannot honour such a property;
but many of their values are ones with which the Java client does exactly what kctl
does on the wire and in its results (``ByteArraySerializer`` writes a record's bytes
unchanged; an empty ``interceptor.classes`` runs nothing; ``metrics.num.samples`` only
changes what Java reports locally). ``JAVA_ONLY_PROPERTIES`` is the one table, for the
producer and the consumer: per property, which clients have it, the values with that
property (``honours``), and what kctl supports instead. ``check_java_only`` accepts an
honoured value (silently, or with an informational ``note``) and refuses any other
with one line naming the property, the value, where it came from and the alternative:
a Java property is never accepted and ignored.

Facts are the Java client's (Kafka 4.x ``ProducerConfig``, ``ConsumerConfig``,
``CommonClientConfigs``, ``SslConfigs``, ``SaslConfigs``): where a refusal is in doubt
(a property's effect depends on machinery kctl cannot inspect), it refuses.

Decisions worth knowing
-----------------------
* ``enable.metrics.push`` defaults to true in Java (KIP-714): the client asks the
  broker for a subscription (GetTelemetrySubscriptions) and pushes the metrics it asks
  for (PushTelemetry). kctl never sends either API (its inspector only decodes them),
  so it behaves as Java with ``false``: ``false`` is accepted, an explicit ``true`` (a
  request for telemetry) refused.
* ``metadata.recovery.strategy`` defaults to ``rebootstrap`` in Kafka 4.0 (KIP-1102);
  kctl does not rebootstrap (it keeps retrying the brokers it knows), so only ``none``
  is accepted, and ``metadata.recovery.rebootstrap.trigger.ms`` only beside it.
* TLS: kctl offers TLS 1.2 and 1.3 (Python's client default), as Java's default
  ``ssl.enabled.protocols`` does; ``ssl.protocol`` TLSv1.3 (Java's default) or TLS
  leaves that choice to ``ssl.enabled.protocols``, so both are accepted. A key or trust
  store (JKS, PKCS12, or PEM in a store property) is refused: kctl reads PEM files
  (``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``), and a
  trust store ignored would make kctl trust CAs the Java client would not.
* SASL: Kerberos (GSSAPI) and OAuth (OAUTHBEARER) properties are accepted only at Java's
  defaults (a dump of a client's whole configuration carries them), which configure
  nothing without those mechanisms; any other value is refused.
* An ``ssl.*`` or ``sasl.*`` name in neither kctl's table nor this one is refused with
  what kctl supports (``SSL_SASL_SUPPORTED``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kctl.errors import ConfigError

PRODUCER = "producer"
CONSUMER = "consumer"
_BOTH = frozenset({PRODUCER, CONSUMER})
_PRODUCER = frozenset({PRODUCER})
_CONSUMER = frozenset({CONSUMER})


@dataclass(frozen=True, slots=True)
class JavaOnlyProperty:
    """A Java client property kctl has no machinery for, and the values it can accept."""

    name: str
    clients: frozenset[str]           # "producer" and/or "consumer"
    honours: Callable[[str], bool]    # a value with which Java does what kctl does
    instead: str                      # why other values are refused, and what kctl supports
    note: str = ""                    # an informational warning when accepted ("" = silent)
    secret: bool = False              # the value is never shown


def java_only_text(value: Any) -> str:
    """A setting's value as a properties file would hold it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value).strip()


def _one_of(*choices: str) -> Callable[[str], bool]:
    """Any of ``choices``, case-insensitive (as Java's enum-like properties read)."""
    lowered = {c.lower() for c in choices}
    return lambda text: text.lower() in lowered


def _classes(*allowed: str) -> Callable[[str], bool]:
    """A comma-separated class list (Java's LIST type) naming only ``allowed`` classes."""
    return lambda text: all(item.strip() in allowed for item in text.split(",") if item.strip())


def _number(default: float) -> Callable[[str], bool]:
    """Java's default, however written (0.8 or 0.80)."""
    def honours(text: str) -> bool:
        try:
            return float(text) == default
        except ValueError:
            return False
    return honours


def _int_in(lo: int, hi: int) -> Callable[[str], bool]:
    def honours(text: str) -> bool:
        try:
            return lo <= int(text) <= hi
        except ValueError:
            return False
    return honours


def _empty(text: str) -> bool:
    return text == ""


def _kctl_tls_versions(text: str) -> bool:
    return {p.strip() for p in text.split(",") if p.strip()} == {"TLSv1.2", "TLSv1.3"}


_SERDE = "org.apache.kafka.common.serialization."
#: Serializers that write a record's bytes unchanged (StringSerializer: a text's UTF-8).
BYTES_SERIALIZERS = tuple(_SERDE + c for c in (
    "ByteArraySerializer", "ByteBufferSerializer", "BytesSerializer", "StringSerializer"))
BYTES_DESERIALIZERS = tuple(_SERDE + c for c in (
    "ByteArrayDeserializer", "ByteBufferDeserializer", "BytesDeserializer", "StringDeserializer"))
JMX_REPORTER = "org.apache.kafka.common.metrics.JmxReporter"

_JAVA_CODE = "kctl cannot run Java classes"
_OTHER_BYTES = "put other bytes on the wire"
_OTHER_RESULTS = "decode (and may reject) what kctl counts as bytes"
_LOCAL_METRICS = "it only changes what the Java client reports locally; kctl reports its own statistics"
_PEM = ("kctl reads PEM files: ssl.ca.location (trusted CAs), ssl.certificate.location and "
        "ssl.key.location (client certificate and key)")
_KERBEROS = "Kerberos (GSSAPI) is not supported; kctl supports SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"
_OAUTH = "OAuth (OAUTHBEARER) is not supported; kctl supports SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"
_LOGIN = ("kctl logs in with sasl.username/sasl.password or sasl.jaas.config (PLAIN, SCRAM-SHA-256, "
          "SCRAM-SHA-512) and " + _JAVA_CODE)


def _serde(name: str, clients: frozenset[str], classes: tuple[str, ...], what: str,
           otherwise: str) -> JavaOnlyProperty:
    return JavaOnlyProperty(
        name, clients, lambda text: text in classes,  # Java requires one class: empty is refused
        f"kctl {what} record bytes unchanged, as only {_SERDE[:-1]}'s "
        + ", ".join(c.rsplit(".", 1)[1] for c in classes[:-1]) + " and " + classes[-1].rsplit(".", 1)[1]
        + f" do; another class would {otherwise}")


def _utf8(name: str, clients: frozenset[str]) -> JavaOnlyProperty:
    return JavaOnlyProperty(name, clients, _one_of("UTF8", "UTF-8"),
                            "kctl's text is UTF-8, as StringSerializer's and StringDeserializer's default; use UTF8")


def _default_only(name: str, honours: Callable[[str], bool], instead: str) -> JavaOnlyProperty:
    return JavaOnlyProperty(name, _BOTH, honours, instead)


JAVA_ONLY_PROPERTIES: tuple[JavaOnlyProperty, ...] = (
    # Serialization: only the classes that pass kctl's bytes through.
    _serde("key.serializer", _PRODUCER, BYTES_SERIALIZERS, "sends", _OTHER_BYTES),
    _serde("value.serializer", _PRODUCER, BYTES_SERIALIZERS, "sends", _OTHER_BYTES),
    _serde("key.deserializer", _CONSUMER, BYTES_DESERIALIZERS, "reads", _OTHER_RESULTS),
    _serde("value.deserializer", _CONSUMER, BYTES_DESERIALIZERS, "reads", _OTHER_RESULTS),
    _utf8("serializer.encoding", _PRODUCER),
    _utf8("key.serializer.encoding", _PRODUCER),
    _utf8("value.serializer.encoding", _PRODUCER),
    _utf8("deserializer.encoding", _CONSUMER),
    _utf8("key.deserializer.encoding", _CONSUMER),
    _utf8("value.deserializer.encoding", _CONSUMER),
    # Java code run inside the client: only the empty list runs nothing.
    JavaOnlyProperty("interceptor.classes", _BOTH, _empty,
                     f"interceptors can change or drop records and {_JAVA_CODE}; leave it empty"),
    JavaOnlyProperty("config.providers", _BOTH, _empty,
                     "config providers would resolve ${provider:...} references in other values and "
                     f"{_JAVA_CODE}; give the values themselves (secrets as @file)"),
    JavaOnlyProperty("security.providers", _BOTH, _empty,
                     f"security providers replace the TLS/SASL implementations and {_JAVA_CODE}"),
    JavaOnlyProperty("metric.reporters", _BOTH, _classes(JMX_REPORTER),
                     f"a reporter other than JmxReporter may send metrics elsewhere and {_JAVA_CODE}; "
                     "leave it empty or JmxReporter",
                     note=f"JmxReporter: {_LOCAL_METRICS}"),
    # Local metrics: change nothing on the wire.
    JavaOnlyProperty("auto.include.jmx.reporter", _BOTH, _one_of("true", "false"), "expected true or false",
                     note=_LOCAL_METRICS),
    JavaOnlyProperty("metrics.num.samples", _BOTH, _int_in(1, 2**31 - 1), "expected an integer >= 1",
                     note=_LOCAL_METRICS),
    JavaOnlyProperty("metrics.recording.level", _BOTH, _one_of("INFO", "DEBUG", "TRACE"),
                     "expected INFO, DEBUG or TRACE", note=_LOCAL_METRICS),
    JavaOnlyProperty("metrics.sample.window.ms", _BOTH, _int_in(0, 2**63 - 1),
                     "expected a number of milliseconds >= 0", note=_LOCAL_METRICS),
    JavaOnlyProperty("enable.metrics.push", _BOTH, _one_of("false"),
                     "kctl never sends GetTelemetrySubscriptions or PushTelemetry (KIP-714 client "
                     "metrics), as the Java client with enable.metrics.push=false; set false or leave it out"),
    # Behaviours kctl does not have: only the value that turns them off.
    JavaOnlyProperty("client.dns.lookup", _BOTH, _one_of("use_all_dns_ips"),
                     "kctl resolves every address as given and tries each of its IPs in turn, as "
                     "use_all_dns_ips (Java's default) does; it does not resolve canonical names"),
    JavaOnlyProperty("metadata.recovery.strategy", _BOTH, _one_of("none"),
                     "kctl does not rebootstrap (KIP-899): it keeps retrying the brokers it knows, as "
                     "metadata.recovery.strategy=none does; set none"),
    JavaOnlyProperty("metadata.recovery.rebootstrap.trigger.ms", _BOTH, _int_in(0, 2**63 - 1),
                     "expected a number of milliseconds >= 0"),
    JavaOnlyProperty("group.remote.assignor", _CONSUMER, _empty,
                     "it picks the broker-side assignor of group.protocol=consumer (KIP-848), which kctl "
                     "does not support; kctl's classic protocol uses partition.assignment.strategy"),
    JavaOnlyProperty("transaction.two.phase.commit.enable", _PRODUCER, _one_of("false"),
                     "kctl does not take part in two-phase commit (KIP-939); set false or leave it out"),
    # TLS.
    JavaOnlyProperty("ssl.protocol", _BOTH, _one_of("TLSv1.3", "TLS"),
                     "kctl negotiates TLS 1.2 or 1.3, as Java's default TLSv1.3 does; set TLSv1.3"),
    JavaOnlyProperty("ssl.enabled.protocols", _BOTH, _kctl_tls_versions,
                     "kctl offers TLSv1.2 and TLSv1.3, Java's default; set TLSv1.2,TLSv1.3"),
    JavaOnlyProperty("ssl.provider", _BOTH, _empty, f"kctl uses OpenSSL; {_JAVA_CODE}"),
    JavaOnlyProperty("ssl.engine.factory.class", _BOTH, _empty, f"kctl uses OpenSSL; {_JAVA_CODE}"),
    JavaOnlyProperty("ssl.secure.random.implementation", _BOTH, _empty,
                     "kctl uses OpenSSL's random generator"),
    JavaOnlyProperty("ssl.keymanager.algorithm", _BOTH, _one_of("SunX509"), _PEM),
    JavaOnlyProperty("ssl.trustmanager.algorithm", _BOTH, _one_of("PKIX"), _PEM),
    JavaOnlyProperty("ssl.keystore.type", _BOTH, _one_of("JKS"), _PEM),
    JavaOnlyProperty("ssl.truststore.type", _BOTH, _one_of("JKS"), _PEM),
    JavaOnlyProperty("ssl.keystore.location", _BOTH, _empty, _PEM),
    JavaOnlyProperty("ssl.truststore.location", _BOTH, _empty, _PEM),
    JavaOnlyProperty("ssl.keystore.certificate.chain", _BOTH, _empty, _PEM),
    JavaOnlyProperty("ssl.truststore.certificates", _BOTH, _empty, _PEM),
    JavaOnlyProperty("ssl.keystore.key", _BOTH, _empty, _PEM + " (with ssl.key.password)", secret=True),
    JavaOnlyProperty("ssl.keystore.password", _BOTH, _empty, _PEM, secret=True),
    JavaOnlyProperty("ssl.truststore.password", _BOTH, _empty, _PEM, secret=True),
    # SASL: Java classes, Kerberos, OAuth; their defaults configure nothing here.
    JavaOnlyProperty("sasl.client.callback.handler.class", _BOTH, _empty, _LOGIN),
    JavaOnlyProperty("sasl.login.callback.handler.class", _BOTH, _empty, _LOGIN),
    JavaOnlyProperty("sasl.login.class", _BOTH, _empty, _LOGIN),
    _default_only("sasl.kerberos.service.name", _empty, _KERBEROS),
    _default_only("sasl.kerberos.kinit.cmd", _one_of("/usr/bin/kinit"), _KERBEROS),
    _default_only("sasl.kerberos.ticket.renew.window.factor", _number(0.8), _KERBEROS),
    _default_only("sasl.kerberos.ticket.renew.jitter", _number(0.05), _KERBEROS),
    _default_only("sasl.kerberos.min.time.before.relogin", _number(60000), _KERBEROS),
    _default_only("sasl.login.refresh.window.factor", _number(0.8), _OAUTH),
    _default_only("sasl.login.refresh.window.jitter", _number(0.05), _OAUTH),
    _default_only("sasl.login.refresh.min.period.seconds", _number(60), _OAUTH),
    _default_only("sasl.login.refresh.buffer.seconds", _number(300), _OAUTH),
    _default_only("sasl.login.connect.timeout.ms", _empty, _OAUTH),
    _default_only("sasl.login.read.timeout.ms", _empty, _OAUTH),
    _default_only("sasl.login.retry.backoff.ms", _number(100), _OAUTH),
    _default_only("sasl.login.retry.backoff.max.ms", _number(10000), _OAUTH),
    _default_only("sasl.oauthbearer.token.endpoint.url", _empty, _OAUTH),
    _default_only("sasl.oauthbearer.jwks.endpoint.url", _empty, _OAUTH),
    _default_only("sasl.oauthbearer.jwks.endpoint.refresh.ms", _number(3600000), _OAUTH),
    _default_only("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _number(100), _OAUTH),
    _default_only("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _number(10000), _OAUTH),
    _default_only("sasl.oauthbearer.scope.claim.name", _one_of("scope"), _OAUTH),
    _default_only("sasl.oauthbearer.sub.claim.name", _one_of("sub"), _OAUTH),
    _default_only("sasl.oauthbearer.clock.skew.seconds", _number(30), _OAUTH),
    _default_only("sasl.oauthbearer.expected.audience", _empty, _OAUTH),
    _default_only("sasl.oauthbearer.expected.issuer", _empty, _OAUTH),
    _default_only("sasl.oauthbearer.header.urlencode", _one_of("false"), _OAUTH),
)

JAVA_ONLY_BY_NAME: dict[str, JavaOnlyProperty] = {p.name: p for p in JAVA_ONLY_PROPERTIES}

#: What kctl implements of the ssl.* and sasl.* families, for a name in neither table.
SSL_SASL_SUPPORTED = (_PEM + "; SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 with sasl.mechanism, "
                      "sasl.username, sasl.password or sasl.jaas.config")


def is_java_only(name: str, client: str) -> bool:
    """Whether ``name`` is a Java ``client`` property judged here (the table, or any other
    ``ssl.*`` / ``sasl.*`` name, all refused), rather than an unknown name."""
    prop = JAVA_ONLY_BY_NAME.get(name)
    if prop is not None:
        return client in prop.clients
    return name.startswith(("ssl.", "sasl."))


def _where(origin: str | None) -> str:
    return f"{origin}: " if origin else ""


def _refusal(client: str, name: str, shown: str, origin: str | None, instead: str) -> ConfigError:
    return ConfigError(f"{_where(origin)}{client} property {name}={shown} is refused: {instead}")


def accept_java_only(name: str, value: Any, origin: str | None, client: str) -> str | None:
    """For a name ``is_java_only`` holds: the warning to show when ``value`` is one kctl
    honours (None: accepted silently); a ``ConfigError`` naming property, value, origin
    and what kctl supports instead otherwise."""
    text = java_only_text(value)
    prop = JAVA_ONLY_BY_NAME.get(name)
    if prop is None:  # an ssl.* / sasl.* name of neither table
        secret = any(word in name for word in ("password", "key", "secret", "token"))
        raise _refusal(client, name, "[redacted]" if secret else repr(text), origin, SSL_SASL_SUPPORTED)
    if not prop.honours(text):
        raise _refusal(client, name, "[redacted]" if prop.secret else repr(text), origin, prop.instead)
    if not prop.note:
        return None
    return f"{_where(origin)}{client} property {name}={text!r} changes nothing kctl does: {prop.note}"


class JavaOnlySettings:
    """The Java-only settings of one configuration as ``from_settings`` meets them: each
    judged by ``take``, the accepted ones kept (a later one replacing an earlier), their
    notes added to ``warnings``; ``check_together`` then applies the rules across them."""

    def __init__(self, client: str, warnings: list[str]) -> None:
        self.client = client
        self.warnings = warnings
        self.given: dict[str, tuple[Any, str | None]] = {}  # name -> (value, origin)

    def take(self, name: str, value: Any, origin: str | None) -> bool:
        """False when ``name`` is no Java-only property of this client (so: unknown);
        True when accepted; ``ConfigError`` when refused."""
        if not is_java_only(name, self.client):
            return False
        note = accept_java_only(name, value, origin, self.client)
        if note:
            self.warnings.append(note)
        self.given[name] = (value, origin)
        return True

    def check_together(self) -> tuple[tuple[str, str], ...]:
        """The rules across settings; the accepted (name, value) pairs."""
        trigger = self.given.get("metadata.recovery.rebootstrap.trigger.ms")
        if trigger is not None and "metadata.recovery.strategy" not in self.given:
            raise _refusal(
                self.client, "metadata.recovery.rebootstrap.trigger.ms", repr(java_only_text(trigger[0])),
                trigger[1], "it times rebootstrapping (metadata.recovery.strategy=rebootstrap, Java 4.0's "
                "default), which kctl does not do; set metadata.recovery.strategy=none beside it, or leave it out")
        return tuple((name, java_only_text(value)) for name, (value, _) in self.given.items())


__all__ = [
    "BYTES_DESERIALIZERS", "BYTES_SERIALIZERS", "CONSUMER", "JAVA_ONLY_BY_NAME", "JAVA_ONLY_PROPERTIES",
    "JMX_REPORTER", "JavaOnlyProperty", "PRODUCER", "SSL_SASL_SUPPORTED", "accept_java_only",
    "JavaOnlySettings", "is_java_only", "java_only_text",
]
