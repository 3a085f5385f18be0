"""``kctl consume``'s plan (load/consume.prepare): where a group's partitions without a
committed offset start, and the idle stop a --num-records run gets by default."""

from __future__ import annotations

import dataclasses

import pytest

from kctl.commands.consume import no_e2e_samples
from kctl.engine.consumer_metrics import ConsumerMetricsSnapshot
from kctl.engine.setup_retry import SetupRetry
from kctl.errors import ConfigError, EndOffsetsError, KctlError, RetriableEndOffsetsError
from kctl.load import consume
from kctl.load.consume import DEFAULT_IDLE_TIMEOUT_S, ConsumeOptions, past_log_end, prepare
from kctl.stats.consume_aggregate import ConsumeStats
from kctl.stats.consume_report import ConsumerInterval, PartitionProgress


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


def _summary_with(*parts):
    """A consume summary whose final partitions are ``(partition, position, end_offset)``."""
    st = ConsumeStats(consumers=1, start_wall_ns=10**18, run_id="r")
    progress = tuple(PartitionProgress("t", p, pos, end) for p, pos, end in parts)
    st.add(ConsumerInterval(0, 10**18, 10**18 + 10**9, {}, ConsumerMetricsSnapshot(), progress, final=True))
    return st.summary()


class _Client:
    """A stand-in for the bootstrap BlockingClient (setup_retry connects and closes it)."""

    def __init__(self, address):
        self.address = address
        self.connected = False

    def connect(self):
        self.connected = True

    def close(self):
        self.connected = False


class _Clock:
    def __init__(self):
        self.ns = 0
        self.slept = []

    def now(self):
        return self.ns

    def sleep(self, ns):
        self.slept.append(ns)
        self.ns += ns


#: default.api.timeout.ms 1000 (60000 by default), retry.backoff.ms 100 up to 400
_RETRY = SetupRetry(1000, "default.api.timeout.ms", 100, 400)
_MS = 1_000_000


