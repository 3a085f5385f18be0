"""Consumer configuration: Kafka's consumer property names, the Java consumer's defaults.

How this works
--------------
The same machinery as the producer's (``kctl/config.py``): settings from ``-X
name=value`` and ``.properties`` files become ``Setting``s, each is checked against
``CONSUMER_PROPERTIES`` (name, type, range or choices, default), then the Java
consumer's cross-field rules apply, giving one frozen ``ConsumerConfig``. Components
take the typed pieces they need (``config.fetch``, ``config.group``, ``config.network``,
``config.metadata``).

Choices worth knowing
---------------------
* Defaults are the Java consumer's (Kafka 4.0): ``fetch.max.wait.ms`` 500,
  ``fetch.min.bytes`` 1, ``max.partition.fetch.bytes`` 1 MiB, ``fetch.max.bytes`` 50 MiB,
  ``session.timeout.ms`` 45000 (KIP-735), ``heartbeat.interval.ms`` 3000,
  ``auto.offset.reset`` latest, ``partition.assignment.strategy`` range then
  cooperative-sticky, ``receive.buffer.bytes`` 64 KiB.
* Security (``security.protocol``, ``ssl.*``, ``sasl.*``), socket, backoff and
  timeout properties are the producer's specs, shared: they mean the same in both clients.
* An unknown name is an error with a did-you-mean; a Java consumer property for
  machinery kctl does not have (deserializers, interceptors, metric reporters, key
  stores, ...) is judged by its value in the producer's and consumer's one table
  (``kctl/java_properties.py``): accepted where Java would then do what kctl does,
  refused with one line otherwise; a property kctl cannot honour
  (``group.protocol=consumer``, KIP-848) is refused with the reason, never accepted
  and ignored.
* Java's rules: with no ``group.id``, ``enable.auto.commit`` defaults to false and an
  explicit true is an error (as are ``group.instance.id`` and a commit without a
  group); ``heartbeat.interval.ms`` must be below ``session.timeout.ms``.
* librdkafka's names are taken where they mean a Java property
  (``fetch.wait.max.ms``, ``fetch.message.max.bytes``, ``auto.offset.reset=smallest``).
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

from kctl.config import (
    INT_MAX,
    PROPERTY_BY_NAME as _PRODUCER_SPECS,
    SASL_PASSWORD_ENV,
    SECRET_PROPERTIES,
    BrokerAddress,
    MetadataConfig,
    NetworkConfig,
    PropertySpec,
    SaslMechanism,
    SecurityConfig,
    SecurityProtocol,
    Setting,
    check_sasl,
    common_client_rules,
    load_properties_file,
    parse_assignment,
    parse_jaas_config,
    redact_properties,
)
from kctl.config import _Invalid, _at, _bool_spec, _int_spec, _parse_str, case_sensitive  # the shared parsers
from kctl.config import _invalid_message, _librdkafka_to_java
from kctl.errors import ConfigError
from kctl.java_properties import CONSUMER, JAVA_ONLY_PROPERTIES, PRODUCER, JavaOnlySettings, is_java_only

__all__ = [
    "AutoOffsetReset", "CONSUMER_PROPERTIES", "ConsumerConfig", "FetchConfig", "GroupConfig",
    "IsolationLevel", "OffsetResetStrategy", "RebalanceProtocol", "describe_consumer_properties",
]


class IsolationLevel(enum.IntEnum):
    """The wire values of FetchRequest/ListOffsetsRequest ``isolation_level``."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @property
    def text(self) -> str:
        return self.name.lower()


