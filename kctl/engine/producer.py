"""Producer: the engine's public face (the Java client's KafkaProducer).

How this works
--------------
The engine is single-threaded: one producer per worker process, and the thread
that calls it also runs its I/O loop. ``send()`` appends to the accumulator and
then takes one non-blocking turn of the loop when something may be due (a
batch filled, a new batch opened, or the sender's wake-up time passed), so a
steady stream of sends keeps data flowing without a background thread.
``poll(timeout)`` runs the loop for a while (use it between sends, like
librdkafka's ``poll``); ``flush()`` runs it until everything sent so far has
resolved; ``close()`` flushes within a timeout and fails what is left.

Blocking: a send that needs metadata for a new topic, or memory when
``buffer.memory`` is used up, runs the loop until it has them or
``max.block.ms`` passes, then raises a clear ``KctlError``.

Each record resolves exactly once, through its ``RecordHandle`` (and the
callback given to ``send``): acknowledged with its offset, or failed with a
Kafka error name (or kctl's: DELIVERY_TIMEOUT).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kctl.config import ProducerConfig
from kctl.engine.accumulator import RecordAccumulator
from kctl.engine.batch import ProducerBatch, RecordHandle, TopicPartition
from kctl.engine.buffer_pool import BufferPool
from kctl.engine.clock import NS_PER_MS, Clock, SystemClock
from kctl.engine.idempotence import Idempotence
from kctl.engine.metadata import Metadata
from kctl.engine.metrics import ProducerMetrics
from kctl.engine.network import NetworkClient
from kctl.engine.partitioner import Partitioner
from kctl.engine.sender import Sender
from kctl.errors import ConfigError, KctlError
from kctl.protocol.batch_builder import BatchTemplate
from kctl.protocol.records import Header


class ProducerClosedError(KctlError):
    """send() after close()."""


class Producer:
    def __init__(self, config: ProducerConfig, *, clock: Clock | None = None,
                 on_batch_done: Callable[[ProducerBatch], None] | None = None,
                 network: NetworkClient | None = None) -> None:
        if not config.bootstrap_servers and network is None:
            raise ConfigError("bootstrap.servers is required")
        self.config = config
        self.clock = clock or SystemClock()
        self.metrics = ProducerMetrics()
        self.pool = BufferPool(config.buffer_pool.buffer_memory, config.buffer_pool.batch_size)
        idem_cfg = config.idempotence
        self.idempotence = Idempotence(idem_cfg) if idem_cfg.enabled else None
        sender_cfg = config.sender
        self.accumulator = RecordAccumulator(
            config.accumulator, self.pool, sequences=self.idempotence,
            guarantee_order=sender_cfg.max_in_flight_requests_per_connection == 1,
            wall_offset_ns=self.clock.wall_ns() - self.clock.now_ns())
        self.metadata = Metadata(config.metadata)
        self.network = network or NetworkClient(config.network, clock=self.clock,
                                                bootstrap=config.bootstrap_servers)
        self.partitioner = Partitioner(config.partitioning)
        self.sender = Sender(sender_cfg, self.accumulator, self.metadata, self.network,
                             idempotence=self.idempotence, metrics=self.metrics,
                             wall_ms=self.clock.wall_ms, on_batch_done=on_batch_done,
                             batch_size=config.batch_size)
        self.max_block_ns = config.max_block_ms * NS_PER_MS
        self._next_wake_ns = 0
        self._closed = False

    # -- the loop --------------------------------------------------------------------------
    def _step(self, max_wait_ns: int = 0) -> None:
        """One turn: decide and send, then wait for I/O at most ``max_wait_ns``."""
        now = self.clock.now_ns()
        self._next_wake_ns = self.sender.run_once(now)
        wait = max(0, min(self._next_wake_ns - now, max_wait_ns))
        self.network.poll(wait, now)

    def _run_step(self, now_ns: int, deadline_ns: int) -> None:
        """Loop step used while blocked on memory (buffer_pool.allocate)."""
        self._step(max(0, min(deadline_ns - now_ns, 10 * NS_PER_MS)))

    def poll(self, timeout_s: float = 0.0) -> None:
        """Runs the loop for up to ``timeout_s`` (at least one turn)."""
        deadline = self.clock.now_ns() + int(timeout_s * 1e9)
        while True:
            now = self.clock.now_ns()
            self._step(max(0, deadline - now))
            if self.clock.now_ns() >= deadline:
                return

    # -- metadata ------------------------------------------------------------------------------
    def partitions_for(self, topic: str) -> tuple[int, ...]:
        """The topic's partitions, waiting for metadata up to max.block.ms."""
        count = self.metadata.partition_count(topic)
        if count is not None:
            return tuple(range(count))
        self.metadata.add_topics([topic])
        self.metadata.request_update()
        deadline = self.clock.now_ns() + self.max_block_ns
        while (count := self.metadata.partition_count(topic)) is None:
            now = self.clock.now_ns()
            if now >= deadline:
                raise KctlError(
                    f"topic {topic!r} not present in metadata after {self.config.max_block_ms} ms "
                    f"(max.block.ms); does it exist on {self._bootstrap_text()}?")
            if self.sender.fatal_error:
                raise KctlError(self.sender.fatal_error)
            self._step(min(deadline - now, 50 * NS_PER_MS))
        return tuple(range(count))

    def _bootstrap_text(self) -> str:
        return ",".join(f"{a.host}:{a.port}" for a in self.config.bootstrap_servers) or "the cluster"

    # -- sending -------------------------------------------------------------------------------
    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Sequence[Header | tuple[str, bytes | None]] = (),
             partition: int | None = None, timestamp_ms: int | None = None,
             callback: Callable[[RecordHandle], object] | None = None, *,
             intended_ns: int = -1, first_seq: int = -1) -> RecordHandle:
        """Queues one record; ``intended_ns``/``first_seq`` are the load generator's
        schedule time and sequence number for latency accounting (-1: none)."""
        if self._closed:
            raise ProducerClosedError("send() after close()")
        hdrs = tuple(h if isinstance(h, Header) else Header(h[0], h[1]) for h in headers) if headers else ()
        num = len(self.partitions_for(topic))
        available = self.metadata.available_partitions(topic)
        part = self.partitioner.partition(topic, key, num, available, explicit=partition)
        ts = self.clock.wall_ms() if timestamp_ms is None else timestamp_ms
        now = self.clock.now_ns()
        tp = TopicPartition(topic, part)
        sticky = self.partitioner.sticks(key, partition)
        result = self.accumulator.append(tp, ts, key, value, hdrs, now, abort_on_new_batch=sticky,
                                         intended_ns=intended_ns, first_seq=first_seq)
        if result.abort_for_new_batch:
            # KIP-480: a new batch is a chance to move the sticky partition.
            self.partitioner.on_new_batch(topic, part)
            part = self.partitioner.partition(topic, key, num, available, explicit=partition)
            tp = TopicPartition(topic, part)
            result = self.accumulator.append(tp, ts, key, value, hdrs, now,
                                             intended_ns=intended_ns, first_seq=first_seq)
        while result.needs_memory:
            buffer = self.pool.allocate(result.needs_memory, max_block_ms=self.config.max_block_ms,
                                        clock=self.clock, run_step=self._run_step)
            self.pool.deallocate(buffer, result.needs_memory)
            result = self.accumulator.append(tp, ts, key, value, hdrs, self.clock.now_ns(),
                                             intended_ns=intended_ns, first_seq=first_seq)
        handle = result.handle
        assert handle is not None
        if sticky:
            size = len(value or b"") + len(key or b"")
            self.partitioner.on_append(topic, part, size, enable_switch=result.batch_is_full)
        if callback is not None:
            handle.add_callback(callback)
        # A turn when a batch just filled (the append opened the next one) or when the
        # sender asked to be woken by now; not on every append behind a full batch,
        # which under backpressure would run the whole sender once per record.
        if result.new_batch_created or now >= self._next_wake_ns:
            self._step(0)
        return handle

    def send_bulk(self, topic: str, partition: int, values: Sequence[bytes], *,
                  template: BatchTemplate, record_bytes: int, value_size: int | None = None,
                  intended_first_ns: int = -1, intended_step_ns: int = 0,
                  first_seq: int = -1) -> int:
        """The load path: a slice of same-template values into one partition, through
        the same accumulator, batches and sender as ``send``. Completion is reported
        per batch through ``on_batch_done`` (no handle per record). Returns how many
        new batches the slice opened."""
        if self._closed:
            raise ProducerClosedError("send_bulk() after close()")
        tp = TopicPartition(topic, partition)
        done = 0
        opened = 0
        while done < len(values):
            now = self.clock.now_ns()
            res = self.accumulator.append_bulk(
                tp, values[done:] if done else values, record_bytes, template, now,
                self.clock.wall_ms(), value_size=value_size,
                intended_first_ns=(intended_first_ns + done * intended_step_ns
                                   if intended_first_ns >= 0 else -1),
                intended_step_ns=intended_step_ns,
                first_seq=first_seq + done if first_seq >= 0 else -1)
            done += res.appended
            opened += res.new_batches
            if res.needs_memory:
                buffer = self.pool.allocate(res.needs_memory, max_block_ms=self.config.max_block_ms,
                                            clock=self.clock, run_step=self._run_step)
                self.pool.deallocate(buffer, res.needs_memory)
            elif res.new_batches:
                self._step(0)
        if self.clock.now_ns() >= self._next_wake_ns:
            self._step(0)
        return opened

    # -- flush and close ------------------------------------------------------------------------
    def flush(self, timeout_s: float | None = None) -> bool:
        """Runs the loop until every record sent so far has resolved; False on timeout."""
        self.accumulator.begin_flush()
        try:
            deadline = None if timeout_s is None else self.clock.now_ns() + int(timeout_s * 1e9)
            while self.accumulator.incomplete_count:
                now = self.clock.now_ns()
                if deadline is not None and now >= deadline:
                    return False
                self._step(10 * NS_PER_MS if deadline is None else min(deadline - now, 10 * NS_PER_MS))
            return True
        finally:
            self.accumulator.end_flush()

    def close(self, timeout_s: float | None = None) -> None:
        """Flushes within ``timeout_s`` (forever when None); fails what is left; closes sockets."""
        if self._closed:
            return
        self._closed = True
        self.accumulator.close()
        try:
            if not self.flush(timeout_s):
                now = self.clock.now_ns()
                for b in self.accumulator.remove_all():
                    self.sender._fail(b, "PRODUCER_CLOSED",
                                      "the producer was closed before the record was sent", now)
                self.sender.fail_in_flight("PRODUCER_CLOSED",
                                           "the producer was closed before the broker answered", now)
        finally:
            # acks=0 has nothing to wait for: close gracefully so the broker reads
            # the last request before it sees the connection end.
            self.network.close_all(linger_s=1.0 if self.config.acks == 0 else 0.0)
            self.pool.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def in_flight_requests(self) -> int:
        return self.network.in_flight_request_count()

    def wall_ms(self) -> int:
        return self.clock.wall_ms()
