import dataclasses

import pytest

from kctl.config import (
    PROPERTIES,
    BrokerAddress,
    CompressionType,
    PartitionerKind,
    ProducerConfig,
    SaslMechanism,
    SecurityProtocol,
    Setting,
    load_properties_file,
    parse_assignment,
    parse_properties,
)
from kctl.consumer_config import ConsumerConfig
from kctl.engine.connection_states import ClusterConnectionStates
from kctl.errors import ConfigError

JAVA_DEFAULTS = {
    "acks": "all",
    "linger.ms": "5",  # Kafka 4.0 (KIP-1030)
    "batch.size": "16384",
    "buffer.memory": "33554432",
    "compression.type": "none",
    "max.request.size": "1048576",
    "max.block.ms": "60000",
    "request.timeout.ms": "30000",
    "delivery.timeout.ms": "120000",
    "retries": "2147483647",
    "retry.backoff.ms": "100",
    "retry.backoff.max.ms": "1000",
    "reconnect.backoff.ms": "50",
    "reconnect.backoff.max.ms": "1000",
    "max.in.flight.requests.per.connection": "5",
    "enable.idempotence": "true",
    "metadata.max.age.ms": "300000",
    "metadata.max.idle.ms": "300000",
    "partitioner.ignore.keys": "false",
    "partitioner.adaptive.partitioning.enable": "true",
    "partitioner.availability.timeout.ms": "0",
    "security.protocol": "PLAINTEXT",
    "socket.connection.setup.timeout.ms": "10000",
    "socket.connection.setup.timeout.max.ms": "30000",
    "send.buffer.bytes": "131072",
    "receive.buffer.bytes": "32768",
    "connections.max.idle.ms": "540000",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "transaction.timeout.ms": "60000",
}


def test_defaults_are_the_java_producers():
    props = ProducerConfig().to_properties()
    for name, value in JAVA_DEFAULTS.items():
        assert props[name] == value, name
    assert "transactional.id" not in props


def test_table_and_dataclass_agree():
    fields = {f.name: f for f in dataclasses.fields(ProducerConfig)}
    for spec in PROPERTIES:
        assert spec.field in fields, spec.name
        assert fields[spec.field].default == spec.default, spec.name


def test_to_properties_round_trips():
    cfg = ProducerConfig.from_properties({
        "linger.ms": "20", "compression.type": "zstd", "bootstrap.servers": "a:1, [::1]:2",
        "partitioner": "round-robin", "transactional.id": "tx", "enable.idempotence": "true",
    })
    again = ProducerConfig.from_properties(cfg.to_properties())
    assert again == cfg


def test_typed_values():
    cfg = ProducerConfig.load(overrides=[
        "acks=0", "linger.ms=50", "compression.type=lz4", "compression.lz4.level=12",
        "enable.idempotence=FALSE", "bootstrap.servers=PLAINTEXT://k1:9093,k2", "partitioner.class="
        "org.apache.kafka.clients.producer.RoundRobinPartitioner", "security.protocol=plaintext",
    ])
    assert cfg.acks == 0
    assert cfg.linger_ms == 50
    assert cfg.compression_type is CompressionType.LZ4
    assert cfg.compression.level == 12
    assert cfg.enable_idempotence is False
    assert cfg.bootstrap_servers == (BrokerAddress("k1", 9093), BrokerAddress("k2", 9092))
    assert cfg.partitioner is PartitionerKind.ROUND_ROBIN
    assert cfg.security_protocol is SecurityProtocol.PLAINTEXT