def _final(summary, monkeypatch, *answers, isolation_level=1):
    """``_with_final_ends`` with ``admin.log_end_offsets`` answering ``answers`` in turn (an
    exception is raised; the last answer repeats), stepped with a fake clock. Returns the
    summary, the warnings, what was asked and the clock."""
    asked = []

    def ends(client, topic, partitions, *, client_for, isolation_level):
        asked.append((client.address, topic, tuple(partitions), isolation_level, client_for))
        answer = answers[min(len(asked), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(consume.admin, "log_end_offsets", ends)
    events, clock = [], _Clock()
    s = consume._with_final_ends(summary, bootstrap="b:9092", client_for=_Client, isolation_level=isolation_level,
                                 retry=_RETRY, on_event=events.append, now_ns=clock.now, sleep_ns=clock.sleep)
    return s, events, asked, clock


def test_final_lag_asks_the_end_of_partitions_never_fetched(monkeypatch):
    # partitions 2 and 3 positioned but never fetched: no end offset from a Fetch answer
    summary = _summary_with((0, 100, 1000), (1, 4000, 4000), (2, 0, -1), (3, 0, -1))
    s, events, asked, clock = _final(summary, monkeypatch, {2: 5000, 3: 5500})
    # Metadata from the bootstrap broker; the leaders are reached through the same factory
    assert asked == [("b:9092", "t", (2, 3), 1, _Client)] and events == [] and clock.slept == []
    assert s.lag_final == 900 + 0 + 5000 + 5500 and s.lag_unknown == ()
    assert [p.lag for p in s.partitions] == [900, 0, 5000, 5500]


@pytest.mark.parametrize("failures", [1, 2, 3])
def test_final_lag_asks_again_while_the_errors_may_pass(monkeypatch, failures):
    # Java's Consumer.endOffsets(partitions, default.api.timeout.ms): a leader moving is
    # waited out; each attempt is one round (the engine does not ask twice itself)
    summary = _summary_with((0, 100, 1000), (2, 0, -1), (3, 0, -1))
    moving = RetriableEndOffsetsError("t", {2: 5000}, {3: "NOT_LEADER_OR_FOLLOWER from broker 2 (h2:9092)"})
    s, events, asked, clock = _final(summary, monkeypatch, *[moving] * failures, {2: 5000, 3: 5500})
    assert len(asked) == failures + 1 and events == []
    nominal = [100 * _MS, 200 * _MS, 400 * _MS][:failures]       # retry.backoff.ms doubling, 20 % jitter
    assert len(clock.slept) == failures and all(0.8 * n <= got <= 1.2 * n for got, n in zip(clock.slept, nominal))
    assert s.lag_final == 900 + 5000 + 5500 and s.lag_unknown == ()


def test_final_lag_gives_up_at_default_api_timeout_ms_with_what_was_answered(monkeypatch):
    summary = _summary_with((0, 100, 1000), (2, 0, -1), (3, 0, -1))
    moving = RetriableEndOffsetsError("t", {2: 5000}, {3: "NOT_LEADER_OR_FOLLOWER from broker 2 (h2:9092)"})
    s, events, asked, clock = _final(summary, monkeypatch, moving)
    assert len(asked) >= 3 and clock.ns < 1000 * _MS                # the bound is kept
    assert s.lag_unknown == (3,) and s.lag_final == 900 + 5000 and s.partitions[2].lag is None
    assert events == ["warning: the end offset of partition(s) 3 never fetched is unknown "
                      f"(NOT_LEADER_OR_FOLLOWER from broker 2 (h2:9092): partition(s) 3; asked {len(asked)} time(s) "
                      "for default.api.timeout.ms=1000 ms); the final lag leaves them out"]


def test_final_lag_says_an_error_that_will_not_pass_at_once(monkeypatch):
    # a leader's error for one partition: that one is said and left out, never a lag of 0
    summary = _summary_with((0, 100, 1000), (1, 4000, 4000), (2, 0, -1), (3, 0, -1))
    denied = EndOffsetsError("t", {2: 5000}, {3: "TOPIC_AUTHORIZATION_FAILED from broker 2 (h2:9092)"})
    s, events, asked, clock = _final(summary, monkeypatch, denied)
    assert len(asked) == 1 and clock.slept == []
    assert s.lag_unknown == (3,) and s.lag_final == 900 + 5000 and s.partitions[3].lag is None
    assert s.to_json()["lag"]["unknown_partitions"] == [3]
    assert events == ["warning: the end offset of partition(s) 3 never fetched is unknown "
                      "(TOPIC_AUTHORIZATION_FAILED from broker 2 (h2:9092): partition(s) 3); "
                      "the final lag leaves them out"]

    # Metadata failing otherwise (a broker error, the bootstrap broker unreachable): the lag
    # is partial and names the partitions, it is not a smaller sum
    s, events, asked, clock = _final(summary, monkeypatch, KctlError("topic 't' on b:9092: INVALID_TOPIC"),
                                     isolation_level=0)
    assert len(asked) == 1 and asked[0][3] == 0
    assert s.lag_unknown == (2, 3) and s.lag_final == 900
    assert s.to_json()["lag"]["unknown_partitions"] == [2, 3]
    assert len(events) == 1 and "partition(s) 2, 3" in events[0]


def test_a_position_past_the_log_end_is_named():
    line = past_log_end(_summary_with((0, 999999, 4800), (1, 10, 20)))
    assert line == ("WARNING: position past the log end in partition(s) 0 (position 999999, end offset 4800): "
                    "nothing was there to read and their lag shows as 0")
    assert past_log_end(_summary_with((0, 20, 20))) is None


def test_no_e2e_samples_says_why():
    s = _summary_with((0, 500, 500))
    unstamped = dataclasses.replace(s, counts=dataclasses.replace(s.counts, records=500, unidentified=500))
    assert no_e2e_samples(unstamped) == (
        "e2e: no samples: of 500 records read, 500 without a kctl identity header (not written by kctl "
        "produce); e2e needs the send time kctl produce stamps on each record")
    assert no_e2e_samples(s) == "e2e: no samples: no records were read"


def test_assign_mode_starts_by_an_explicit_auto_offset_reset():
    """Java's assign() without a seek starts each partition by auto.offset.reset: given
    (-X or a consumer config) without --from, it decides the start (it was accepted and
    ignored: assign mode read from the beginning); an explicit --from still wins."""
    def start(**kw):
        return prepare(ConsumeOptions(bootstrap="127.0.0.1:9092", consumers=1, **kw)).start
    assert start().kind == "beginning"                       # kctl's default, no reset given
    latest = start(properties=("auto.offset.reset=latest",))
    assert (latest.kind, latest.describe()) == ("reset", "auto.offset.reset=latest")
    assert start(properties=("auto.offset.reset=none",)).reset == "none"
    assert start(properties=("auto.offset.reset=smallest",)).reset == "earliest"   # librdkafka's name
    assert start(properties=("auto.offset.reset=latest",), start="beginning").kind == "beginning"
    assert start(properties=("auto.offset.reset=earliest",), start="end").kind == "end"


def test_produce_consume_reads_without_a_group_so_its_consumers_never_commit(tmp_path):
    """produce --consume's consumers are in assign mode with no group.id (refused, from a
    --consumer-property or a --consumer-config file), so they have no coordinator and no
    closing commit (nor a revoke listener's) that could fail: there is no closing-commit
    WARNING for produce to print (kctl consume's is for a group)."""
    from kctl.load import produce

    def plan(**kw):
        return produce.prepare(produce.ProduceOptions(bootstrap="127.0.0.1:9092", workers=1, consume=True, **kw))
    assert plan().consumer.group is None and not plan().consumer.enable_auto_commit
    with pytest.raises(ConfigError, match="drop group.id"):
        plan(consumer_properties=("group.id=g",))
    props = tmp_path / "c.properties"
    props.write_text("group.id=g\n")
    with pytest.raises(ConfigError, match="drop group.id"):
        plan(consumer_config=(str(props),))
    with pytest.raises(ConfigError, match="enable.auto.commit=true needs a group.id"):
        plan(consumer_properties=("enable.auto.commit=true",))
