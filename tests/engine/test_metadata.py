"""Metadata (engine/metadata.py) stepped with passed-in times: topics idle for
``metadata.max.idle.ms`` leave the Metadata requests and the view.

Java's cases: ProducerMetadataTest.testTopicExpiry (a topic not used for
metadata.max.idle.ms is dropped at the next update, one used since is kept; a topic
added and not yet answered is kept, its first answer too).
"""

from __future__ import annotations

from kctl.config import ProducerConfig
from kctl.consumer_config import ConsumerConfig
from kctl.engine.clock import NS_PER_MS
from kctl.engine.metadata import Metadata
from .consumer_harness import MetadataResponse, metadata_body

IDLE_MS = 5000


def _answer(*topics: str) -> MetadataResponse:
    body = metadata_body(topic=topics[0])
    body.topics = [t for name in topics for t in metadata_body(topic=name).topics]
    return body


def _requested(md: Metadata, now_ns: int) -> list[str]:
    req = md.build_request(now_ns, 12)
    return sorted(t.name for t in req.topics)


def test_topic_expiry_drops_topics_idle_for_metadata_max_idle_ms():
    md = Metadata(ProducerConfig.from_properties({"metadata.max.idle.ms": IDLE_MS}).metadata)
    md.add_topics(["a", "b"], now_ns=0)
    md.handle_response(_answer("a", "b"), now_ns=1000 * NS_PER_MS)
    assert md.partition_count("b") == 2
    md.last_use_ns["a"] = 4000 * NS_PER_MS          # a send to "a" (Producer.send writes this)
    md.handle_response(_answer("a", "b"), now_ns=IDLE_MS * NS_PER_MS)   # "b" idle exactly 5 s
    assert md.topics == {"a"}
    assert md.partition_count("b") is None and md.partition_count("a") == 2
    assert "b" not in md.topic_ids
    assert _requested(md, 6000 * NS_PER_MS) == ["a"]
    md.handle_response(_answer("a"), now_ns=7000 * NS_PER_MS)
    md.add_topics(["b"], now_ns=8000 * NS_PER_MS)       # sent to again: asked for again
    assert md.update_requested and _requested(md, 8000 * NS_PER_MS) == ["a", "b"]


def test_a_topic_not_yet_answered_never_expires():
    md = Metadata(ProducerConfig.from_properties({"metadata.max.idle.ms": IDLE_MS}).metadata)
    md.add_topics(["a"], now_ns=0)
    md.add_topics(["late"], now_ns=0)
    md.handle_response(_answer("a"), now_ns=10_000 * NS_PER_MS)     # a new topic's first answer
    assert md.topics == {"a", "late"}
    md.handle_response(_answer("a"), now_ns=11_000 * NS_PER_MS)     # no word on "late" yet
    assert md.topics == {"late"}       # "a" idle for 11 s; "late" still new
    md.handle_response(_answer("late"), now_ns=12_000 * NS_PER_MS)
    md.handle_response(_answer("late"), now_ns=20_000 * NS_PER_MS)
    assert md.topics == set()


def test_the_consumers_topics_never_expire():
    md = Metadata(ConsumerConfig.from_properties({}).metadata)
    md.add_topics(["a"], now_ns=0)
    md.handle_response(_answer("a"), now_ns=1000 * NS_PER_MS)
    md.handle_response(_answer("a"), now_ns=10**6 * NS_PER_MS)
    assert md.topics == {"a"} and md.partition_count("a") == 2


def test_refresh_backoff_is_jittered_exponential():
    """Java's Metadata.refreshBackoff (KIP-580): ExponentialBackoff(retry.backoff.ms, 2,
    retry.backoff.max.ms, 0.2), attempt ``failures - 1`` (0 after an answer). The random
    source is pinned: 0.0 gives a factor of 0.8, 0.99 one of 1.196; never above the max."""
    cfg = ProducerConfig.from_properties({"retry.backoff.ms": 100, "retry.backoff.max.ms": 1000}).metadata
    draws = iter([0.0, 0.0, 0.99, 0.99, 0.0])
    md = Metadata(cfg, random=lambda: next(draws))      # the first draw: at construction
    now = 0
    md.build_request(now, 12)
    waits = []
    for _ in range(3):
        md.failed_update(now)                   # failures 1, 2, 3: 100, 200, 400 ms x jitter
        waits.append(md.time_to_next_update_ns(now) // 1000)
    assert waits == [80_000, 239_200, 478_400]      # x 0.8, x 1.196, x 1.196
    md.handle_response(_answer("t"), now)       # an answer: retry.backoff.ms again, jittered
    md.request_update()
    assert md.time_to_next_update_ns(now) == 80 * NS_PER_MS
    md = Metadata(cfg, random=lambda: 0.999999)
    md.build_request(0, 12)
    for _ in range(6):
        md.failed_update(0)
    assert md.time_to_next_update_ns(0) == 1000 * NS_PER_MS     # capped at the max