@pytest.mark.parametrize(
    "setting,fragment",
    [
        ("linger.ms=abc", "invalid value 'abc' for producer property 'linger.ms': expected an integer number of milliseconds in [0, 2147483647]"),
        ("linger.ms=-1", "'linger.ms'"),
        ("linger.ms=1_000", "'linger.ms'"),
        ("batch.size=1.5", "'batch.size'"),
        ("acks=2", "expected all, -1, 0 or 1"),
        ("enable.idempotence=yes", "expected true or false"),
        ("compression.type=brotli", "expected none, gzip, snappy, lz4 or zstd"),
        ("compression.gzip.level=0", "-1 (zlib's default) or an integer in [1, 9]"),
        ("compression.lz4.level=18", "in [1, 17]"),
        ("max.in.flight.requests.per.connection=0", "in [1, 2147483647]"),
        ("metadata.max.idle.ms=4999", "in [5000, "),
        ("retries=2147483648", "'retries'"),
        ("partitioner=com.example.MyPartitioner", "default, sticky, murmur2, round_robin"),
        ("bootstrap.servers=host:notaport", "bad port in 'host:notaport'"),
        ("transactional.id=", "a non-empty string"),
    ],
)
def test_invalid_values_name_the_property_and_what_is_allowed(setting, fragment):
    with pytest.raises(ConfigError) as info:
        ProducerConfig.load(overrides=[setting])
    assert fragment in str(info.value)


def test_unknown_property_suggests_the_right_name():
    with pytest.raises(ConfigError) as info:
        ProducerConfig.load(overrides=["lingr.ms=5"])
    assert str(info.value) == "unknown producer property 'lingr.ms' (did you mean 'linger.ms'?)"
    with pytest.raises(ConfigError, match=r"^unknown producer property 'group.id' \(a consumer property\)$"):
        ProducerConfig.from_properties({"group.id": "g"})


def test_security_protocols_and_unknown_ones():
    cfg = ProducerConfig.from_properties({"security.protocol": "ssl"})
    assert cfg.security.uses_tls and not cfg.security.uses_sasl
    with pytest.raises(ConfigError, match="needs a user name and a password"):
        ProducerConfig.from_properties({"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ConfigError, match="expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"):
        ProducerConfig.from_properties({"security.protocol": "TLS"})
    with pytest.raises(ConfigError, match="GSSAPI is a Kafka SASL mechanism but kctl does not support it"):
        ProducerConfig.from_properties({"sasl.mechanism": "GSSAPI"})


def test_secrets_from_file_env_and_jaas_never_shown(tmp_path, monkeypatch):
    secret = tmp_path / "pw"
    secret.write_text("canary-7f3\n")
    cfg = ProducerConfig.load(overrides=["security.protocol=SASL_SSL", "sasl.username=alice",
                                         f"sasl.password=@{secret}", "sasl.mechanism=SCRAM-SHA-256"])
    assert cfg.security.sasl_password == "canary-7f3"
    assert "canary" not in repr(cfg) + repr(cfg.security) + repr(cfg.settings)
    assert cfg.to_properties()["sasl.password"] == "[redacted]"
    monkeypatch.setenv("KCTL_SASL_PASSWORD", "from-env")
    cfg = ProducerConfig.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "bob",
                                          "sasl.mechanism": "PLAIN"})
    assert cfg.security.sasl_password == "from-env"
    monkeypatch.delenv("KCTL_SASL_PASSWORD")
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="carol" password="p@ss word";')
    cfg = ProducerConfig.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": jaas,
                                          "sasl.mechanism": "PLAIN"})
    assert (cfg.security.sasl_username, cfg.security.sasl_password) == ("carol", "p@ss word")
    with pytest.raises(ConfigError) as info:
        ProducerConfig.from_properties({"sasl.password": "@/nonexistent/pw"})
    assert "/nonexistent/pw" in str(info.value)


def test_java_only_properties_are_judged_by_value():
    # Full cases in test_java_properties.py; here: the producer's wiring of the table.
    cfg = ProducerConfig.from_properties({
        "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
        "interceptor.classes": "",
        "metrics.num.samples": "3",
        "linger.ms": "7",
    })
    assert cfg.linger_ms == 7
    assert dict(cfg.java_only)["interceptor.classes"] == ""
    assert len(cfg.warnings) == 1 and "metrics.num.samples='3' changes nothing kctl does" in cfg.warnings[0]
    with pytest.raises(ConfigError, match=r"^producer property interceptor.classes='com.example.X' is refused"):
        ProducerConfig.from_properties({"interceptor.classes": "com.example.X"})