class OffsetResetStrategy(str, enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"
    BY_DURATION = "by_duration"


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """``auto.offset.reset``: earliest, latest, none, or by_duration:<ISO-8601 duration>
    (KIP-1106: the first offset whose timestamp is at least now minus the duration)."""

    strategy: OffsetResetStrategy
    duration_ms: int = 0

    def to_text(self) -> str:
        if self.strategy is OffsetResetStrategy.BY_DURATION:
            return f"by_duration:{_iso_duration(self.duration_ms)}"
        return self.strategy.value


class RebalanceProtocol(str, enum.Enum):
    EAGER = "eager"
    COOPERATIVE = "cooperative"


#: The Java classes partition.assignment.strategy names, and the protocol name each
#: assignor joins with (its ``name()``). Java loads the class by its exact name.
ASSIGNOR_CLASSES: dict[str, str] = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
#: librdkafka's spelling of the same property: the protocol names, compared exactly (strcmp).
ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")
_ASSIGNOR_CLASS_OF = {name: cls for cls, name in ASSIGNOR_CLASSES.items()}
_STICKY_CLASS = "org.apache.kafka.clients.consumer.StickyAssignor"
#: Which rebalance protocols each assignor supports (Java's ``supportedProtocols``).
ASSIGNOR_PROTOCOLS: dict[str, tuple[RebalanceProtocol, ...]] = {
    "range": (RebalanceProtocol.EAGER,),
    "roundrobin": (RebalanceProtocol.EAGER,),
    "cooperative-sticky": (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE),
}


_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,9})?)S)?)?", re.I)


def _iso_duration_ms(text: str) -> int:
    m = _ISO_DURATION.fullmatch(text.strip())
    if not m or not any(m.groupdict().values()) or text.strip().upper().endswith("T"):
        raise _Invalid("")
    d, h, mi, s = (m.group(k) for k in "dhms")
    return int(((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi or 0)) * 60_000 + float(s or 0) * 1000)


def _iso_duration(ms: int) -> str:
    s, ms_part = divmod(ms, 1000)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    secs = f"{s}.{ms_part:03d}".rstrip("0").rstrip(".") if ms_part else str(s)
    return f"P{d}DT{h}H{m}M{secs}S"


def _parse_reset(value: Any) -> AutoOffsetReset:
    if isinstance(value, AutoOffsetReset):
        return value
    if not isinstance(value, str):
        raise _Invalid("")
    text = value.strip()
    # Java's AutoOffsetResetStrategy: the names case-sensitive, the ISO-8601 duration not.
    if text.startswith("by_duration:"):
        return AutoOffsetReset(OffsetResetStrategy.BY_DURATION, _iso_duration_ms(text.split(":", 1)[1]))
    for s in (OffsetResetStrategy.EARLIEST, OffsetResetStrategy.LATEST, OffsetResetStrategy.NONE):
        if text == s.value:
            return AutoOffsetReset(s)
    if text.lower().startswith("by_duration:"):
        raise case_sensitive("by_duration", ("by_duration",))
    raise case_sensitive(text, ("earliest", "latest", "none"))


def _parse_isolation(value: Any) -> IsolationLevel:
    if isinstance(value, IsolationLevel):
        return value
    if isinstance(value, str):
        text = value.strip()
        for level in IsolationLevel:
            if level.text == text:
                return level
        raise case_sensitive(text, (level.text for level in IsolationLevel))
    raise _Invalid("")


def _parse_assignors(value: Any) -> tuple[str, ...]:
    """Java's list (ConfigDef LIST: split on commas, each element trimmed, an empty element
    kept) of class names, each loaded by its exact name (getAssignorInstances); librdkafka's
    protocol names, exactly, are taken too. Two entries naming one assignor are refused, as
    Java refuses two assignors with one name()."""
    if isinstance(value, (tuple, list)):
        items = [str(v).strip() for v in value]
    else:
        text = str(value).strip()
        items = [i.strip() for i in text.split(",")] if text else []
    if not items:
        raise _Invalid("it names no assignor; the Java consumer needs at least one to join a group "
                       f"(choices: {_ASSIGNOR_CHOICES})")
    out: list[str] = []
    for item in items:
        if item in (_STICKY_CLASS, "sticky"):
            raise _Invalid("the eager StickyAssignor keeps its state in Java's StickyAssignorUserData, "
                           "which kctl does not write; use org.apache.kafka.clients.consumer."
                           "CooperativeStickyAssignor")
        name = ASSIGNOR_CLASSES.get(item, item if item in ASSIGNORS else None)
        if name is None:
            near = [c for c in (*ASSIGNOR_CLASSES, *ASSIGNORS) if c.lower() == item.lower()]
            why = (f"names are case-sensitive (Java loads the class by its exact name, librdkafka "
                   f"compares exactly): write {near[0]!r}" if near else
                   "an empty element, from a stray comma" if not item else
                   "custom assignor classes are Java code, which kctl cannot run")
            raise _Invalid(f"unknown assignor {item!r}: {why}; choices: {_ASSIGNOR_CHOICES}")
        if name in out:
            raise _Invalid(f"assignor {name!r} is named twice (Java refuses one assignor name used by two "
                           "entries)")
        out.append(name)
    return tuple(out)


