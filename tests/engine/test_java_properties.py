"""Java-only client properties (kctl/java_properties.py): a value with which the Java
client does what kctl does is accepted, any other is refused with one line naming the
property, the value and where it came from (-X, --consumer-property, or file:line)."""

from __future__ import annotations

import pytest

from kctl.config import ProducerConfig, Setting, load_properties_file, parse_assignment
from kctl.consumer_config import ConsumerConfig
from kctl.errors import ConfigError
from kctl.java_properties import JAVA_ONLY_PROPERTIES, accept_java_only

SERDE = "org.apache.kafka.common.serialization."

# What a Java user's producer.properties typically holds, with Java's values that change
# nothing kctl does.
PRODUCER_PROPERTIES = f"""\
bootstrap.servers=127.0.0.1:9092
key.serializer={SERDE}StringSerializer
value.serializer={SERDE}ByteArraySerializer
acks=all
linger.ms=10
batch.size=65536
compression.type=lz4
client.id=orders-loader
retries=2147483647
enable.idempotence=true
interceptor.classes=
metric.reporters=org.apache.kafka.common.metrics.JmxReporter
metrics.recording.level=INFO
enable.metrics.push=false
client.dns.lookup=use_all_dns_ips
metadata.recovery.strategy=none
metadata.recovery.rebootstrap.trigger.ms=300000
transaction.two.phase.commit.enable=false
ssl.enabled.protocols=TLSv1.2,TLSv1.3
ssl.protocol=TLSv1.3
sasl.kerberos.ticket.renew.window.factor=0.80
"""

CONSUMER_PROPERTIES = f"""\
bootstrap.servers=127.0.0.1:9092
group.id=orders
key.deserializer={SERDE}ByteArrayDeserializer
value.deserializer={SERDE}StringDeserializer
value.deserializer.encoding=UTF8
auto.offset.reset=earliest
enable.auto.commit=false
interceptor.classes=
client.dns.lookup=USE_ALL_DNS_IPS
metadata.recovery.strategy=none
"""


def test_a_typical_producer_properties_file_loads(tmp_path):
    path = tmp_path / "producer.properties"
    path.write_text(PRODUCER_PROPERTIES)
    cfg = ProducerConfig.load(files=[path])
    assert (cfg.acks, cfg.linger_ms, cfg.batch_size, cfg.client_id) == (-1, 10, 65536, "orders-loader")
    assert cfg.compression_type.value == "lz4" and cfg.enable_idempotence
    java_only = dict(cfg.java_only)
    assert java_only["value.serializer"] == SERDE + "ByteArraySerializer"
    assert java_only["enable.metrics.push"] == "false" and len(java_only) == 13
    # Only the local-metrics settings earn a note, each at its line.
    assert [w.split(": ", 1)[0] for w in cfg.warnings] == [f"{path}:12", f"{path}:13"]


def test_a_typical_consumer_properties_file_loads(tmp_path):
    path = tmp_path / "consumer.properties"
    path.write_text(CONSUMER_PROPERTIES)
    cfg = ConsumerConfig.load(files=[path])
    assert cfg.group_id == "orders" and cfg.warnings == ()
    assert dict(cfg.java_only)["value.deserializer"] == SERDE + "StringDeserializer"


# One refusal per class: (name, value, what the line says kctl supports instead).
REFUSALS = {
    "serializer": ("value.serializer", "io.confluent.kafka.serializers.KafkaAvroSerializer",
                   "ByteArraySerializer"),
    "class list": ("interceptor.classes", "com.example.Audit", "interceptors can change or drop records"),
    "truststore": ("ssl.truststore.location", "/etc/kafka/client.truststore.jks", "ssl.ca.location"),
    "keystore": ("ssl.keystore.type", "PKCS12", "ssl.certificate.location"),
    "kerberos": ("sasl.kerberos.service.name", "kafka", "Kerberos (GSSAPI) is not supported"),
    "oauth": ("sasl.oauthbearer.token.endpoint.url", "https://idp.example/token",
              "OAuth (OAUTHBEARER) is not supported"),
    "rebootstrap": ("metadata.recovery.strategy", "rebootstrap", "kctl does not rebootstrap"),
    "2pc": ("transaction.two.phase.commit.enable", "true", "two-phase commit (KIP-939)"),
    "dns lookup": ("client.dns.lookup", "resolve_canonical_bootstrap_servers_only", "use_all_dns_ips"),
    "metrics push": ("enable.metrics.push", "true", "GetTelemetrySubscriptions or PushTelemetry"),
}
_PRODUCER_ONLY = {"2pc"}


def _load(client, origin, name, value, tmp_path):
    """The config ``client`` builds from one setting given as the CLI gives it."""
    cls = ProducerConfig if client == "producer" else ConsumerConfig
    if origin == "file":
        path = tmp_path / f"{client}.properties"
        path.write_text(f"# from a Java deployment\n{name}={value}\n")
        return cls.from_settings(load_properties_file(path)), f"{path}:2: "
    flag = "-X" if client == "producer" else "--consumer-property"
    return cls.from_settings([parse_assignment(f"{name}={value}", flag, what=client)]), f"{flag}: "