# -- Kafka's cross-field rules ------------------------------------------------


@pytest.mark.parametrize(
    "props,reason",
    [
        ({"acks": "1"}, "acks=1"),
        ({"acks": "0"}, "acks=0"),
        ({"retries": "0"}, "retries=0"),
    ],
)
def test_idempotence_is_quietly_disabled_when_only_defaulted(props, reason):
    cfg = ProducerConfig.from_properties(props)
    assert cfg.enable_idempotence is False
    assert cfg.sender.idempotence is False and cfg.idempotence.enabled is False
    assert any(reason in w and "idempotence disabled" in w for w in cfg.warnings)

    with pytest.raises(ConfigError) as info:
        ProducerConfig.from_properties(props | {"enable.idempotence": "true"})
    assert "enable.idempotence=true conflicts with" in str(info.value)
    assert reason in str(info.value)


def test_idempotence_stays_on_with_compatible_settings():
    cfg = ProducerConfig.from_properties({"acks": "-1", "max.in.flight.requests.per.connection": "5"})
    assert cfg.enable_idempotence and cfg.warnings == ()


@pytest.mark.parametrize("extra", [{}, {"acks": "1"}, {"retries": "0"}, {"enable.idempotence": "true"}])
def test_upperbound_check_of_enable_idempotence(extra):
    """Java 4.x ProducerConfigTest.testUpperboundCheckOfEnableIdempotence: more than 5 in
    flight is an error while idempotence is on, by default too (3.x disabled it quietly),
    and even when acks or retries would have disabled it; enable.idempotence=false lifts it."""
    with pytest.raises(ConfigError, match=r"max.in.flight.requests.per.connection=6.*at most 5"):
        ProducerConfig.from_properties({"max.in.flight.requests.per.connection": "6"} | extra)
    cfg = ProducerConfig.from_properties({"max.in.flight.requests.per.connection": "6",
                                          "enable.idempotence": "false"})
    assert cfg.enable_idempotence is False and cfg.sender.max_in_flight_requests_per_connection == 6


def test_transactional_id_needs_idempotence():
    # Disabled quietly by acks=1: the error says so, not "enable.idempotence is false".
    with pytest.raises(ConfigError, match=r"transactional.id needs idempotence, but idempotence is off "
                                          r"because of acks=1"):
        ProducerConfig.from_properties({"transactional.id": "tx", "acks": "1"})
    with pytest.raises(ConfigError, match="transactional.id needs idempotence, but enable.idempotence is false"):
        ProducerConfig.from_properties({"transactional.id": "tx", "enable.idempotence": "false"})
    cfg = ProducerConfig.from_properties({"transactional.id": "tx"})
    assert cfg.idempotence.transactional_id == "tx"


def test_delivery_timeout_rule():
    # Explicit and too small: an error naming both sides.
    with pytest.raises(ConfigError) as info:
        ProducerConfig.from_properties({"delivery.timeout.ms": "1000", "linger.ms": "100"})
    assert "delivery.timeout.ms (1000) must be >= linger.ms + request.timeout.ms (100 + 30000 = 30100)" in str(info.value)
    # Defaulted and too small: raised, as the Java client does.
    cfg = ProducerConfig.from_properties({"request.timeout.ms": "200000"})
    assert cfg.delivery_timeout_ms == 200005
    assert any("delivery.timeout.ms raised" in w for w in cfg.warnings)


def test_backoff_max_below_initial_gives_a_constant_backoff():
    cfg = ProducerConfig.from_properties({"retry.backoff.ms": "5000"})
    assert cfg.sender.retry_backoff_ms == 1000
    assert any("constant backoff of 1000 ms" in w for w in cfg.warnings)


