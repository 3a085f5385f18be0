"""Producer configuration: Kafka's property names, the Java producer's defaults.

How this works
--------------
Users give settings as ``-X name=value`` pairs and Java ``.properties`` files,
exactly as they would to ``kafka-producer-perf-test`` or a Java producer. Each
becomes a ``Setting`` that remembers where it came from (``file:line``), so an
error can point at it. ``ProducerConfig.from_settings`` checks every setting
against ``PROPERTIES`` (one table: name, type, range or choices, default) and
then applies the Java producer's cross-field rules (idempotence, delivery
timeout, backoffs), producing one frozen, typed ``ProducerConfig``.

Components never see that whole object or a dict: each takes the typed piece
it needs (``config.accumulator``, ``config.sender``, ``config.network``, ...).

Choices worth knowing
---------------------
* Defaults are the Java producer's as of Kafka 4.0 (for Kafka 3.x, only
  ``linger.ms`` differs: 0 there, 5 since KIP-1030 in 4.0).
* A property kctl does not know at all is an error, with a did-you-mean
  suggestion: a typo (``lingr.ms``) silently ignored would make a benchmark
  measure the wrong thing. A Java producer property for machinery kctl does not
  have (``key.serializer``, ``interceptor.classes``, ``metric.reporters``, key
  stores, ...) is judged by its value (``kctl/java_properties.py``, one table for
  producer and consumer): accepted where Java would then do what kctl does
  (``ByteArraySerializer``, an empty class list), refused with one line
  otherwise, so a typical ``producer.properties`` works unchanged and nothing is
  accepted and ignored. The accepted pairs are kept in ``ProducerConfig.java_only``.
* librdkafka's names (``queue.buffering.max.ms``, ``compression.codec``,
  ``queue.buffering.max.kbytes`` in KiB, ...) are accepted where they mean what a Java
  property means (``LIBRDKAFKA_ALIASES``: renamed, the value converted where units
  differ); one whose meaning differs (``batch.num.messages``: a record count, where
  the Java producer bounds batches in bytes) is refused naming the Java property.
* Values are parsed as the Java client parses them: integers are plain
  decimal (durations are milliseconds, sizes bytes, no unit suffixes),
  booleans are ``true``/``false`` in any case; choices are case-sensitive where
  Java's validator is (``ValidString``: ``acks=all``, ``compression.type=gzip``,
  ``isolation.level``, ``auto.offset.reset``, and ``sasl.mechanism``, whose SASL
  names are) and not where it is not (``CaseInsensitiveValidString``:
  ``security.protocol``, ``group.protocol``); a value wrong only in its case is
  refused saying so.
* Like the Java client (4.x), a rule broken only because of a default is fixed
  quietly (with a warning) and a rule broken by explicit settings is an error:
  idempotence is disabled when ``acks`` or ``retries`` conflict with it unless the
  user set ``enable.idempotence`` themselves; ``max.in.flight.requests.per.connection``
  above 5 is an error unless ``enable.idempotence=false`` is set (Java 3.x disabled
  idempotence with a warning, 4.0 made it an error: ProducerConfig's
  ``postProcessAndValidateIdempotenceConfigs``); ``delivery.timeout.ms`` is raised to
  ``linger.ms + request.timeout.ms`` unless the user set it.
* Constructing ``ProducerConfig(...)`` directly is strict: every field is
  treated as explicit, so an inconsistent combination is an error.
* ``.properties`` files are read as UTF-8 (falling back to ISO-8859-1, which
  ``java.util.Properties.load(InputStream)`` uses); escapes, ``\\uXXXX``,
  continuation lines and ``#``/``!`` comments follow ``Properties.load``.
"""

from __future__ import annotations

import difflib
import enum
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kctl.cipher_suites import JDK17_CIPHER_SUITES, TLS13_CIPHER_SUITES
from kctl.errors import ConfigError
from kctl.jaas import parse_jaas_config
from kctl.java_properties import JAVA_ONLY_PROPERTIES, PRODUCER, JavaOnlySettings

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


# --------------------------------------------------------------------------
# Enumerations


class CompressionType(str, enum.Enum):
    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


class PartitionerKind(str, enum.Enum):
    """Which partitioner places records (``partitioner.class``; kctl's alias ``partitioner``).

    * ``default``: the Java producer's built-in partitioner (Kafka 3.3+):
      murmur2 of the key for keyed records, KIP-794 uniform sticky for
      keyless ones (switch after ``batch.size`` bytes, adaptive if enabled).
    * ``sticky``: sticky for every record, keys ignored (Java's
      ``UniformStickyPartitioner``; the same as ``default`` with
      ``partitioner.ignore.keys=true``).
    * ``murmur2``: the pre-3.3 ``DefaultPartitioner``: murmur2 for keyed
      records, KIP-480 sticky for keyless ones (switch when a new batch is
      created for the sticky partition).
    * ``round_robin``: every record to the next available partition in turn,
      keys ignored (Java's ``RoundRobinPartitioner``).
    """

    DEFAULT = "default"
    STICKY = "sticky"
    MURMUR2 = "murmur2"
    ROUND_ROBIN = "round_robin"


# Java class names users carry over from existing properties files.
PARTITIONER_CLASS_NAMES: dict[str, PartitionerKind] = {
    "org.apache.kafka.clients.producer.RoundRobinPartitioner": PartitionerKind.ROUND_ROBIN,
    "org.apache.kafka.clients.producer.UniformStickyPartitioner": PartitionerKind.STICKY,
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": PartitionerKind.MURMUR2,
}