@pytest.mark.parametrize("origin", ["flag", "file"])
@pytest.mark.parametrize("client", ["producer", "consumer"])
@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_each_class_of_refusal_names_property_value_and_origin(kind, client, origin, tmp_path):
    name, value, instead = REFUSALS[kind]
    if client == "consumer" and kind == "serializer":
        name, value = "value.deserializer", "io.confluent.kafka.serializers.KafkaAvroDeserializer"
        instead = "ByteArrayDeserializer"
    if client == "consumer" and kind in _PRODUCER_ONLY:  # Java's consumer has no such property
        with pytest.raises(ConfigError, match=f"unknown consumer property '{name}'"):
            _load(client, origin, name, value, tmp_path)
        return
    with pytest.raises(ConfigError) as info:
        _load(client, origin, name, value, tmp_path)
    where = f"{tmp_path / (client + '.properties')}:2: " if origin == "file" else (
        "-X: " if client == "producer" else "--consumer-property: ")
    message = str(info.value)
    assert message.startswith(f"{where}{client} property {name}={value!r} is refused: "), message
    assert instead in message and "\n" not in message


def test_secrets_are_not_echoed_in_a_refusal():
    for name in ("ssl.truststore.password", "ssl.keystore.key", "sasl.oauthbearer.client.secret"):
        with pytest.raises(ConfigError) as info:
            ProducerConfig.from_settings([Setting(name, "hunter2", "-X")])
        assert f"{name}=[redacted] is refused" in str(info.value)
        assert "hunter2" not in str(info.value)
    assert "hunter2" not in repr(Setting("ssl.keystore.password", "hunter2", "-X"))


def test_an_ssl_or_sasl_name_kctl_does_not_implement_is_refused_with_what_it_supports():
    with pytest.raises(ConfigError, match=r"^-X: consumer property ssl.client.auth='required' is refused: "
                                          r"kctl reads PEM files.*SCRAM-SHA-512 with sasl.mechanism"):
        ConsumerConfig.from_settings([Setting("ssl.client.auth", "required", "-X")])


def test_rebootstrap_trigger_is_accepted_only_beside_strategy_none():
    trigger = Setting("metadata.recovery.rebootstrap.trigger.ms", "5000", "-X")
    with pytest.raises(ConfigError, match="^-X: producer property metadata.recovery.rebootstrap.trigger.ms='5000' "
                                          "is refused: .*set metadata.recovery.strategy=none beside it"):
        ProducerConfig.from_settings([trigger])
    strategy = Setting("metadata.recovery.strategy", "NONE", "-X")
    assert dict(ConsumerConfig.from_settings([trigger, strategy]).java_only)[trigger.name] == "5000"


def test_values_read_as_java_reads_them():
    ok = ProducerConfig.from_properties({
        "enable.metrics.push": False,                                      # a Python value
        "ssl.enabled.protocols": " TLSv1.3 , TLSv1.2 ",                     # order and spaces
        "metric.reporters": "",
        "sasl.login.retry.backoff.max.ms": "10000",
    })
    assert dict(ok.java_only)["enable.metrics.push"] == "false"
    for name, value in [("ssl.enabled.protocols", "TLSv1.2"), ("ssl.protocol", "TLSv1.2"),
                        ("metric.reporters", "io.confluent.metrics.reporter.ConfluentMetricsReporter"),
                        ("metrics.num.samples", "0"), ("key.serializer", ""),
                        ("value.serializer.encoding", "UTF-16")]:
        with pytest.raises(ConfigError, match=f"^producer property {name}="):
            ProducerConfig.from_properties({name: value})


@pytest.mark.parametrize("prop", JAVA_ONLY_PROPERTIES, ids=lambda p: p.name)
def test_every_entry_refuses_a_class_it_does_not_know(prop):
    """No entry of the table accepts whatever it is given."""
    for client in sorted(prop.clients):
        with pytest.raises(ConfigError, match=f"^f:1: {client} property {prop.name}=.* is refused: "):
            accept_java_only(prop.name, "com.example.Unknown", "f:1", client)


@pytest.mark.parametrize("args,line", [
    (("produce", "-t", "t", "--num-records", "1", "-X", f"value.serializer={SERDE}LongSerializer"),
     f"kctl: error: -X: producer property value.serializer='{SERDE}LongSerializer' is refused: "),
    (("consume", "-t", "t", "-X", "ssl.keystore.location=/etc/kafka/client.keystore.p12"),
     "kctl: error: -X: consumer property ssl.keystore.location='/etc/kafka/client.keystore.p12' is refused: "),
])
def test_the_commands_refuse_on_one_line_before_starting_anything(capsys, monkeypatch, args, line):
    from tests.test_cli_habits import one_error_line, run_main
    code, _, err = run_main(capsys, monkeypatch, *args)
    assert one_error_line(code, err).startswith(line)