_ASSIGNOR_CHOICES = ", ".join(ASSIGNOR_CLASSES) + " (or librdkafka's " + ", ".join(ASSIGNORS) + ")"


def _non_empty(why: str) -> Callable[[Any], str | None]:
    """A string property with no default that may be left out but not given empty: Java
    trims it (ConfigDef) and refuses "" (``why``: its words)."""
    def parse(value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):
            if not value.strip():
                raise _Invalid(why)
            return value.strip()
        raise _Invalid("")
    return parse


def _parse_group_protocol(value: Any) -> str:
    text = str(value).strip().lower()
    if text == "classic":
        return text
    if text == "consumer":
        raise _Invalid("group.protocol=consumer (KIP-848's ConsumerGroupHeartbeat protocol) is not "
                       "supported by kctl yet; use classic (JoinGroup/SyncGroup/Heartbeat)")
    raise _Invalid("")


def _shared(name: str, default: Any = None, doc: str = "") -> PropertySpec:
    """The producer's spec for a property both clients have (same type and meaning);
    ``default`` when the consumer's default differs."""
    spec = _PRODUCER_SPECS[name]
    if default is None:
        return spec
    return PropertySpec(spec.name, spec.field, default, spec.parse, spec.allowed, spec.check,
                        doc or spec.doc)


CONSUMER_PROPERTIES: tuple[PropertySpec, ...] = (
    _shared("bootstrap.servers"),
    PropertySpec("client.id", "client_id", "", _parse_str, "any string",
                 doc="Sent in every request header; empty means kctl names each consumer."),
    PropertySpec("client.rack", "client_rack", "", _parse_str, "any string",
                 doc="Sent in Fetch (v11+) for follower fetching (KIP-392)."),
    PropertySpec("group.id", "group_id", None,
                 _non_empty("it should not be an empty string or whitespace (the Java consumer's "
                            "InvalidGroupIdException); leave group.id out for no group"),
                 "a group name", doc="Unset: no group (assign mode, no offset commits)."),
    PropertySpec("group.instance.id", "group_instance_id", None,
                 _non_empty("String must be non-empty (Java's NonEmptyString); leave group.instance.id "
                            "out for a dynamic member"),
                 "a static member id (KIP-345)"),
    PropertySpec("group.protocol", "group_protocol", "classic", _parse_group_protocol, "classic"),
    _int_spec("session.timeout.ms", 45000, 1, INT_MAX, "ms"),
    _int_spec("heartbeat.interval.ms", 3000, 1, INT_MAX, "ms"),
    _int_spec("max.poll.interval.ms", 300000, 1, INT_MAX, "ms"),
    _int_spec("max.poll.records", 500, 1, INT_MAX, ""),
    _bool_spec("enable.auto.commit", True, doc="Default false when group.id is not set."),
    _int_spec("auto.commit.interval.ms", 5000, 0, INT_MAX, "ms"),
    PropertySpec("auto.offset.reset", "auto_offset_reset", AutoOffsetReset(OffsetResetStrategy.LATEST),
                 _parse_reset, "earliest, latest, none or by_duration:<ISO-8601 duration, e.g. PT1H>"),
    _int_spec("fetch.min.bytes", 1, 0, INT_MAX, "bytes"),
    _int_spec("fetch.max.bytes", 52428800, 0, INT_MAX, "bytes"),
    _int_spec("fetch.max.wait.ms", 500, 0, INT_MAX, "ms"),
    _int_spec("max.partition.fetch.bytes", 1048576, 0, INT_MAX, "bytes"),
    PropertySpec("isolation.level", "isolation_level", IsolationLevel.READ_UNCOMMITTED,
                 _parse_isolation, "read_uncommitted or read_committed"),
    PropertySpec("partition.assignment.strategy", "partition_assignment_strategy",
                 ("range", "cooperative-sticky"), _parse_assignors,
                 "a comma-separated list of Java assignor classes "
                 "(org.apache.kafka.clients.consumer.RangeAssignor, RoundRobinAssignor, "
                 "CooperativeStickyAssignor) or librdkafka's names (range, roundrobin, "
                 "cooperative-sticky)"),
    _bool_spec("check.crcs", True),
    _bool_spec("allow.auto.create.topics", True),
    _bool_spec("exclude.internal.topics", True,
               doc="Only a pattern subscription can include internal topics; kctl subscribes to "
                   "named topics, where Java ignores it too."),
    _shared("request.timeout.ms"),
    _int_spec("default.api.timeout.ms", 60000, 0, INT_MAX, "ms"),
    _shared("retry.backoff.ms"),
    _shared("retry.backoff.max.ms"),
    _shared("reconnect.backoff.ms"),
    _shared("reconnect.backoff.max.ms"),
    _shared("metadata.max.age.ms"),
    _shared("connections.max.idle.ms"),
    _shared("send.buffer.bytes"),
    _shared("receive.buffer.bytes", 65536),
    _shared("socket.connection.setup.timeout.ms"),
    _shared("socket.connection.setup.timeout.max.ms"),
    _shared("security.protocol"),
    _shared("ssl.ca.location"),
    _shared("ssl.certificate.location"),
    _shared("ssl.key.location"),
    _shared("ssl.key.password"),
    _shared("ssl.endpoint.identification.algorithm"),
    _shared("ssl.cipher.suites"),
    _shared("sasl.mechanism"),
    _shared("sasl.username"),
    _shared("sasl.password"),
    _shared("sasl.jaas.config"),
)