class SecurityProtocol(str, enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


SUPPORTED_SECURITY_PROTOCOLS = frozenset(SecurityProtocol)


class SaslMechanism(str, enum.Enum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


# Properties whose values are secrets: never printed, logged, or written to a summary.
# Each may be given as ``@/path/to/file`` (the file's content, trailing newline dropped)
# so the secret stays off the command line; ``sasl.password`` may also come from the
# environment variable below when not set at all.
# The Java-only secrets (key store passwords, an inline private key) are refused unless empty,
# and redacted wherever a setting is shown.
SECRET_PROPERTIES: frozenset[str] = frozenset(
    {"sasl.password", "ssl.key.password", "sasl.jaas.config"} | {p.name for p in JAVA_ONLY_PROPERTIES if p.secret})
SASL_PASSWORD_ENV = "KCTL_SASL_PASSWORD"
REDACTED = "[redacted]"


def redact_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """``properties`` with every secret's value replaced by ``[redacted]``, for output."""
    return {k: (REDACTED if k in SECRET_PROPERTIES and v not in (None, "") else v)
            for k, v in properties.items()}


# --------------------------------------------------------------------------
# Settings as given, with where they came from


@dataclass(frozen=True, slots=True)
class Setting:
    """One ``name=value`` as the user gave it. ``origin`` is ``path:line`` for a
    properties file, or ``None`` when the name alone says enough (``-X``)."""

    name: str
    value: Any
    origin: str | None = None

    def __repr__(self) -> str:
        value = REDACTED if self.name in SECRET_PROPERTIES else repr(self.value)
        return f"Setting({self.name!r}, {value}, {self.origin!r})"


def _at(origin: str | None) -> str:
    return f"{origin}: " if origin else ""


def parse_assignment(text: str, origin: str | None = None, *, what: str = "producer") -> Setting:
    """``"linger.ms=5"`` (a ``-X`` option) into a ``Setting``; ``what``: whose property
    (``producer`` or ``consumer``), for the error message."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        example = "linger.ms=5" if what == "producer" else "fetch.min.bytes=1"
        raise ConfigError(
            f"{_at(origin)}expected a {what} property as name=value, got {text!r} "
            f"(for example {example})"
        )
    return Setting(name, value.strip(), origin)


_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(line number, logical line) per java.util.Properties: comments and blank
    lines skipped, continuation lines (odd number of trailing backslashes)
    joined with the next line's leading whitespace dropped."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue  # a comment line is never continued
        parts = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1:
                parts.append(line[:-1])
                if i >= len(lines):
                    break
                line = lines[i].lstrip(_WHITESPACE)
                i += 1
            else:
                parts.append(line)
                break
        yield start + 1, "".join(parts)


def _unescape(raw: str, where: str) -> str:
    out = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        i += 1
        if i >= len(raw):
            break  # a lone trailing backslash is dropped, as Java does
        ch = raw[i]
        if ch == "u":
            digits = raw[i + 1 : i + 5]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"{where}malformed \\uxxxx escape {raw[i - 1 : i + 5]!r}")
            out.append(chr(int(digits, 16)))
            i += 5
        else:
            out.append(_ESCAPES.get(ch, ch))
            i += 1
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str, source: str = "<properties>") -> list[Setting]:
    """A Java ``.properties`` text into settings, each with origin ``source:line``."""
    settings = []
    for line_no, line in _logical_lines(text):
        origin = f"{source}:{line_no}"
        raw_key, raw_value = _split_key_value(line)
        where = _at(origin)
        settings.append(Setting(_unescape(raw_key, where), _unescape(raw_value, where), origin))
    return settings


def load_properties_file(path: str | Path, what: str = "producer") -> list[Setting]:
    """Read a ``.properties`` file; errors name the file (``what``: whose properties it holds)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} properties file {str(path)!r}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text, str(path))


# --------------------------------------------------------------------------
# Typed values


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


DEFAULT_KAFKA_PORT = 9092


def parse_broker_address(text: str) -> BrokerAddress:
    """``host:port``, ``[v6]:port`` or ``PLAINTEXT://host:port``; a missing port is 9092
    (as kcat and librdkafka do; the Java client insists on a port)."""
    rest = text.strip()
    if "://" in rest:
        rest = rest.split("://", 1)[1]
    if rest.startswith("["):
        host, bracket, tail = rest[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise ValueError(f"bad address {text!r}")
        port_text = tail[1:] if tail else ""
    elif rest.count(":") > 1:
        raise ValueError(f"bad address {text!r} (write IPv6 hosts as [host]:port)")
    else:
        host, _, port_text = rest.partition(":")
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"bad address {text!r}")
    if not port_text:
        return BrokerAddress(host, DEFAULT_KAFKA_PORT)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bad port in {text!r}")
    return BrokerAddress(host, int(port_text))


class _Invalid(Exception):
    """A value does not parse or is out of range; the text says what is allowed."""


_INT_RE = re.compile(r"[+-]?[0-9]+")


def _parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _Invalid("")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
        return int(value.strip())
    raise _Invalid("")


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "true":
            return True
        if text == "false":
            return False
    raise _Invalid("")


# --------------------------------------------------------------------------
# The property table


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """One producer property: its Kafka name, ``ProducerConfig`` field, default and rule."""

    name: str
    field: str
    default: Any
    parse: Callable[[Any], Any]
    allowed: str  # what a user may write, for error messages
    check: Callable[[Any], bool] = lambda _v: True
    doc: str = ""

    def to_text(self, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, enum.Enum):
            return str(value.value)
        if value is None:
            return ""
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        if self.name == "acks" and value == -1:
            return "all"
        return str(value)


def _int_spec(name: str, default: int, lo: int, hi: int, unit: str, doc: str = "", fld: str = "") -> PropertySpec:
    unit_text = {"ms": " number of milliseconds", "bytes": " number of bytes", "": ""}[unit]
    return PropertySpec(
        name=name,
        field=fld or name.replace(".", "_"),
        default=default,
        parse=_parse_int,
        allowed=f"an integer{unit_text} in [{lo}, {hi}]",
        check=lambda v, lo=lo, hi=hi: lo <= v <= hi,
        doc=doc,
    )


def _bool_spec(name: str, default: bool, doc: str = "") -> PropertySpec:
    return PropertySpec(name, name.replace(".", "_"), default, _parse_bool, "true or false", doc=doc)


def case_sensitive(text: str, choices: Iterable[str]) -> _Invalid:
    """The error for ``text`` not among ``choices`` (Java's ``ValidString``, which compares
    case-sensitively): when only its case is wrong, it says so."""
    for choice in choices:
        if text.lower() == choice.lower():
            return _Invalid(f"values are case-sensitive, as in the Java client: write {choice!r}")
    return _Invalid("")


def _enum_parser(choices: Mapping[str, Any]) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if isinstance(value, enum.Enum) and value in choices.values():
            return value
        if isinstance(value, str):
            key = value.strip()
            if key in choices:
                return choices[key]
            raise case_sensitive(key, choices)
        raise _Invalid("")

    return parse


