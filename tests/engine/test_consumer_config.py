"""ConsumerConfig: the Java consumer's names, defaults and rules (ConsumerConfigTest)."""

import pytest
from hypothesis import assume, given, settings, strategies as st

from kctl.consumer_config import (
    ConsumerConfig, IsolationLevel, OffsetResetStrategy, RebalanceProtocol, describe_consumer_properties)
from kctl.errors import ConfigError


def cfg(**props):
    return ConsumerConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


def test_java_defaults():
    c = ConsumerConfig.from_properties({})
    assert (c.fetch_min_bytes, c.fetch_max_bytes, c.fetch_max_wait_ms, c.max_partition_fetch_bytes) == (
        1, 52428800, 500, 1048576)
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.max_poll_interval_ms, c.max_poll_records) == (
        45000, 3000, 300000, 500)
    assert c.auto_offset_reset.strategy is OffsetResetStrategy.LATEST
    assert c.isolation_level is IsolationLevel.READ_UNCOMMITTED
    assert c.partition_assignment_strategy == ("range", "cooperative-sticky")
    assert c.receive_buffer_bytes == 65536 and c.enable_auto_commit is False   # no group: no auto commit
    assert c.network.max_in_flight_requests_per_connection == 100


def test_auto_commit_defaults_on_with_a_group_and_refused_without():
    assert ConsumerConfig.from_properties({"group.id": "g"}).enable_auto_commit
    with pytest.raises(ConfigError, match="needs a group.id"):
        ConsumerConfig.from_properties({"enable.auto.commit": "true"})
    with pytest.raises(ConfigError, match="group.instance.id needs a group.id"):
        ConsumerConfig.from_properties({"group.instance.id": "i"})


def test_an_empty_group_instance_id_or_group_id_is_refused():
    """ConsumerConfig's NonEmptyString on group.instance.id (ConfigDef trims first) and the
    consumer's InvalidGroupIdException on an empty group.id: refused in one line (kctl took
    either as unset: a dynamic member, or no group at all)."""
    for value in ("", "   "):
        with pytest.raises(ConfigError, match=r"^invalid value .* for consumer property 'group.instance.id': "
                                              r"String must be non-empty"):
            ConsumerConfig.from_properties({"group.id": "g", "group.instance.id": value})
        with pytest.raises(ConfigError, match=r"for consumer property 'group.id': it should not be an empty "
                                              r"string or whitespace"):
            ConsumerConfig.from_properties({"group.id": value})
    c = ConsumerConfig.from_properties({"group.id": " g ", "group.instance.id": " i1 "})
    assert (c.group_id, c.group_instance_id) == ("g", "i1")       # trimmed, as ConfigDef does


def test_heartbeat_must_be_below_session_timeout():
    with pytest.raises(ConfigError, match="heartbeat.interval.ms .* must be lower than session.timeout.ms"):
        ConsumerConfig.from_properties({"heartbeat.interval.ms": "10000", "session.timeout.ms": "10000"})


def test_unknown_names_get_a_suggestion_and_producer_names_are_named():
    with pytest.raises(ConfigError, match="did you mean 'fetch.max.wait.ms'"):
        ConsumerConfig.from_properties({"fetch.max.wait": "1"})
    with pytest.raises(ConfigError, match="a producer property"):
        ConsumerConfig.from_properties({"linger.ms": "1"})


def test_java_only_names_are_judged_by_value():
    # Full cases in test_java_properties.py; here: the consumer's wiring of the table.
    deserializer = "org.apache.kafka.common.serialization.StringDeserializer"
    c = ConsumerConfig.from_properties({"value.deserializer": deserializer, "interceptor.classes": ""})
    assert c.warnings == () and dict(c.java_only)["value.deserializer"] == deserializer
    with pytest.raises(ConfigError, match=r"^consumer property value.deserializer='x.Y' is refused"):
        ConsumerConfig.from_properties({"value.deserializer": "x.Y"})
    with pytest.raises(ConfigError, match=r"^unknown consumer property 'key.serializer' \(a producer property\)$"):
        ConsumerConfig.from_properties({"key.serializer": deserializer})


def test_what_kctl_cannot_honour_is_refused():
    with pytest.raises(ConfigError, match="KIP-848"):
        ConsumerConfig.from_properties({"group.protocol": "consumer"})
    with pytest.raises(ConfigError, match="StickyAssignorUserData"):
        ConsumerConfig.from_properties({"partition.assignment.strategy": "sticky"})
    with pytest.raises(ConfigError, match="Java code"):
        ConsumerConfig.from_properties({"partition.assignment.strategy": "com.example.Mine"})
    with pytest.raises(ConfigError, match="queued.min.messages"):
        ConsumerConfig.from_properties({"queued.min.messages": "10"})