CONSUMER_PROPERTY_BY_NAME: dict[str, PropertySpec] = {s.name: s for s in CONSUMER_PROPERTIES}


def _librdkafka_reset(value: Any) -> Any:
    text = str(value).strip().lower()
    return {"smallest": "earliest", "beginning": "earliest", "largest": "latest", "end": "latest",
            "error": "none"}.get(text, value)


# librdkafka's names (kcat, confluent-kafka users) for Java consumer properties that mean the same.
LIBRDKAFKA_CONSUMER_ALIASES: dict[str, tuple[str, Callable[[Any], Any] | None]] = {
    "fetch.wait.max.ms": ("fetch.max.wait.ms", None),
    "fetch.message.max.bytes": ("max.partition.fetch.bytes", None),
    "max.partition.fetch.bytes": ("max.partition.fetch.bytes", None),
    "metadata.broker.list": ("bootstrap.servers", None),
    "socket.timeout.ms": ("request.timeout.ms", None),
    "topic.metadata.refresh.interval.ms": ("metadata.max.age.ms", None),
    "sasl.mechanisms": ("sasl.mechanism", None),
    "auto.offset.reset": ("auto.offset.reset", _librdkafka_reset),
}

LIBRDKAFKA_CONSUMER_DIFFERENT: dict[str, str] = {
    "queued.min.messages": "librdkafka's prefetch queue has no Java equivalent; the Java consumer "
                           "fetches per fetch.max.bytes and max.partition.fetch.bytes",
    "enable.auto.offset.store": "the Java consumer commits the positions it has handed out; "
                                "there is no separate offset store",
    "fetch.error.backoff.ms": "the Java consumer backs off with retry.backoff.ms",
}