def _parse_acks(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value in (-1, 0, 1):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text in ("all", "-1"):
            return -1
        if text in ("0", "1"):
            return int(text)
        raise case_sensitive(text, ("all",))
    raise _Invalid("")


def _parse_partitioner(value: Any) -> PartitionerKind:
    if isinstance(value, PartitionerKind):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text in PARTITIONER_CLASS_NAMES:
            return PARTITIONER_CLASS_NAMES[text]
        if text == "":
            return PartitionerKind.DEFAULT  # Java's default: no class, the built-in partitioner
        key = text.lower().replace("-", "_")
        for kind in PartitionerKind:
            if kind.value == key:
                return kind
    raise _Invalid("")


def _parse_security_protocol(value: Any) -> SecurityProtocol:
    if isinstance(value, SecurityProtocol):
        proto = value
    elif isinstance(value, str) and value.strip().upper() in SecurityProtocol.__members__:
        proto = SecurityProtocol[value.strip().upper()]
    else:
        raise _Invalid("")
    return proto


def _parse_sasl_mechanism(value: Any) -> SaslMechanism | None:
    """Case-sensitive, as SASL names are: the Java client finds no SASL client for
    ``scram-sha-256`` and a broker no mechanism for ``plain``."""
    if value is None or isinstance(value, SaslMechanism):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        for m in SaslMechanism:
            if m.value == text:
                return m
        if text.upper() in ("GSSAPI", "OAUTHBEARER"):
            raise _Invalid(f"{text} is a Kafka SASL mechanism but kctl does not support it; "
                           "use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        for m in SaslMechanism:
            if m.value == text.upper():
                raise _Invalid(f"SASL mechanism names are upper case: write {m.value} (the Java "
                               f"client would find no SASL client for {text!r})")
    raise _Invalid("")


def _parse_optional_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    raise _Invalid("")


def _parse_secret(value: Any) -> str | None:
    """A secret, or ``@path``: the file's content (one trailing newline dropped)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid("")
    if value.startswith("@"):
        path = value[1:]
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise _Invalid(f"cannot read the secret file {path!r}: {exc.strerror or exc}") from None
        return text[:-1] if text.endswith("\n") else text
    return value or None


def _parse_cipher_suites(value: Any) -> tuple[str, ...]:
    """``ssl.cipher.suites``: IANA names as Java takes them; empty: JDK 17's enabled list."""
    if isinstance(value, (tuple, list)):
        names = [str(v).strip() for v in value]
    elif isinstance(value, str):
        names = [v.strip() for v in value.split(",")]
    else:
        raise _Invalid("")
    names = list(dict.fromkeys(n for n in names if n))
    unknown = [n for n in names if n not in JDK17_CIPHER_SUITES]
    if unknown:
        raise _Invalid(f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not among the "
                       "suites JDK 17 enables (IANA names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
    tls13 = [n for n in names if n in TLS13_CIPHER_SUITES]
    if tls13 and len(tls13) != len(TLS13_CIPHER_SUITES):
        raise _Invalid("kctl (Python's ssl) offers the TLS 1.3 suites all or none: list all of "
                       + ", ".join(TLS13_CIPHER_SUITES) + " or none of them (then TLS 1.2 only)")
    return tuple(names)


def _parse_endpoint_algorithm(value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() in ("", "https"):
        return value.strip().lower()
    raise _Invalid("")


def _parse_servers(value: Any) -> tuple[BrokerAddress, ...]:
    if isinstance(value, (tuple, list)):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    else:
        raise _Invalid("")
    out = []
    for item in items:
        if not item:
            continue
        try:
            out.append(item if isinstance(item, BrokerAddress) else parse_broker_address(item))
        except ValueError as exc:
            raise _Invalid(f"{exc}; expected a comma-separated list of host:port") from None
    return tuple(out)


def _parse_str(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    raise _Invalid("")


def _parse_transactional_id(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise _Invalid("")


def _gzip_level_ok(level: int) -> bool:
    return level == -1 or 1 <= level <= 9


_COMPRESSION_CHOICES = {c.value: c for c in CompressionType}

PROPERTIES: tuple[PropertySpec, ...] = (
    PropertySpec(
        "bootstrap.servers", "bootstrap_servers", (), _parse_servers,
        "a comma-separated list of host:port",
        doc="Brokers to fetch metadata from; empty means kctl starts its embedded broker.",
    ),
    PropertySpec("client.id", "client_id", "", _parse_str, "any string",
                 doc="Sent in every request header; not set, each load worker sends kctl-producer-<worker> "
                     "(set empty, an empty id, as in the Java producer)."),
    PropertySpec("acks", "acks", -1, _parse_acks, "all, -1, 0 or 1", doc="-1 is all."),
    _int_spec("linger.ms", 5, 0, INT_MAX, "ms", "Kafka 4.0 default (KIP-1030); Kafka 3.x used 0."),
    _int_spec("batch.size", 16384, 0, INT_MAX, "bytes"),
    _int_spec("buffer.memory", 33554432, 0, LONG_MAX, "bytes"),
    PropertySpec("compression.type", "compression_type", CompressionType.NONE,
                 _enum_parser(_COMPRESSION_CHOICES), "none, gzip, snappy, lz4 or zstd"),
    PropertySpec("compression.gzip.level", "compression_gzip_level", -1, _parse_int,
                 "-1 (zlib's default) or an integer in [1, 9]", check=_gzip_level_ok),
    _int_spec("compression.lz4.level", 9, 1, 17, ""),
    _int_spec("compression.zstd.level", 3, -131072, 22, ""),
    _int_spec("max.request.size", 1048576, 0, INT_MAX, "bytes"),
    _int_spec("max.block.ms", 60000, 0, LONG_MAX, "ms"),
    _int_spec("request.timeout.ms", 30000, 0, INT_MAX, "ms"),
    _int_spec("delivery.timeout.ms", 120000, 0, INT_MAX, "ms",
              "Must be >= linger.ms + request.timeout.ms."),
    _int_spec("retries", INT_MAX, 0, INT_MAX, ""),
    _int_spec("retry.backoff.ms", 100, 0, LONG_MAX, "ms"),
    _int_spec("retry.backoff.max.ms", 1000, 0, LONG_MAX, "ms"),
    _int_spec("reconnect.backoff.ms", 50, 0, LONG_MAX, "ms"),
    _int_spec("reconnect.backoff.max.ms", 1000, 0, LONG_MAX, "ms"),
    _int_spec("max.in.flight.requests.per.connection", 5, 1, INT_MAX, ""),
    _bool_spec("enable.idempotence", True),
    PropertySpec("transactional.id", "transactional_id", None, _parse_transactional_id,
                 "a non-empty string"),
    _int_spec("transaction.timeout.ms", 60000, 1, INT_MAX, "ms"),
    _int_spec("metadata.max.age.ms", 300000, 0, LONG_MAX, "ms"),
    _int_spec("metadata.max.idle.ms", 300000, 5000, LONG_MAX, "ms",
              "A topic not sent to for this long leaves the Metadata requests until sent to again."),
    PropertySpec("partitioner.class", "partitioner", PartitionerKind.DEFAULT, _parse_partitioner,
                 "default, sticky, murmur2, round_robin, or one of the Java classes "
                 + ", ".join(PARTITIONER_CLASS_NAMES)),
    _bool_spec("partitioner.ignore.keys", False),
    _bool_spec("partitioner.adaptive.partitioning.enable", True),
    _int_spec("partitioner.availability.timeout.ms", 0, 0, LONG_MAX, "ms"),
    PropertySpec("security.protocol", "security_protocol", SecurityProtocol.PLAINTEXT,
                 _parse_security_protocol, "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    PropertySpec("ssl.ca.location", "ssl_ca_location", None, _parse_optional_str,
                 "a PEM file of trusted CA certificates",
                 doc="Empty: the system's trusted CAs."),
    PropertySpec("ssl.certificate.location", "ssl_certificate_location", None, _parse_optional_str,
                 "a PEM file with the client certificate (chain)"),
    PropertySpec("ssl.key.location", "ssl_key_location", None, _parse_optional_str,
                 "a PEM file with the client's private key"),
    PropertySpec("ssl.key.password", "ssl_key_password", None, _parse_secret,
                 "the private key's password, or @file", doc="Secret."),
    PropertySpec("ssl.endpoint.identification.algorithm", "ssl_endpoint_identification_algorithm",
                 "https", _parse_endpoint_algorithm, "https, or empty to skip host name verification"),
    PropertySpec("ssl.cipher.suites", "ssl_cipher_suites", (), _parse_cipher_suites,
                 "a comma-separated list of IANA cipher suite names",
                 doc="Empty: the suites JDK 17 enables by default. TLS 1.2 suites, and the three "
                     "TLS 1.3 suites all together or none (then TLS 1.2 only)."),
    PropertySpec("sasl.mechanism", "sasl_mechanism", None, _parse_sasl_mechanism,
                 "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                 doc="Needed with SASL: the Java client's default, GSSAPI, is not supported."),
    PropertySpec("sasl.username", "sasl_username", None, _parse_optional_str, "a user name"),
    PropertySpec("sasl.password", "sasl_password", None, _parse_secret,
                 "a password, or @file", doc=f"Secret; default: ${SASL_PASSWORD_ENV}."),
    PropertySpec("sasl.jaas.config", "sasl_jaas_config", None, _parse_secret,
                 "a PlainLoginModule or ScramLoginModule JAAS entry with username and password, or @file",
                 doc="Secret; one login module, read as the Java client reads it (bare or quoted values); "
                     "sasl.username/sasl.password take precedence."),
    _int_spec("socket.connection.setup.timeout.ms", 10000, 0, LONG_MAX, "ms"),
    _int_spec("socket.connection.setup.timeout.max.ms", 30000, 0, LONG_MAX, "ms"),
    _int_spec("send.buffer.bytes", 131072, -1, INT_MAX, "bytes", "-1 uses the OS default."),
    _int_spec("receive.buffer.bytes", 32768, -1, INT_MAX, "bytes", "-1 uses the OS default."),
    _int_spec("connections.max.idle.ms", 540000, -1, LONG_MAX, "ms", "-1 never closes idle connections."),
)

PROPERTY_BY_NAME: dict[str, PropertySpec] = {spec.name: spec for spec in PROPERTIES}

# kctl's own short names for Kafka properties.
ALIASES: dict[str, str] = {"partitioner": "partitioner.class"}


def _kib_to_bytes(value: Any) -> Any:
    text = str(value).strip()
    return str(int(text) * 1024) if _INT_RE.fullmatch(text) else value


def _zero_is_os_default(value: Any) -> Any:
    return "-1" if str(value).strip() == "0" else value


# librdkafka's names (kcat, confluent-kafka users) for Java producer properties that mean the
# same: name -> (Java name, value conversion or None). From librdkafka's CONFIGURATION.md.
LIBRDKAFKA_ALIASES: dict[str, tuple[str, Callable[[Any], Any] | None]] = {
    "queue.buffering.max.ms": ("linger.ms", None),
    "compression.codec": ("compression.type", None),
    "request.required.acks": ("acks", None),
    "message.send.max.retries": ("retries", None),
    "message.timeout.ms": ("delivery.timeout.ms", None),
    "message.max.bytes": ("max.request.size", None),
    # librdkafka counts KiB here; buffer.memory is bytes.
    "queue.buffering.max.kbytes": ("buffer.memory", _kib_to_bytes),
    "socket.timeout.ms": ("request.timeout.ms", None),
    "metadata.broker.list": ("bootstrap.servers", None),
    "max.in.flight": ("max.in.flight.requests.per.connection", None),
    "topic.metadata.refresh.interval.ms": ("metadata.max.age.ms", None),
    "sasl.mechanisms": ("sasl.mechanism", None),
    # librdkafka's 0 means the OS default, the Java client's -1 does.
    "socket.send.buffer.bytes": ("send.buffer.bytes", _zero_is_os_default),
    "socket.receive.buffer.bytes": ("receive.buffer.bytes", _zero_is_os_default),
}

# librdkafka properties whose meaning differs from every Java property: refused, naming
# the Java property that does the nearest job, rather than mapped to something else.
LIBRDKAFKA_DIFFERENT: dict[str, str] = {
    "batch.num.messages": "librdkafka's batch.num.messages caps the records in a batch; the Java "
                          "producer has no record-count limit and bounds a batch in bytes with batch.size",
    "queue.buffering.max.messages": "librdkafka's queue.buffering.max.messages counts queued records; "
                                    "the Java producer bounds its queue in bytes with buffer.memory",
    "compression.level": "librdkafka's compression.level applies to whichever codec is chosen; the Java "
                         "producer has compression.gzip.level, compression.lz4.level and compression.zstd.level",
    "sticky.partitioning.linger.ms": "librdkafka switches sticky partitions after a time; the Java producer "
                                     "switches after batch.size bytes (partitioner.class, "
                                     "partitioner.adaptive.partitioning.enable)",
    "queue.buffering.backpressure.threshold": "the Java producer has no such limit; the nearest is "
                                              "max.in.flight.requests.per.connection",
}


def canonical_setting(setting: Setting) -> Setting:
    """``setting`` under its Java name: a librdkafka alias is renamed (its value converted
    where the units differ); a librdkafka property whose meaning differs is refused."""
    return _librdkafka_to_java(setting, LIBRDKAFKA_ALIASES, LIBRDKAFKA_DIFFERENT)


def _librdkafka_to_java(setting: Setting,
                        aliases: Mapping[str, tuple[str, Callable[[Any], Any] | None]],
                        different: Mapping[str, str]) -> Setting:
    """``setting`` through one client's librdkafka tables (``aliases``: librdkafka name ->
    Java name and value conversion; ``different``: names refused, with the reason). A
    renamed setting's origin names the librdkafka spelling it came from."""
    if setting.name in different:
        raise ConfigError(f"{_at(setting.origin)}{setting.name} is not supported: {different[setting.name]}")
    alias = aliases.get(setting.name)
    if alias is None:
        return setting
    java, convert = alias
    value = convert(setting.value) if convert else setting.value
    if java == setting.name:
        return setting if value == setting.value else Setting(java, value, setting.origin)
    origin = f"{setting.origin} {setting.name}" if setting.origin else setting.name
    return Setting(java, value, origin)

# --------------------------------------------------------------------------
# The typed pieces each component takes


#: compression.lz4.level's default; the Java client compresses it with lz4's fast mode.
LZ4_DEFAULT_LEVEL = 9
#: The codec level that means lz4's fast (not high-compression) mode.
LZ4_FAST_LEVEL = 0


@dataclass(frozen=True, slots=True)
class CompressionConfig:
    type: CompressionType
    level: int | None  # the codec's level; None when it has no level (none, snappy)


@dataclass(frozen=True, slots=True)
class BufferPoolConfig:
    buffer_memory: int
    batch_size: int  # the poolable size
    max_block_ms: int


@dataclass(frozen=True, slots=True)
class AccumulatorConfig:
    batch_size: int
    linger_ms: int
    compression: CompressionConfig
    delivery_timeout_ms: int
    retry_backoff_ms: int  # already capped by retry.backoff.max.ms
    retry_backoff_max_ms: int
    max_request_size: int  # drain limit per node and request
    # Adaptive partitioning: the accumulator measures per-partition queue sizes and
    # leader latency for the partitioner (Java's RecordAccumulator.PartitionerConfig).
    adaptive_partitioning_enable: bool
    partition_availability_timeout_ms: int


@dataclass(frozen=True, slots=True)
class SenderConfig:
    acks: int  # -1 (all), 0 or 1
    max_request_size: int
    request_timeout_ms: int
    delivery_timeout_ms: int
    retries: int
    retry_backoff_ms: int  # already capped by retry.backoff.max.ms
    retry_backoff_max_ms: int
    max_in_flight_requests_per_connection: int
    idempotence: bool

    @property
    def guarantee_message_order(self) -> bool:
        """Java's ``Sender.guaranteeMessageOrder``: mute a partition while its batch is in flight."""
        return self.max_in_flight_requests_per_connection == 1


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """What a connection needs for TLS and SASL (secrets kept out of ``repr``)."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True  # ssl.endpoint.identification.algorithm=https
    ssl_cipher_suites: tuple[str, ...] = ()  # IANA names; empty: JDK 17's enabled list
    sasl_mechanism: SaslMechanism | None = None  # set whenever uses_sasl (check_sasl)
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


PLAINTEXT_SECURITY = SecurityConfig()


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    bootstrap_servers: tuple[BrokerAddress, ...]
    client_id: str
    security_protocol: SecurityProtocol
    request_timeout_ms: int
    max_in_flight_requests_per_connection: int
    socket_connection_setup_timeout_ms: int
    socket_connection_setup_timeout_max_ms: int  # ExponentialBackoff: min(initial, max) is the first
    send_buffer_bytes: int  # -1: OS default
    receive_buffer_bytes: int  # -1: OS default
    connections_max_idle_ms: int  # -1: never
    reconnect_backoff_ms: int  # already capped by reconnect.backoff.max.ms
    reconnect_backoff_max_ms: int
    security: SecurityConfig = PLAINTEXT_SECURITY


@dataclass(frozen=True, slots=True)
class MetadataConfig:
    metadata_max_age_ms: int
    metadata_max_idle_ms: int | None  # None: topics never expire (the consumer's subscription)
    retry_backoff_ms: int
    retry_backoff_max_ms: int


@dataclass(frozen=True, slots=True)
class IdempotenceConfig:
    enabled: bool
    transactional_id: str | None
    transaction_timeout_ms: int


@dataclass(frozen=True, slots=True)
class PartitionerConfig:
    kind: PartitionerKind
    ignore_keys: bool
    adaptive_partitioning_enable: bool
    availability_timeout_ms: int
    sticky_batch_size: int  # KIP-794: switch the sticky partition after this many bytes


# --------------------------------------------------------------------------
# The whole producer configuration


@dataclass(frozen=True, kw_only=True)
class ProducerConfig:
    """Every producer setting, typed, under its Kafka name in snake_case.

    Build it with ``from_settings`` / ``from_properties`` / ``load`` to get the
    Java client's leniency for defaults; hand components the typed pieces.
    """

    bootstrap_servers: tuple[BrokerAddress, ...] = ()
    client_id: str = ""
    acks: int = -1
    linger_ms: int = 5  # Kafka 4.0's default (KIP-1030); 0 in Kafka 3.x
    batch_size: int = 16384
    buffer_memory: int = 33554432
    compression_type: CompressionType = CompressionType.NONE
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    max_request_size: int = 1048576
    max_block_ms: int = 60000
    request_timeout_ms: int = 30000
    delivery_timeout_ms: int = 120000
    retries: int = INT_MAX
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    max_in_flight_requests_per_connection: int = 5
    enable_idempotence: bool = True
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60000
    metadata_max_age_ms: int = 300000
    metadata_max_idle_ms: int = 300000
    partitioner: PartitionerKind = PartitionerKind.DEFAULT
    partitioner_ignore_keys: bool = False
    partitioner_adaptive_partitioning_enable: bool = True
    partitioner_availability_timeout_ms: int = 0
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_cipher_suites: tuple[str, ...] = ()
    sasl_mechanism: SaslMechanism | None = None  # Java's default GSSAPI: none kctl has
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_jaas_config: str | None = field(default=None, repr=False)
    socket_connection_setup_timeout_ms: int = 10000
    socket_connection_setup_timeout_max_ms: int = 30000
    send_buffer_bytes: int = 131072
    receive_buffer_bytes: int = 32768
    connections_max_idle_ms: int = 540000

    # Not settings: what the user wrote, and what kctl made of it.
    settings: tuple[Setting, ...] = field(default=(), compare=False, repr=False)
    # Java-only properties (kctl/java_properties.py) given with a value kctl honours.
    java_only: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for spec in PROPERTIES:
            value = getattr(self, spec.field)
            if spec.name in SECRET_PROPERTIES:  # already resolved: "@..." is no file name here
                if value is not None and not isinstance(value, str):
                    raise ConfigError(f"producer property {spec.name!r} must be a string")
                continue
            try:
                ok = spec.parse(value) == value and spec.check(value)
            except _Invalid:
                ok = False
            if not ok:
                raise ConfigError(_invalid_message(spec, value, None, ""))
        _check_rules(self, explicit=None, origins={})

    # -- building -----------------------------------------------------------

    @classmethod
    def from_settings(cls, settings: Iterable[Setting]) -> ProducerConfig:
        """Validate settings (later ones override earlier ones, as ``-X`` after a file)."""
        settings = tuple(settings)
        values: dict[str, Any] = {}
        origins: dict[str, str | None] = {}
        warnings: list[str] = []
        java_only = JavaOnlySettings(PRODUCER, warnings)
        for setting in settings:
            setting = canonical_setting(setting)
            name = ALIASES.get(setting.name, setting.name)
            spec = PROPERTY_BY_NAME.get(name)
            if spec is None:
                if not java_only.take(name, setting.value, setting.origin):
                    raise ConfigError(_unknown_message(setting))
                continue
            try:
                value = spec.parse(setting.value)
                if not spec.check(value):
                    raise _Invalid("")
            except _Invalid as exc:
                raise ConfigError(_invalid_message(spec, setting.value, setting.origin, str(exc))) from None
            values[spec.field] = value
            origins[spec.name] = setting.origin
        accepted_java_only = java_only.check_together()
        if "sasl_password" not in values and os.environ.get(SASL_PASSWORD_ENV):
            values["sasl_password"] = os.environ[SASL_PASSWORD_ENV]
        explicit = frozenset(origins)
        _resolve_defaults(values, explicit, warnings)
        common_client_rules(values, explicit, warnings)
        probe = _Fields({spec.field: values.get(spec.field, spec.default) for spec in PROPERTIES})
        _check_rules(probe, explicit=explicit, origins=origins)
        return cls(
            **values,
            settings=settings,
            java_only=accepted_java_only,
            warnings=tuple(warnings),
        )

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], origin: str | None = None) -> ProducerConfig:
        """From a ``{kafka name: value}`` mapping; values may be strings or Python values."""
        return cls.from_settings(Setting(k, v, origin) for k, v in properties.items())

    @classmethod
    def load(cls, files: Iterable[str | Path] = (), overrides: Iterable[str] = ()) -> ProducerConfig:
        """Properties files in order, then ``-X name=value`` overrides."""
        settings: list[Setting] = []
        for path in files:
            settings.extend(load_properties_file(path))
        settings.extend(parse_assignment(text) for text in overrides)
        return cls.from_settings(settings)

    def with_properties(self, properties: Mapping[str, Any]) -> ProducerConfig:
        """This configuration with more settings applied on top (a bench variant)."""
        return type(self).from_settings(
            self.settings + tuple(Setting(k, v) for k, v in properties.items())
        )

    def to_properties(self) -> dict[str, str]:
        """Every setting as Kafka writes it (``acks=all``), for summaries and reports;
        unset optional ones (``transactional.id``) are left out, secrets redacted."""
        return redact_properties({
            spec.name: spec.to_text(getattr(self, spec.field))
            for spec in PROPERTIES
            if getattr(self, spec.field) is not None
        })

    @property
    def explicit(self) -> frozenset[str]:
        """Kafka names of the properties the user set."""
        names = (LIBRDKAFKA_ALIASES.get(s.name, (s.name, None))[0] for s in self.settings)
        return frozenset(ALIASES.get(n, n) for n in names if ALIASES.get(n, n) in PROPERTY_BY_NAME)

    # -- the pieces -----------------------------------------------------------

    @property
    def compression(self) -> CompressionConfig:
        level = {
            CompressionType.GZIP: self.compression_gzip_level,
            CompressionType.LZ4: self.compression_lz4_level,
            CompressionType.ZSTD: self.compression_zstd_level,
        }.get(self.compression_type)
        if self.compression_type is CompressionType.LZ4 and level == LZ4_DEFAULT_LEVEL:
            # Java's Lz4BlockOutputStream: the default level uses lz4's fast compressor
            # ("for backward compatibility"); any other level its high compressor.
            level = LZ4_FAST_LEVEL
        return CompressionConfig(self.compression_type, level)

    @property
    def effective_retry_backoff_ms(self) -> int:
        # Java's ExponentialBackoff: the initial interval never exceeds the max.
        return min(self.retry_backoff_ms, self.retry_backoff_max_ms)

    @property
    def buffer_pool(self) -> BufferPoolConfig:
        return BufferPoolConfig(self.buffer_memory, self.batch_size, self.max_block_ms)

    @property
    def accumulator(self) -> AccumulatorConfig:
        return AccumulatorConfig(
            batch_size=self.batch_size,
            linger_ms=self.linger_ms,
            compression=self.compression,
            delivery_timeout_ms=self.delivery_timeout_ms,
            retry_backoff_ms=self.effective_retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
            max_request_size=self.max_request_size,
            adaptive_partitioning_enable=self.partitioner_adaptive_partitioning_enable,
            partition_availability_timeout_ms=self.partitioner_availability_timeout_ms,
        )

    @property
    def sender(self) -> SenderConfig:
        return SenderConfig(
            acks=self.acks,
            max_request_size=self.max_request_size,
            request_timeout_ms=self.request_timeout_ms,
            delivery_timeout_ms=self.delivery_timeout_ms,
            retries=self.retries,
            retry_backoff_ms=self.effective_retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
            max_in_flight_requests_per_connection=self.max_in_flight_requests_per_connection,
            idempotence=self.enable_idempotence,
        )

    @property
    def network(self) -> NetworkConfig:
        return NetworkConfig(
            bootstrap_servers=self.bootstrap_servers,
            client_id=self.client_id,
            security_protocol=self.security_protocol,
            request_timeout_ms=self.request_timeout_ms,
            max_in_flight_requests_per_connection=self.max_in_flight_requests_per_connection,
            socket_connection_setup_timeout_ms=self.socket_connection_setup_timeout_ms,
            socket_connection_setup_timeout_max_ms=self.socket_connection_setup_timeout_max_ms,
            send_buffer_bytes=self.send_buffer_bytes,
            receive_buffer_bytes=self.receive_buffer_bytes,
            connections_max_idle_ms=self.connections_max_idle_ms,
            reconnect_backoff_ms=min(self.reconnect_backoff_ms, self.reconnect_backoff_max_ms),
            reconnect_backoff_max_ms=self.reconnect_backoff_max_ms,
            security=self.security,
        )

    @property
    def security(self) -> SecurityConfig:
        username, password = self.sasl_username, self.sasl_password
        if self.sasl_jaas_config and (username is None or password is None):
            _, options = parse_jaas_config(self.sasl_jaas_config)
            username = username if username is not None else options.get("username")
            password = password if password is not None else options.get("password")
        return SecurityConfig(
            protocol=self.security_protocol,
            ssl_ca_location=self.ssl_ca_location,
            ssl_certificate_location=self.ssl_certificate_location,
            ssl_key_location=self.ssl_key_location,
            ssl_key_password=self.ssl_key_password,
            ssl_check_hostname=self.ssl_endpoint_identification_algorithm == "https",
            ssl_cipher_suites=self.ssl_cipher_suites,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=username,
            sasl_password=password,
        )

    @property
    def metadata(self) -> MetadataConfig:
        return MetadataConfig(
            metadata_max_age_ms=self.metadata_max_age_ms,
            metadata_max_idle_ms=self.metadata_max_idle_ms,
            retry_backoff_ms=self.effective_retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
        )

    @property
    def idempotence(self) -> IdempotenceConfig:
        return IdempotenceConfig(
            enabled=self.enable_idempotence,
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.transaction_timeout_ms,
        )

    @property
    def partitioning(self) -> PartitionerConfig:
        return PartitionerConfig(
            kind=self.partitioner,
            ignore_keys=self.partitioner_ignore_keys,
            adaptive_partitioning_enable=self.partitioner_adaptive_partitioning_enable,
            availability_timeout_ms=self.partitioner_availability_timeout_ms,
            sticky_batch_size=self.batch_size,
        )


# --------------------------------------------------------------------------
# Rules and messages


class _Fields:
    """Attribute access over a field dict, so the rules run before construction."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5


def _idempotence_conflicts(v: Any) -> list[tuple[str, str]]:
    """(property, reason) for each setting that rules out idempotence."""
    conflicts = []
    if v.acks != -1:
        conflicts.append(("acks", f"acks={v.acks} (idempotence needs acks=all)"))
    if v.retries == 0:
        conflicts.append(("retries", "retries=0 (idempotence needs retries > 0)"))
    if v.max_in_flight_requests_per_connection > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
        conflicts.append((
            "max.in.flight.requests.per.connection",
            f"max.in.flight.requests.per.connection={v.max_in_flight_requests_per_connection} "
            f"(idempotence needs at most {MAX_IN_FLIGHT_FOR_IDEMPOTENCE})",
        ))
    return conflicts


def _resolve_defaults(values: dict[str, Any], explicit: frozenset[str], warnings: list[str]) -> None:
    """The Java producer's quiet fixes for rules broken only by defaults."""
    current = _Fields({spec.field: values.get(spec.field, spec.default) for spec in PROPERTIES})
    if current.enable_idempotence and "enable.idempotence" not in explicit:
        in_flight = current.max_in_flight_requests_per_connection
        if in_flight > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
            # Java 4.x: an error whenever idempotence is on, by default too (even when acks
            # or retries would have disabled it quietly); only enable.idempotence=false lifts it.
            raise ConfigError(
                f"max.in.flight.requests.per.connection={in_flight}: the idempotent producer (on by "
                f"default) allows at most {MAX_IN_FLIGHT_FOR_IDEMPOTENCE} in flight, as the Java client's "
                "does; set enable.idempotence=false to send more")
        conflicts = _idempotence_conflicts(current)
        if conflicts:
            values["enable_idempotence"] = False
            current.enable_idempotence = False
            reasons = "; ".join(reason for _, reason in conflicts)
            warnings.append(
                f"idempotence disabled because of {reasons}; set enable.idempotence=true "
                "to make this an error instead"
            )
    floor = min(current.linger_ms + current.request_timeout_ms, INT_MAX)
    if current.delivery_timeout_ms < floor and "delivery.timeout.ms" not in explicit:
        values["delivery_timeout_ms"] = floor
        warnings.append(
            f"delivery.timeout.ms raised from its default {current.delivery_timeout_ms} to {floor} "
            f"(linger.ms + request.timeout.ms)"
        )


def common_client_rules(values: dict[str, Any], explicit: Iterable[str], warnings: list[str]) -> None:
    """What the Java client's ``CommonClientConfigs`` does after parsing, the same for the
    producer and the consumer (``values``: field -> parsed value; ``explicit``: the Kafka
    names the user set):

    * ``reconnect.backoff.ms`` set without ``reconnect.backoff.max.ms``: the max becomes
      ``reconnect.backoff.ms``, a constant backoff (``postProcessReconnectBackoffConfigs``).
    * An initial backoff or setup timeout above its max: the max applies, constant
      (``ExponentialBackoff`` takes the smaller), with a warning (Java's
      ``warnDisablingExponentialBackoff`` warns for retry.backoff.ms and the setup timeout;
      kctl for reconnect.backoff.ms too).
    """
    explicit = frozenset(explicit)
    if "reconnect.backoff.ms" in explicit and "reconnect.backoff.max.ms" not in explicit:
        values["reconnect_backoff_max_ms"] = values["reconnect_backoff_ms"]
        warnings.append("reconnect.backoff.ms is set and reconnect.backoff.max.ms is not: a constant "
                        f"reconnect backoff of {values['reconnect_backoff_ms']} ms applies, as in the "
                        "Java client")

    def value(name: str) -> Any:
        spec = PROPERTY_BY_NAME[name]
        return values.get(spec.field, spec.default)

    for initial, top, what in (("retry.backoff.ms", "retry.backoff.max.ms", "backoff"),
                               ("reconnect.backoff.ms", "reconnect.backoff.max.ms", "backoff"),
                               ("socket.connection.setup.timeout.ms",
                                "socket.connection.setup.timeout.max.ms", "connection setup timeout")):
        if value(initial) > value(top):
            warnings.append(f"{initial} ({value(initial)}) is greater than {top} ({value(top)}): "
                            f"a constant {what} of {value(top)} ms applies")


def _check_rules(v: Any, explicit: frozenset[str] | None, origins: Mapping[str, str | None]) -> None:
    """Cross-field rules; ``explicit`` None means every field counts as set by the user."""

    def where(*names: str) -> str:
        located = [f"{n} at {origins[n]}" for n in names if origins.get(n)]
        return f" ({'; '.join(located)})" if located else ""

    if v.enable_idempotence:
        conflicts = _idempotence_conflicts(v)
        if conflicts:
            names = [name for name, _ in conflicts]
            raise ConfigError(
                "enable.idempotence=true conflicts with "
                + "; ".join(reason for _, reason in conflicts)
                + where("enable.idempotence", *names)
                + ": change those settings or set enable.idempotence=false"
            )
    if v.transactional_id is not None and not v.enable_idempotence:
        off = (_idempotence_conflicts(v) if explicit is not None and "enable.idempotence" not in explicit
               else [])
        why = ("idempotence is off because of " + "; ".join(reason for _, reason in off) if off
               else "enable.idempotence is false")
        raise ConfigError(
            f"transactional.id needs idempotence, but {why}"
            + where("transactional.id", "enable.idempotence", *(name for name, _ in off))
        )
    floor = min(v.linger_ms + v.request_timeout_ms, INT_MAX)
    if v.delivery_timeout_ms < floor:
        raise ConfigError(
            f"delivery.timeout.ms ({v.delivery_timeout_ms}) must be >= linger.ms + request.timeout.ms "
            f"({v.linger_ms} + {v.request_timeout_ms} = {floor})"
            + where("delivery.timeout.ms", "linger.ms", "request.timeout.ms")
        )
    check_sasl(v, where)
    if v.batch_size > v.buffer_memory:
        raise ConfigError(
            f"batch.size ({v.batch_size}) must not exceed buffer.memory ({v.buffer_memory}): "
            "no batch could ever be allocated" + where("batch.size", "buffer.memory")
        )


#: The login module each mechanism logs in with (the Java client's names; a shaded copy's
#: package does not matter).
_LOGIN_MODULES = {SaslMechanism.PLAIN: "PlainLoginModule", SaslMechanism.SCRAM_SHA_256: "ScramLoginModule",
                  SaslMechanism.SCRAM_SHA_512: "ScramLoginModule"}


def check_sasl(v: Any, where: Callable[..., str]) -> None:
    """With ``SASL_*``: a mechanism kctl has, set (Java's default is GSSAPI), a user name and a
    password, and a ``sasl.jaas.config`` whose login module fits the mechanism. Producer and
    consumer alike (``where(*names)``: where those settings came from, for the message)."""
    if v.security_protocol not in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
        return
    proto = f"security.protocol={v.security_protocol.value}"
    if v.sasl_mechanism is None:
        raise ConfigError(
            f"{proto} without sasl.mechanism: sasl.mechanism is GSSAPI by default in the Java client; "
            "kctl supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512: set sasl.mechanism" + where("security.protocol"))
    username, password = v.sasl_username, v.sasl_password
    if v.sasl_jaas_config:
        module, options = parse_jaas_config(v.sasl_jaas_config)
        name = module.rsplit(".", 1)[-1]
        wanted = _LOGIN_MODULES[v.sasl_mechanism]
        if name not in _LOGIN_MODULES.values():
            raise ConfigError(
                f"sasl.jaas.config names {module}: kctl logs in with PlainLoginModule (PLAIN) or "
                "ScramLoginModule (SCRAM-SHA-256, SCRAM-SHA-512) entries" + where("sasl.jaas.config"))
        if name != wanted:
            why = ("the Java client would send its password in clear with PLAIN"
                   if v.sasl_mechanism is SaslMechanism.PLAIN
                   else "the Java client has no SCRAM client without ScramLoginModule and fails to log in")
            raise ConfigError(
                f"sasl.jaas.config's {name} does not fit sasl.mechanism={v.sasl_mechanism.value} ({why}): "
                f"use {wanted}, or the mechanism that fits {name}" + where("sasl.jaas.config", "sasl.mechanism"))
        if options.get("tokenauth", "").lower() == "true":
            raise ConfigError("sasl.jaas.config's tokenauth=true (delegation token authentication) is not "
                              "supported by kctl" + where("sasl.jaas.config"))
        username = username or options.get("username")
        password = password or options.get("password")
    if not username or not password:
        raise ConfigError(
            f"{proto} needs a user name and a password: "
            f"set sasl.username and sasl.password (or sasl.password=@file, or ${SASL_PASSWORD_ENV}), "
            "or sasl.jaas.config" + where("security.protocol"))


def _show(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    return repr(value)


def _invalid_message(spec: PropertySpec, value: Any, origin: str | None, detail: str,
                     client: str = "producer") -> str:
    shown = "" if spec.name in SECRET_PROPERTIES else f" {_show(value)}"
    return (
        f"{_at(origin)}invalid value{shown} for {client} property {spec.name!r}: "
        + (detail if detail else f"expected {spec.allowed}")
    )


def _known_names() -> list[str]:
    return [*PROPERTY_BY_NAME, *ALIASES, *(p.name for p in JAVA_ONLY_PROPERTIES if PRODUCER in p.clients),
            *LIBRDKAFKA_ALIASES]


def _unknown_message(setting: Setting) -> str:
    message = f"{_at(setting.origin)}unknown producer property {setting.name!r}"
    from kctl.consumer_config import is_consumer_property   # consumer_config imports this module

    if is_consumer_property(setting.name):
        return message + " (a consumer property)"
    close = difflib.get_close_matches(setting.name, _known_names(), n=1, cutoff=0.75)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


def describe_properties() -> list[tuple[str, str, str]]:
    """(name, default, allowed values) for every property, for ``--help`` and docs."""
    return [(spec.name, spec.to_text(spec.default), spec.allowed) for spec in PROPERTIES]


__all__ = [
    "ALIASES",
    "AccumulatorConfig",
    "BrokerAddress",
    "BufferPoolConfig",
    "CompressionConfig",
    "CompressionType",
    "LIBRDKAFKA_ALIASES",
    "LIBRDKAFKA_DIFFERENT",
    "IdempotenceConfig",
    "MetadataConfig",
    "NetworkConfig",
    "PROPERTIES",
    "PROPERTY_BY_NAME",
    "PartitionerConfig",
    "PartitionerKind",
    "ProducerConfig",
    "PropertySpec",
    "REDACTED",
    "SASL_PASSWORD_ENV",
    "SECRET_PROPERTIES",
    "SaslMechanism",
    "SecurityConfig",
    "SecurityProtocol",
    "parse_jaas_config",
    "redact_properties",
    "SenderConfig",
    "Setting",
    "canonical_setting",
    "check_sasl",
    "common_client_rules",
    "describe_properties",
    "load_properties_file",
    "parse_assignment",
    "parse_broker_address",
    "parse_properties",
]