def test_batch_size_larger_than_buffer_memory_is_refused():
    with pytest.raises(ConfigError, match=r"batch.size \(2000\) must not exceed buffer.memory \(1000\)"):
        ProducerConfig.from_properties({"batch.size": "2000", "buffer.memory": "1000"})


def test_direct_construction_is_strict():
    with pytest.raises(ConfigError, match="enable.idempotence=true conflicts"):
        ProducerConfig(acks=1)
    with pytest.raises(ConfigError, match="'linger.ms'"):
        ProducerConfig(linger_ms=-5)
    assert ProducerConfig(acks=1, enable_idempotence=False).acks == 1
    with pytest.raises(ConfigError):
        dataclasses.replace(ProducerConfig(), acks=0)


def test_with_properties_keeps_what_the_user_set():
    base = ProducerConfig.from_properties({"linger.ms": "10"})
    variant = base.with_properties({"acks": "1"})
    assert variant.linger_ms == 10 and variant.acks == 1 and not variant.enable_idempotence
    assert variant.explicit == {"linger.ms", "acks"}


def test_pieces_carry_what_each_component_needs():
    cfg = ProducerConfig.from_properties({
        "compression.type": "gzip", "compression.gzip.level": "6", "max.in.flight.requests.per.connection": "1",
        "reconnect.backoff.ms": "2000", "batch.size": "1000",
    })
    assert cfg.accumulator.compression.level == 6
    assert cfg.accumulator.batch_size == 1000
    assert cfg.buffer_pool.batch_size == 1000 and cfg.buffer_pool.buffer_memory == 33554432
    assert cfg.sender.guarantee_message_order
    assert cfg.network.reconnect_backoff_ms == 2000   # max not set: constant, as Java
    assert cfg.partitioning.sticky_batch_size == 1000
    assert cfg.metadata.metadata_max_age_ms == 300000
    assert ProducerConfig().compression.level is None


# -- input formats ---------------------------------------------------------------


def test_assignment_parsing():
    assert parse_assignment(" linger.ms = 5 ") == Setting("linger.ms", "5")
    assert parse_assignment("client.id=a=b").value == "a=b"
    with pytest.raises(ConfigError, match="name=value"):
        parse_assignment("linger.ms")


def test_properties_syntax_follows_java_util_properties():
    text = (
        "# a comment\n"
        "! another comment\n"
        "   \n"
        "linger.ms=10\n"
        "batch.size : 32768\n"
        "acks all\n"
        "  client.id  =  my\\tclient \\u00e9\\\n"
        "      continued\n"
        "# comment ending in a backslash is not continued \\\n"
        "retries=3\n"
        "key\\ with\\=odd\\:chars=v\n"
        "empty.value=\n"
        "trailing.odd=ends\\\\\n"
        "crlf.line=1\r\n"
    )
    settings = parse_properties(text, "p.properties")
    got = {s.name: (s.value, s.origin) for s in settings}
    assert got["linger.ms"] == ("10", "p.properties:4")
    assert got["batch.size"] == ("32768", "p.properties:5")
    assert got["acks"] == ("all", "p.properties:6")
    assert got["client.id"] == ("my\tclient \u00e9continued", "p.properties:7")
    assert got["retries"] == ("3", "p.properties:10")
    assert got["key with=odd:chars"][0] == "v"
    assert got["empty.value"][0] == ""
    assert got["trailing.odd"][0] == "ends\\"
    assert got["crlf.line"][0] == "1"


def test_malformed_unicode_escape_names_file_and_line():
    with pytest.raises(ConfigError, match=r"^p.properties:2: malformed \\uxxxx escape"):
        parse_properties("a=1\nb=\\u12G4\n", "p.properties")