# --------------------------------------------------------------------------
# The typed pieces


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """What the Fetcher needs (Java's ``FetchConfig``)."""

    min_bytes: int
    max_bytes: int
    max_wait_ms: int
    max_partition_bytes: int
    max_poll_records: int
    check_crcs: bool
    isolation_level: IsolationLevel
    client_rack: str
    auto_offset_reset: AutoOffsetReset
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """What the group coordinator needs (Java's ``GroupRebalanceConfig`` plus commits)."""

    group_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    heartbeat_interval_ms: int
    rebalance_timeout_ms: int          # max.poll.interval.ms, as Java sends it
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    assignors: tuple[str, ...]
    client_rack: str
    request_timeout_ms: int

    @property
    def protocol(self) -> RebalanceProtocol:
        """Cooperative when every configured assignor supports it (Java's choice)."""
        if all(RebalanceProtocol.COOPERATIVE in ASSIGNOR_PROTOCOLS[a] for a in self.assignors):
            return RebalanceProtocol.COOPERATIVE
        return RebalanceProtocol.EAGER


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig:
    """Every consumer setting, typed, under its Kafka name in snake_case."""

    bootstrap_servers: tuple[BrokerAddress, ...] = ()
    client_id: str = ""
    client_rack: str = ""
    group_id: str | None = None
    group_instance_id: str | None = None
    group_protocol: str = "classic"
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    max_poll_records: int = 500
    enable_auto_commit: bool = False
    auto_commit_interval_ms: int = 5000
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset(OffsetResetStrategy.LATEST)
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52428800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1048576
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    partition_assignment_strategy: tuple[str, ...] = ("range", "cooperative-sticky")
    check_crcs: bool = True
    allow_auto_create_topics: bool = True
    exclude_internal_topics: bool = True
    request_timeout_ms: int = 30000
    default_api_timeout_ms: int = 60000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    metadata_max_age_ms: int = 300000
    connections_max_idle_ms: int = 540000
    send_buffer_bytes: int = 131072
    receive_buffer_bytes: int = 65536
    socket_connection_setup_timeout_ms: int = 10000
    socket_connection_setup_timeout_max_ms: int = 30000
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

    settings: tuple[Setting, ...] = field(default=(), compare=False, repr=False)
    # Java-only properties (kctl/java_properties.py) given with a value kctl honours.
    java_only: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for spec in CONSUMER_PROPERTIES:
            value = getattr(self, spec.field)
            if spec.name in SECRET_PROPERTIES:
                if value is not None and not isinstance(value, str):
                    raise ConfigError(f"consumer property {spec.name!r} must be a string")
                continue
            try:
                ok = spec.parse(value) == value and spec.check(value)
            except _Invalid:
                ok = False
            if not ok:
                raise ConfigError(_invalid_message(spec, value, None, "", client="consumer"))
        _check_rules(self, {})

    # -- building -----------------------------------------------------------
    @classmethod
    def from_settings(cls, settings: Iterable[Setting]) -> ConsumerConfig:
        """Validate settings (later ones override earlier ones, as ``-X`` after a file)."""
        settings = tuple(settings)
        values: dict[str, Any] = {}
        origins: dict[str, str | None] = {}
        warnings: list[str] = []
        java_only = JavaOnlySettings(CONSUMER, warnings)
        for setting in settings:
            setting = canonical_consumer_setting(setting)
            spec = CONSUMER_PROPERTY_BY_NAME.get(setting.name)
            if spec is None:
                if not java_only.take(setting.name, setting.value, setting.origin):
                    raise ConfigError(_unknown_message(setting))
                continue
            try:
                value = spec.parse(setting.value)
                if not spec.check(value):
                    raise _Invalid("")
            except _Invalid as exc:
                raise ConfigError(_invalid_message(spec, setting.value, setting.origin, str(exc),
                                                   client="consumer")) from None
            values[spec.field] = value
            origins[spec.name] = setting.origin
        accepted_java_only = java_only.check_together()
        if "sasl_password" not in values and os.environ.get(SASL_PASSWORD_ENV):
            values["sasl_password"] = os.environ[SASL_PASSWORD_ENV]
        # Java: enable.auto.commit defaults to true only with a group.id (ConsumerConfig
        # maybeOverrideEnableAutoCommit); an explicit true without one is an error.
        if "enable_auto_commit" not in values:
            values["enable_auto_commit"] = values.get("group_id") is not None
        common_client_rules(values, origins, warnings)
        _check_rules(_Fields({s.field: values.get(s.field, s.default) for s in CONSUMER_PROPERTIES}),
                     origins)
        return cls(**values, settings=settings,
                   java_only=accepted_java_only,
                   warnings=tuple(warnings))

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], origin: str | None = None) -> ConsumerConfig:
        return cls.from_settings(Setting(k, v, origin) for k, v in properties.items())

    @classmethod
    def load(cls, files: Iterable[str | Path] = (), overrides: Iterable[str] = ()) -> ConsumerConfig:
        """Properties files in order, then ``-X name=value`` overrides."""
        settings: list[Setting] = []
        for path in files:
            settings.extend(load_properties_file(path, what="consumer"))
        settings.extend(parse_assignment(text, what="consumer") for text in overrides)
        return cls.from_settings(settings)

    def with_properties(self, properties: Mapping[str, Any]) -> ConsumerConfig:
        return type(self).from_settings(self.settings + tuple(Setting(k, v) for k, v in properties.items()))

    def to_properties(self) -> dict[str, str]:
        """Every setting as Kafka writes it, unset optional ones left out, secrets redacted."""
        out = {}
        for spec in CONSUMER_PROPERTIES:
            value = getattr(self, spec.field)
            if value is None:
                continue
            if isinstance(value, AutoOffsetReset):
                out[spec.name] = value.to_text()
            elif isinstance(value, IsolationLevel):
                out[spec.name] = value.text
            elif spec.name == "partition.assignment.strategy":   # the classes, as Java writes the list
                out[spec.name] = ",".join(_ASSIGNOR_CLASS_OF[a] for a in value)
            else:
                out[spec.name] = spec.to_text(value)
        return redact_properties(out)

    @property
    def explicit(self) -> frozenset[str]:
        return frozenset(canonical_consumer_setting(s).name for s in self.settings)

    # -- the pieces -----------------------------------------------------------
    @property
    def fetch(self) -> FetchConfig:
        return FetchConfig(
            min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
            max_wait_ms=self.fetch_max_wait_ms, max_partition_bytes=self.max_partition_fetch_bytes,
            max_poll_records=self.max_poll_records, check_crcs=self.check_crcs,
            isolation_level=self.isolation_level, client_rack=self.client_rack,
            auto_offset_reset=self.auto_offset_reset, request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=min(self.retry_backoff_ms, self.retry_backoff_max_ms),
            retry_backoff_max_ms=self.retry_backoff_max_ms)

    @property
    def group(self) -> GroupConfig | None:
        if self.group_id is None:
            return None
        return GroupConfig(
            group_id=self.group_id, group_instance_id=self.group_instance_id,
            session_timeout_ms=self.session_timeout_ms, heartbeat_interval_ms=self.heartbeat_interval_ms,
            rebalance_timeout_ms=self.max_poll_interval_ms,
            retry_backoff_ms=min(self.retry_backoff_ms, self.retry_backoff_max_ms),
            retry_backoff_max_ms=self.retry_backoff_max_ms,
            enable_auto_commit=self.enable_auto_commit,
            auto_commit_interval_ms=self.auto_commit_interval_ms,
            assignors=self.partition_assignment_strategy, client_rack=self.client_rack,
            request_timeout_ms=self.request_timeout_ms)

    @property
    def network(self) -> NetworkConfig:
        return NetworkConfig(
            bootstrap_servers=self.bootstrap_servers, client_id=self.client_id,
            security_protocol=self.security_protocol, request_timeout_ms=self.request_timeout_ms,
            # Java's KafkaConsumer: "a fixed large enough value will suffice" (100).
            max_in_flight_requests_per_connection=100,
            socket_connection_setup_timeout_ms=self.socket_connection_setup_timeout_ms,
            socket_connection_setup_timeout_max_ms=self.socket_connection_setup_timeout_max_ms,
            send_buffer_bytes=self.send_buffer_bytes, receive_buffer_bytes=self.receive_buffer_bytes,
            connections_max_idle_ms=self.connections_max_idle_ms,
            reconnect_backoff_ms=min(self.reconnect_backoff_ms, self.reconnect_backoff_max_ms),
            reconnect_backoff_max_ms=self.reconnect_backoff_max_ms, security=self.security)

    @property
    def security(self) -> SecurityConfig:
        username, password = self.sasl_username, self.sasl_password
        if self.sasl_jaas_config and (username is None or password is None):
            _, options = parse_jaas_config(self.sasl_jaas_config)
            username = username if username is not None else options.get("username")
            password = password if password is not None else options.get("password")
        return SecurityConfig(
            protocol=self.security_protocol, ssl_ca_location=self.ssl_ca_location,
            ssl_certificate_location=self.ssl_certificate_location,
            ssl_key_location=self.ssl_key_location, ssl_key_password=self.ssl_key_password,
            ssl_check_hostname=self.ssl_endpoint_identification_algorithm == "https",
            ssl_cipher_suites=self.ssl_cipher_suites,
            sasl_mechanism=self.sasl_mechanism, sasl_username=username, sasl_password=password)

    @property
    def metadata(self) -> MetadataConfig:
        return MetadataConfig(
            metadata_max_age_ms=self.metadata_max_age_ms, metadata_max_idle_ms=None,
            retry_backoff_ms=min(self.retry_backoff_ms, self.retry_backoff_max_ms),
            retry_backoff_max_ms=self.retry_backoff_max_ms)


