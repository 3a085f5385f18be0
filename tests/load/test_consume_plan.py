"""``kctl consume``'s plan (load/consume.prepare): where a group's partitions without a
committed offset start, and the idle stop a --num-records run gets by default."""

from __future__ import annotations

import pytest

from kctl.errors import ConfigError
from kctl.load.consume import DEFAULT_IDLE_TIMEOUT_S, ConsumeOptions, prepare


def _reset(**kw) -> str:
    plan = prepare(ConsumeOptions(bootstrap="127.0.0.1:9092", consumers=1, **kw))
    return plan.config.auto_offset_reset.to_text()   # what the consumers are built with


def test_a_group_without_from_starts_uncommitted_partitions_at_the_beginning(tmp_path):
    assert _reset(group="g") == "earliest"
    assert _reset(group="g", start="beginning") == "earliest"
    assert _reset(group="g", start="end") == "latest"
    # --from committed is the default spelled out: the same rule, as --help says (it fell
    # back to the Java client's latest, silently skipping an uncommitted partition's records).
    assert _reset(group="g", start="committed") == "earliest"
    assert _reset(group="g", start="committed", properties=("auto.offset.reset=latest",)) == "latest"
    # The user's auto.offset.reset wins over --from's default, from -X or a consumer config file.
    assert _reset(group="g", properties=("auto.offset.reset=latest",)) == "latest"
    f = tmp_path / "c.properties"
    f.write_text("auto.offset.reset=none\n")
    assert _reset(group="g", consumer_config=(str(f),)) == "none"
    with pytest.raises(ConfigError, match="disagree"):
        _reset(group="g", start="end", properties=("auto.offset.reset=earliest",))


def test_num_records_alone_gets_perf_tests_idle_timeout():
    def plan(**kw):
        return prepare(ConsumeOptions(bootstrap="127.0.0.1:9092", consumers=1, **kw))
    assert plan(num_records=100).idle_timeout_s == DEFAULT_IDLE_TIMEOUT_S == 10.0
    assert plan(num_records=100, idle_timeout="2s").idle_timeout_s == 2.0
    # A --duration already ends the run: no idle stop unless asked.
    assert plan(num_records=100, duration="30s").idle_timeout_s is None
    assert plan(duration="30s").idle_timeout_s is None


def test_a_warmup_as_long_as_the_duration_is_refused():
    """--duration includes the warm-up: --warmup 5s --duration 3s measured nothing (all
    zeros, exit 0). produce has the same rule and the same line."""
    from kctl.load import produce

    def plan(**kw):
        return prepare(ConsumeOptions(bootstrap="127.0.0.1:9092", consumers=1, **kw))
    for warmup, duration in (("5s", "3s"), ("3s", "3s")):
        with pytest.raises(ConfigError, match=rf"--warmup {warmup} is not shorter than --duration {duration}"):
            plan(warmup=warmup, duration=duration)
        with pytest.raises(ConfigError, match=rf"--warmup {warmup} is not shorter than --duration {duration}"):
            produce.prepare(produce.ProduceOptions(bootstrap="127.0.0.1:9092", workers=1, warmup=warmup,
                                                   duration=duration))
    assert plan(warmup="2s", duration="3s").warmup_s == 2.0
    with pytest.raises(ConfigError, match="not shorter than --duration"):
        plan(warmup="11s")                        # the default --duration is 10s