def test_file_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "producer.properties"
    path.write_text("linger.ms=5\n# tuning\nbatch.size=big\n")
    with pytest.raises(ConfigError) as info:
        ProducerConfig.load(files=[path])
    assert str(info.value) == (
        f"{path}:3: invalid value 'big' for producer property 'batch.size': "
        "expected an integer number of bytes in [0, 2147483647]"
    )
    path.write_text("lingr.ms=5\n")
    with pytest.raises(ConfigError, match=rf"^{path}:1: unknown producer property 'lingr.ms' \(did you mean 'linger.ms'\?\)$"):
        ProducerConfig.load(files=[path])
    with pytest.raises(ConfigError, match="cannot read producer properties file"):
        load_properties_file(tmp_path / "missing.properties")


def test_cross_field_errors_point_at_the_settings(tmp_path):
    path = tmp_path / "p.properties"
    path.write_text("acks=1\nenable.idempotence=true\n")
    with pytest.raises(ConfigError) as info:
        ProducerConfig.load(files=[path])
    message = str(info.value)
    assert f"enable.idempotence at {path}:2" in message and f"acks at {path}:1" in message


def test_overrides_win_over_files(tmp_path):
    path = tmp_path / "p.properties"
    path.write_text("linger.ms=100\nbatch.size=1000\n")
    cfg = ProducerConfig.load(files=[path], overrides=["linger.ms=0"])
    assert cfg.linger_ms == 0 and cfg.batch_size == 1000


def test_latin1_files_are_read(tmp_path):
    path = tmp_path / "p.properties"
    path.write_bytes("client.id=caf\u00e9\n".encode("iso-8859-1"))
    assert ProducerConfig.load(files=[path]).client_id == "caf\u00e9"


def test_lz4_default_level_is_lz4s_fast_mode_as_in_java():
    """Java's Lz4BlockOutputStream uses lz4's fast compressor at the default level (9)
    and its high compressor at any other level."""
    from kctl.config import LZ4_FAST_LEVEL
    default = ProducerConfig.from_properties({"compression.type": "lz4"})
    assert default.compression_lz4_level == 9 and default.compression.level == LZ4_FAST_LEVEL
    high = ProducerConfig.from_properties({"compression.type": "lz4", "compression.lz4.level": "12"})
    assert high.compression.level == 12


# -- CommonClientConfigs' rules, producer and consumer alike ----------------------------


@pytest.mark.parametrize("client", [ProducerConfig, ConsumerConfig])
def test_reconnect_backoff_without_max_is_constant(client):
    """Java's postProcessReconnectBackoffConfigs: reconnect.backoff.ms set and the max not,
    the max is reconnect.backoff.ms (KafkaProducerTest/KafkaConsumerTest's constant backoff)."""
    for ms in (200, 5000):
        cfg = client.from_properties({"reconnect.backoff.ms": ms})
        assert (cfg.network.reconnect_backoff_ms, cfg.network.reconnect_backoff_max_ms) == (ms, ms)
        assert any("constant reconnect backoff" in w for w in cfg.warnings)
        assert not any("greater than" in w for w in cfg.warnings)
    both = client.from_properties({"reconnect.backoff.ms": 200, "reconnect.backoff.max.ms": 4000})
    assert (both.network.reconnect_backoff_ms, both.network.reconnect_backoff_max_ms) == (200, 4000)
    assert client.from_properties({}).network.reconnect_backoff_max_ms == 1000


@pytest.mark.parametrize("client", [ProducerConfig, ConsumerConfig])
def test_connection_setup_timeout_above_its_max_is_the_max(client):
    """ExponentialBackoff takes min(initial, max): a constant timeout of the max, with
    Java's warning (CommonClientConfigs.warnDisablingExponentialBackoff)."""
    cfg = client.from_properties({"socket.connection.setup.timeout.ms": 40000,
                                  "socket.connection.setup.timeout.max.ms": 20000})
    states = ClusterConnectionStates(
        cfg.network.reconnect_backoff_ms, cfg.network.reconnect_backoff_max_ms,
        cfg.network.socket_connection_setup_timeout_ms, cfg.network.socket_connection_setup_timeout_max_ms,
        random=lambda: 0.5)
    assert states.connection_setup_timeout.backoff_ms(0) == 20000
    assert states.connection_setup_timeout.backoff_ms(5) == 20000
    assert any("socket.connection.setup.timeout.ms (40000) is greater than "
               "socket.connection.setup.timeout.max.ms (20000)" in w for w in cfg.warnings)