def test_values_parse_as_java_does():
    c = ConsumerConfig.from_properties({
        "isolation.level": "read_committed", "auto.offset.reset": "by_duration:P1DT2H",
        "partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        "group.id": "g"})
    assert c.isolation_level is IsolationLevel.READ_COMMITTED
    assert c.auto_offset_reset.duration_ms == 26 * 3600 * 1000
    assert c.group.protocol is RebalanceProtocol.COOPERATIVE
    assert c.to_properties()["auto.offset.reset"] == "by_duration:P1DT2H0M0S"
    with pytest.raises(ConfigError, match="auto.offset.reset"):
        ConsumerConfig.from_properties({"auto.offset.reset": "smallest-ish"})
    with pytest.raises(ConfigError, match="fetch.min.bytes"):
        ConsumerConfig.from_properties({"fetch.min.bytes": "-1"})


def test_librdkafka_names():
    c = ConsumerConfig.from_properties({"fetch.wait.max.ms": "7", "fetch.message.max.bytes": "2048",
                                        "auto.offset.reset": "smallest"})
    assert (c.fetch_max_wait_ms, c.max_partition_fetch_bytes) == (7, 2048)
    assert c.auto_offset_reset.strategy is OffsetResetStrategy.EARLIEST


def test_pieces_and_description():
    c = ConsumerConfig.from_properties({"group.id": "g", "max.poll.interval.ms": "1234"})
    assert c.group.rebalance_timeout_ms == 1234 and c.fetch.max_wait_ms == 500
    assert ("fetch.max.wait.ms", "500", "an integer number of milliseconds in [0, 2147483647]") in \
        describe_consumer_properties()


# -- partition.assignment.strategy: Java's class names exactly, or librdkafka's names ---------------
_CLASSES = {"org.apache.kafka.clients.consumer.RangeAssignor": "range",
            "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky"}
_SPELLINGS = [*_CLASSES, *_CLASSES.values()]


def _strategy(value):
    return ConsumerConfig.from_properties({"partition.assignment.strategy": value}).partition_assignment_strategy


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_SPELLINGS), min_size=1, max_size=3), st.sampled_from(["", " ", "  "]))
def test_assignment_strategy_takes_java_classes_and_librdkafka_names_in_order(names, pad):
    """ConsumerPartitionAssignor.getAssignorInstances loads each class of the list in order
    (ConfigDef LIST: trimmed elements); two entries with one assignor name are refused."""
    protocols = [_CLASSES.get(n, n) for n in names]
    text = ",".join(pad + n + pad for n in names)
    if len(set(protocols)) < len(protocols):
        with pytest.raises(ConfigError, match=r"^invalid value .* 'partition.assignment.strategy': assignor .* named twice"):
            _strategy(text)
    else:
        assert _strategy(text) == tuple(protocols)
        # Written back as Java writes the list: the classes.
        c = ConsumerConfig.from_properties({"partition.assignment.strategy": text})
        assert c.to_properties()["partition.assignment.strategy"] == ",".join(
            {v: k for k, v in _CLASSES.items()}[p] for p in protocols)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_SPELLINGS), st.data())
def test_assignment_strategy_compares_names_exactly(name, data):
    """Java's class loader is case-sensitive (as librdkafka's strcmp): any other casing is
    refused with one line naming the property, the spelling to write and the choices."""
    flips = data.draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    changed = "".join(ch.swapcase() if f else ch for ch, f in zip(name, flips))
    assume(changed != name)
    with pytest.raises(ConfigError) as e:
        _strategy(changed)
    msg = str(e.value)
    assert "\n" not in msg and "'partition.assignment.strategy'" in msg
    assert f"write {name!r}" in msg and "org.apache.kafka.clients.consumer.RangeAssignor" in msg


def test_assignment_strategy_refusals_say_why():
    for value, why in [("com.example.Mine", "Java code, which kctl cannot run"),
                       ("range,", "an empty element"), (",range", "an empty element"),
                       ("", "names no assignor"),
                       ("org.apache.kafka.clients.consumer.StickyAssignor", "StickyAssignorUserData"),
                       ("RangeAssignor", "choices: org.apache.kafka.clients.consumer.RangeAssignor")]:
        with pytest.raises(ConfigError, match=why):
            _strategy(value)