class _Fields:
    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def _check_rules(v: Any, origins: Mapping[str, str | None]) -> None:
    def where(*names: str) -> str:
        located = [f"{n} at {origins[n]}" for n in names if origins.get(n)]
        return f" ({'; '.join(located)})" if located else ""

    if v.group_id is None:
        if v.enable_auto_commit:
            raise ConfigError("enable.auto.commit=true needs a group.id (the Java consumer refuses it "
                              "too): set group.id, or enable.auto.commit=false"
                              + where("enable.auto.commit"))
        if v.group_instance_id is not None:
            raise ConfigError("group.instance.id needs a group.id" + where("group.instance.id"))
    if v.heartbeat_interval_ms >= v.session_timeout_ms:
        raise ConfigError(
            f"heartbeat.interval.ms ({v.heartbeat_interval_ms}) must be lower than session.timeout.ms "
            f"({v.session_timeout_ms})" + where("heartbeat.interval.ms", "session.timeout.ms"))
    check_sasl(v, where)


def canonical_consumer_setting(setting: Setting) -> Setting:
    """``setting`` under its Java consumer name (librdkafka aliases renamed and converted;
    a librdkafka property whose meaning differs refused)."""
    return _librdkafka_to_java(setting, LIBRDKAFKA_CONSUMER_ALIASES, LIBRDKAFKA_CONSUMER_DIFFERENT)