# -- SASL: no default mechanism, the login module fits it ------------------------


PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'


@pytest.mark.parametrize("client", [ProducerConfig, ConsumerConfig])
def test_sasl_without_a_mechanism_is_refused_not_sent_as_plain(client):
    """Java's sasl.mechanism defaults to GSSAPI, which kctl has not: a SCRAM password is
    never sent as PLAIN because the mechanism was left out."""
    with pytest.raises(ConfigError, match="sasl.mechanism is GSSAPI by default in the Java client; kctl "
                                          "supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512: set sasl.mechanism"):
        client.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": SCRAM_JAAS})
    cfg = client.from_properties({"security.protocol": "SASL_SSL", "sasl.jaas.config": SCRAM_JAAS,
                                  "sasl.mechanism": "SCRAM-SHA-512"})
    assert cfg.security.sasl_mechanism is SaslMechanism.SCRAM_SHA_512
    assert client.from_properties({}).security.sasl_mechanism is None   # no SASL: none needed


@pytest.mark.parametrize("client", [ProducerConfig, ConsumerConfig])
def test_jaas_login_module_must_fit_the_mechanism(client):
    def props(mechanism, jaas):
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.jaas.config": jaas}

    with pytest.raises(ConfigError, match="PlainLoginModule does not fit sasl.mechanism=SCRAM-SHA-256"):
        client.from_properties(props("SCRAM-SHA-256", PLAIN_JAAS))
    with pytest.raises(ConfigError, match="ScramLoginModule does not fit sasl.mechanism=PLAIN"):
        client.from_properties(props("PLAIN", SCRAM_JAAS))
    with pytest.raises(ConfigError, match="kctl logs in with PlainLoginModule"):
        client.from_properties(props("PLAIN", "com.sun.security.auth.module.Krb5LoginModule required "
                                               'useKeyTab=true principal="u@R";'))
    with pytest.raises(ConfigError, match="tokenauth=true"):
        client.from_properties(props("SCRAM-SHA-256", SCRAM_JAAS[:-1] + ' tokenauth="true";'))
    assert client.from_properties(props("PLAIN", PLAIN_JAAS)).security.sasl_username == "u"
    assert client.from_properties(props("SCRAM-SHA-256", SCRAM_JAAS)).security.sasl_password == "p"


# -- case: Java's ValidString is case-sensitive, CaseInsensitiveValidString not ----------


@pytest.mark.parametrize("client, name, wrong, right", [
    (ProducerConfig, "acks", "ALL", "all"),
    (ProducerConfig, "compression.type", "GZIP", "gzip"),
    (ProducerConfig, "sasl.mechanism", "scram-sha-256", "SCRAM-SHA-256"),
    (ConsumerConfig, "isolation.level", "READ_COMMITTED", "read_committed"),
    (ConsumerConfig, "auto.offset.reset", "Earliest", "earliest"),
    (ConsumerConfig, "auto.offset.reset", "BY_DURATION:PT1H", "by_duration"),
])
def test_valid_string_choices_are_case_sensitive(client, name, wrong, right):
    with pytest.raises(ConfigError, match=f"write '{right}'" if name != "sasl.mechanism" else f"write {right}"):
        client.from_properties({name: wrong})


def test_case_insensitive_valid_string_choices_stay_so():
    assert ProducerConfig.from_properties({"security.protocol": "ssl"}).security_protocol is SecurityProtocol.SSL
    assert ConsumerConfig.from_properties({"group.protocol": "CLASSIC", "security.protocol": "Ssl"}).group_protocol \
        == "classic"
    assert ConsumerConfig.from_properties({"auto.offset.reset": "by_duration:pt1h"}).auto_offset_reset.duration_ms \
        == 3_600_000
    assert ProducerConfig.from_properties({"enable.idempotence": "TRUE"}).enable_idempotence


def test_the_other_clients_property_is_named_so_both_ways():
    with pytest.raises(ConfigError, match=r"unknown producer property 'group.id' \(a consumer property\)"):
        ProducerConfig.from_properties({"group.id": "x"})
    with pytest.raises(ConfigError, match=r"unknown producer property 'isolation.level' \(a consumer property\)"):
        ProducerConfig.from_properties({"isolation.level": "read_committed"})
    with pytest.raises(ConfigError, match=r"unknown producer property 'key.deserializer' \(a consumer property\)"):
        ProducerConfig.from_properties({"key.deserializer": "x"})
    with pytest.raises(ConfigError, match=r"unknown consumer property 'linger.ms' \(a producer property\)"):
        ConsumerConfig.from_properties({"linger.ms": "5"})
    with pytest.raises(ConfigError, match=r"'lingr.ms' \(did you mean 'linger.ms'\?\)"):
        ProducerConfig.from_properties({"lingr.ms": "5"})


# -- ssl.cipher.suites: Java's IANA names, mapped to OpenSSL's ---------------------------

def test_ssl_cipher_suites_maps_iana_names_and_caps_the_version_as_java_does():
    import ssl
    from kctl.engine.tls import context_for
    sec = ProducerConfig.from_properties({
        "security.protocol": "SSL",
        "ssl.cipher.suites": "TLS_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"}).security
    assert sec.ssl_cipher_suites == ("TLS_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA")
    ctx = context_for(sec)
    assert {c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3"} == {
        "AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA"}
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2      # no TLS 1.3 suite listed
    consumer = ConsumerConfig.from_properties({"bootstrap.servers": "b:9092", "security.protocol": "SSL",
                                               "ssl.cipher.suites": "TLS_RSA_WITH_AES_256_CBC_SHA"})
    assert consumer.security.ssl_cipher_suites == ("TLS_RSA_WITH_AES_256_CBC_SHA",)


def test_the_default_offer_is_jdk17s_enabled_suites():
    from kctl.cipher_suites import JDK17_CIPHER_SUITES, iana_name
    from kctl.engine.tls import context_for
    ctx = context_for(ProducerConfig.from_properties({"security.protocol": "SSL"}).security)
    offered = {iana_name(c["name"]) for c in ctx.get_ciphers()}
    # every JDK 17 suite this OpenSSL allows at its security level (the DSS ones need a DSA key)
    assert {s for s in JDK17_CIPHER_SUITES if "_DSS_" not in s} <= offered
    assert "TLS_RSA_WITH_AES_128_CBC_SHA" in offered and "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA" in offered


@pytest.mark.parametrize("value, needle", [
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_RC4_128_SHA", "TLS_RSA_WITH_RC4_128_SHA is not among"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "IANA names"),
    ("TLS_AES_128_GCM_SHA256", "TLS 1.3 suites all or none"),
])
def test_ssl_cipher_suites_refuses_what_it_cannot_do_in_one_line(value, needle):
    with pytest.raises(ConfigError) as info:
        ProducerConfig.from_properties({"ssl.cipher.suites": value})
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_the_cipher_table_agrees_with_openssl():
    import shutil
    import subprocess
    from kctl.cipher_suites import JDK17_CIPHER_SUITES, openssl_cipher_string
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    out = subprocess.run(["openssl", "ciphers", "-stdname", "ALL:@SECLEVEL=0"], capture_output=True,
                         text=True, timeout=10).stdout
    stdname = dict(line.split()[0:3:2] for line in out.splitlines() if " - " in line)
    for iana in JDK17_CIPHER_SUITES:
        assert stdname.get(iana) == (openssl_cipher_string((iana,)) or iana), iana