def is_consumer_property(name: str) -> bool:
    """``name`` is a Java consumer property (kctl's or Java-only), for the producer's hint."""
    return name in CONSUMER_PROPERTY_BY_NAME or is_java_only(name, CONSUMER)


def _unknown_message(setting: Setting) -> str:
    """The line for a name the consumer does not know: a producer property says so (the
    producer's says "a consumer property" the same way), else a did-you-mean."""
    message = f"{_at(setting.origin)}unknown consumer property {setting.name!r}"
    if setting.name in _PRODUCER_SPECS or is_java_only(setting.name, PRODUCER):
        return message + " (a producer property)"
    known = [*CONSUMER_PROPERTY_BY_NAME, *(p.name for p in JAVA_ONLY_PROPERTIES if CONSUMER in p.clients),
             *LIBRDKAFKA_CONSUMER_ALIASES]
    close = difflib.get_close_matches(setting.name, known, n=1, cutoff=0.75)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


def describe_consumer_properties() -> list[tuple[str, str, str]]:
    """(name, default, allowed values) for every consumer property."""
    out = []
    for spec in CONSUMER_PROPERTIES:
        d = spec.default
        text = (d.to_text() if isinstance(d, AutoOffsetReset) else d.text if isinstance(d, IsolationLevel)
                else spec.to_text(d))
        out.append((spec.name, text, spec.allowed))
    return out

