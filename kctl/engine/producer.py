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

Blocking: a send that needs metadata for a new topic runs the loop until it
has it or ``max.block.ms`` passes, then raises a clear ``KctlError``. A send that
needs memory when ``buffer.memory`` is used up runs the loop until memory frees;
after ``max.block.ms`` its records fail with BUFFER_EXHAUSTED (Java's
BufferExhaustedException, delivered through the callback), and the producer goes
on. Records handed over together (one ``send_bulk`` call) wait together: one
wait, then every record of the call that did not get memory fails.

Each record resolves exactly once, through its ``RecordHandle`` (and the
callback given to ``send``): acknowledged with its offset, failed with a
Kafka error name (or kctl's: DELIVERY_TIMEOUT, BUFFER_EXHAUSTED), or abandoned
(``close(abandon_reason=...)``: the run stopped before it had a verdict).

Transactions (``transactional.id``): ``init_transactions()``, then
``begin_transaction()`` / sends / ``commit_transaction()`` or
``abort_transaction()``, as the Java client's; each runs the loop until the
coordinator has answered (transactions.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bisect import bisect_left

from kctl.config import PartitionerKind, ProducerConfig
from kctl.engine.accumulator import (
    RECORD_OVERHEAD_BOUND,
    PartitionLoad,
    RecordAccumulator,
    record_size_estimate,
)
from kctl.engine.backoff import Random
from kctl.engine.batch import (
    RECORD_BATCH_OVERHEAD,
    BatchResult,
    BatchState,
    ProducerBatch,
    RecordHandle,
    TopicPartition,
)
from kctl.engine.bulk import KeyLayout, RecordPool, RecordShape
from kctl.engine.buffer_pool import BufferPool
from kctl.engine.clock import NS_PER_MS, Clock, SystemClock
from kctl.engine.idempotence import Idempotence
from kctl.engine.metadata import Metadata
from kctl.engine.metrics import MetricsSnapshot, ProducerMetrics
from kctl.engine.network import NetworkClient
from kctl.engine.partitioner import Partitioner
from kctl.engine.sender import Sender
from kctl.engine.transactions import (
    AUTHORIZATION_ERRORS,
    TransactionConfig,
    TransactionResult,
    Transactions,
    TransactionState,
)
from kctl.errors import BufferExhaustedError, ConfigError, InvalidPartitionError, KctlError
from kctl.protocol.batch_builder import BatchTemplate
from kctl.protocol.compression import Compression
from kctl.protocol.records import Header

PLAIN = RecordShape()
_OPEN = BatchState.OPEN
#: The error a record gets when buffer.memory stayed full for max.block.ms (Java's
#: BufferExhaustedException).
BUFFER_EXHAUSTED = "BUFFER_EXHAUSTED"
#: Keys whose partition a topic remembers (murmur2 costs more than the rest of a send).
KEY_CACHE_SIZE = 65536


class _TopicState:
    """What sends to one topic need from metadata, rebuilt when metadata changes."""

    __slots__ = ("topic", "version", "num_partitions", "available", "tps", "key_partitions",
                 "sticky_budget", "open_batches")

    def __init__(self, topic: str, version: int, num_partitions: int, available: tuple[int, ...],
                 tps: tuple[TopicPartition, ...]) -> None:
        self.topic = topic
        self.version = version
        self.num_partitions = num_partitions
        self.available = available
        self.tps = tps
        self.key_partitions: dict[bytes, int] = {}
        self.open_batches: list[ProducerBatch | None] = [None] * num_partitions
        # send()'s sticky partition, bytes before it may switch (batch.size) and before
        # it must (twice that), bytes not yet reported to the partitioner
        self.sticky_budget: list[int] = [-1, 0, 0, 0]


class _BulkRun:
    """One ``send_bulk`` call's common facts and running counters."""

    __slots__ = ("template", "record_bytes", "value_size", "intended_first_ns",
                 "intended_step_ns", "next_seq", "opened", "switched", "handed_ns", "no_memory")

    def __init__(self, template: BatchTemplate, record_bytes: int, value_size: int | None,
                 intended_first_ns: int, intended_step_ns: int, first_seq: int,
                 handed_ns: int) -> None:
        self.template = template
        self.record_bytes = record_bytes
        self.value_size = value_size
        self.intended_first_ns = intended_first_ns
        self.intended_step_ns = intended_step_ns
        self.next_seq = first_seq
        self.opened = 0
        self.switched = False
        self.handed_ns = handed_ns    # when the call handed the records over (the send clock)
        # A wait for memory ran out: the rest of the call fails without waiting again.
        self.no_memory: BufferExhaustedError | None = None


class ProducerClosedError(KctlError):
    """send() after close()."""


class ProducerFatalError(KctlError):
    """The producer cannot go on (fenced, not authorized, an unsupported version):
    Java's fatal errors. Every record it held has failed with the error's name."""


class TransactionAbortableError(KctlError):
    """The transaction failed and must be aborted (``abort_transaction()``); the
    producer can then go on with a new one (Java's abortable errors)."""


class TransactionTimeoutError(KctlError):
    """A transactional call did not complete within its time (Java's TimeoutException
    from commitTransaction / abortTransaction): the commit or abort is still under way,
    and asking for it again goes on waiting for the same one."""


class Producer:
    def __init__(self, config: ProducerConfig, *, clock: Clock | None = None,
                 on_batch_done: Callable[[ProducerBatch], None] | None = None,
                 network: NetworkClient | None = None, random: Random | None = None) -> None:
        """``random``: the jitter source of the retry backoff (``RecordAccumulator``) and of
        the metadata refresh backoff (``Metadata``); pinned or seeded by tests that step
        the producer with a fake clock."""
        if not config.bootstrap_servers and network is None:
            raise ConfigError("bootstrap.servers is required")
        self.config = config
        self.clock = clock or SystemClock()
        self.metrics = ProducerMetrics()
        self.pool = BufferPool(config.buffer_pool.buffer_memory, config.buffer_pool.batch_size)
        idem_cfg = config.idempotence
        transactional = idem_cfg.transactional_id is not None
        self.idempotence = (Idempotence(transactional=transactional, metrics=self.metrics)
                            if idem_cfg.enabled else None)
        self.transactions: Transactions | None = None
        if transactional:
            assert self.idempotence is not None   # config.py: transactional.id needs idempotence
            self.transactions = Transactions(
                TransactionConfig(idem_cfg.transactional_id, idem_cfg.transaction_timeout_ms,
                                  config.effective_retry_backoff_ms),
                self.idempotence, self.metrics)
        sender_cfg = config.sender
        self.accumulator = RecordAccumulator(
            config.accumulator, self.pool, sequences=self.idempotence,
            guarantee_order=sender_cfg.max_in_flight_requests_per_connection == 1,
            wall_offset_ns=self.clock.wall_ns() - self.clock.now_ns(), random=random)
        self.metadata = Metadata(config.metadata, random=random)
        self.network = network or NetworkClient(config.network, clock=self.clock,
                                                bootstrap=config.bootstrap_servers)
        self.partitioner = Partitioner(config.partitioning)
        self.sender = Sender(sender_cfg, self.accumulator, self.metadata, self.network,
                             idempotence=self.idempotence, metrics=self.metrics,
                             wall_ms=self.clock.wall_ms, on_batch_done=on_batch_done,
                             batch_size=config.batch_size,
                             on_partition_load=self._on_partition_load,
                             transactions=self.transactions,
                             transaction_timeout_ms=idem_cfg.transaction_timeout_ms)
        self.max_block_ns = config.max_block_ms * NS_PER_MS
        self._next_wake_ns = 0
        self._closed = False
        self._on_batch_done = on_batch_done
        # send() must ask first: is a transaction open, has the producer failed for good?
        self._guarded = self.idempotence is not None
        self._topics: dict[str, _TopicState] = {}
        # When each topic was last sent to (metadata.max.idle.ms): Metadata's own dict.
        self._topic_use = self.metadata.last_use_ns
        self._load_topics: set[str] = set()
        self._templates: dict[RecordShape, BatchTemplate] = {}
        # Pools with null values: templates that write them (BatchTemplate(null_values=True)).
        self._null_value_templates: dict[RecordShape, BatchTemplate] = {}
        self._record_bytes: dict[tuple[RecordShape, RecordPool], int] = {}
        self._layouts: dict[tuple[str, RecordPool], KeyLayout] = {}
        self._compression = Compression[config.compression_type.name]
        kind = config.partitioner
        self._uses_keys = self.partitioner.uses_keys
        # Which sticky rule keyless records follow: KIP-794 (default, sticky) or KIP-480 (murmur2).
        self._kip794 = kind in (PartitionerKind.DEFAULT, PartitionerKind.STICKY)
        self._abort_on_new_batch = kind is PartitionerKind.MURMUR2
        self._sticky = kind is not PartitionerKind.ROUND_ROBIN

    def _on_partition_load(self, loads: Sequence[PartitionLoad]) -> None:
        """Queue sizes from the accumulator's readiness check to the partitioner
        (KIP-794); a topic that no longer has them goes back to uniform draws."""
        if not loads and not self._load_topics:
            return
        seen = set()
        for load in loads:
            self.partitioner.update_load_stats(load.topic, load.partition_ids, load.queue_sizes,
                                               load.num_partitions)
            seen.add(load.topic)
        for topic in self._load_topics - seen:
            self.partitioner.update_load_stats(topic, None)
        self._load_topics = seen

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
    def _topic(self, topic: str) -> _TopicState:
        """The topic's partitions as metadata last said (cached until it changes),
        waiting for metadata up to max.block.ms."""
        t = self._topics.get(topic)
        if t is not None and t.version == self.metadata.version:
            return t
        count = self.metadata.partition_count(topic)
        if count is None:
            self.metadata.add_topics([topic], self.clock.now_ns())
            self.metadata.request_update()
            deadline = self.clock.now_ns() + self.max_block_ns
            while (count := self.metadata.partition_count(topic)) is None:
                now = self.clock.now_ns()
                if now >= deadline:
                    refresh_error = self.sender.metadata_updater.last_error
                    why = (f"the last metadata refresh failed: {refresh_error}" if refresh_error is not None
                           else f"does it exist on {self._bootstrap_text()}?")
                    raise KctlError(f"topic {topic!r} not present in metadata after "
                                    f"{self.config.max_block_ms} ms (max.block.ms); {why}")
                if self.sender.fatal_error:
                    raise KctlError(self.sender.fatal_error)
                self._step(min(deadline - now, 50 * NS_PER_MS))
        t = _TopicState(topic, self.metadata.version, count,
                        self.metadata.available_partitions(topic),
                        tuple(TopicPartition(topic, i) for i in range(count)))
        old = self._topics.get(topic)
        if old is not None:
            t.sticky_budget = old.sticky_budget
            if old.num_partitions == count:
                t.key_partitions = old.key_partitions
        self._topics[topic] = t
        return t

    def partitions_for(self, topic: str) -> tuple[int, ...]:
        """The topic's partitions, waiting for metadata up to max.block.ms."""
        return tuple(range(self._topic(topic).num_partitions))

    def _bootstrap_text(self) -> str:
        return ",".join(f"{a.host}:{a.port}" for a in self.config.bootstrap_servers) or "the cluster"

    # -- sending -------------------------------------------------------------------------------
    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Sequence[Header | tuple[str, bytes | None]] = (),
             partition: int | None = None, timestamp_ms: int | None = None,
             callback: Callable[[RecordHandle], object] | None = None) -> RecordHandle:
        """Queues one record; ``callback(handle)`` runs once it is acknowledged or has
        failed. The returned handle is a view of the record's batch."""
        if self._closed:
            raise ProducerClosedError("send() after close()")
        if self._guarded:
            self._check_ready_for_send()
        if headers:
            headers = tuple(h if type(h) is Header else Header(h[0], h[1]) for h in headers)
        t = self._topics.get(topic)
        if t is None or t.version != self.metadata.version:
            t = self._topic(topic)
        pt = self.partitioner
        sticky = False
        if partition is not None:
            if not 0 <= partition < t.num_partitions:
                raise InvalidPartitionError(
                    f"partition {partition} of topic {topic!r} does not exist "
                    f"(it has {t.num_partitions}: 0..{t.num_partitions - 1})")
            part = partition
        elif key is not None and self._uses_keys:
            kp = t.key_partitions
            part = kp.get(key, -1) if type(key) is bytes else -1
            if part < 0:
                part = pt.key_partition(key, t.num_partitions)
                if type(key) is bytes and len(kp) < KEY_CACHE_SIZE:
                    kp[key] = part
        elif self._sticky:
            part = pt.sticky_partition(topic, t.num_partitions, t.available)
            sticky = True
        else:
            part = pt.partition(topic, None, t.num_partitions, t.available)   # round-robin
        tp = t.tps[part]
        ts = self.clock.wall_ms() if timestamp_ms is None else timestamp_ms
        now = self.clock.now_ns()
        self._topic_use[topic] = now
        acc = self.accumulator
        # The batch this partition's last record went into, while it is open (only a
        # deque's last batch can be): the common case needs no accumulator lookup.
        batch = t.open_batches[part]
        index = -1
        if batch is not None and batch.state is _OPEN:
            size = RECORD_OVERHEAD_BOUND + (len(key) if key else 0) + (len(value) if value else 0)
            if headers:
                size = record_size_estimate(key, value, headers)
            index = batch.try_append(ts, key, value, headers, size, now, callback)
        new_batch = False
        if index < 0:
            result = acc.append(tp, ts, key, value, headers, now, callback=callback,
                                abort_on_new_batch=sticky and self._abort_on_new_batch)
            if result.abort_for_new_batch:
                # KIP-480: a new batch is a chance to move the sticky partition.
                pt.on_new_batch(topic, part)
                part = pt.partition(topic, None, t.num_partitions, t.available)
                tp = t.tps[part]
                result = acc.append(tp, ts, key, value, headers, now, callback=callback)
            if result.needs_memory:
                try:
                    self._wait_for_memory(result.needs_memory)
                except BufferExhaustedError as e:
                    return self._failed_record(tp, ts, key, value, headers, now, callback, e)
                result = acc.append(tp, ts, key, value, headers, self.clock.now_ns(),
                                    callback=callback)
                while result.needs_memory:   # freed memory went to a bigger need: wait again
                    try:
                        self._wait_for_memory(result.needs_memory)
                    except BufferExhaustedError as e:
                        return self._failed_record(tp, ts, key, value, headers, now, callback, e)
                    result = acc.append(tp, ts, key, value, headers, self.clock.now_ns(),
                                        callback=callback)
            batch = result.batch
            assert batch is not None
            index = result.index
            new_batch = result.new_batch_created
            t.open_batches[part] = batch
        if sticky and self._kip794:
            # KIP-794: bytes count towards the sticky partition's switch. Only
            # reaching batch.size with the last batch full, or twice batch.size, can
            # switch it, so the bytes are reported in one go when that happens: the
            # same switches as Java's report per record.
            budget = t.sticky_budget
            if budget[0] != part:
                self._report_sticky(t)
                budget[0] = part
                budget[1], budget[2] = pt.sticky_bytes_left(topic)
            size = (len(value) if value else 0) + (len(key) if key else 0)
            f = batch.written_factor
            if f:
                # Java counts a batch's estimated written bytes: compressed, the ratio's.
                size = int(size * f)
            budget[1] -= size
            budget[2] -= size
            budget[3] += size
            if budget[1] <= 0:
                # Past batch.size: a switch needs the last batch full, or twice batch.size.
                full = batch.estimated_bytes >= batch.capacity
                if full or budget[2] <= 0:
                    pt.on_append(topic, part, budget[3], enable_switch=full)
                    budget[1], budget[2] = pt.sticky_bytes_left(topic)
                    budget[3] = 0
        # A turn when a batch just filled (the append opened the next one) or when the
        # sender asked to be woken by now; not on every append behind a full batch,
        # which under backpressure would run the whole sender once per record.
        if new_batch or now >= self._next_wake_ns:
            self._step(0)
        return RecordHandle(batch, index)

    def _report_sticky(self, t: _TopicState) -> None:
        """Hands the partitioner the bytes ``send()`` has not reported yet (``on_append``)."""
        budget = t.sticky_budget
        if budget[3] and budget[0] >= 0:
            tp = t.tps[budget[0]]
            self.partitioner.on_append(t.topic, budget[0], budget[3],
                                       enable_switch=self.accumulator.all_batches_full(tp))
        budget[:] = [-1, 0, 0, 0]

    def _wait_for_memory(self, size: int) -> None:
        """Runs the loop until ``size`` bytes are free (BufferExhaustedError after max.block.ms)."""
        buffer = self.pool.allocate(size, max_block_ms=self.config.max_block_ms,
                                    clock=self.clock, run_step=self._run_step)
        self.pool.deallocate(buffer, size)

    def metrics_snapshot(self) -> MetricsSnapshot:
        """The counters, with the network client's SASL re-authentications."""
        return self.metrics.snapshot(reauthentications=self.network.metrics.reauthentications_total)

    def _buffer_exhausted(self, records: int, error: BufferExhaustedError) -> None:
        """``records`` never got memory: they fail (counted as any failed record)."""
        m = self.metrics
        m.records_failed += records
        m.failed_by_error[BUFFER_EXHAUSTED] += records
        m.errors_by_name[BUFFER_EXHAUSTED] += 1

    def _failed_record(self, tp: TopicPartition, ts: int, key: bytes | None, value: bytes | None,
                       headers: Sequence[Header], now: int,
                       callback: Callable[[RecordHandle], object] | None,
                       error: BufferExhaustedError) -> RecordHandle:
        """A ``send()`` whose record got no memory: a handle already failed with
        BUFFER_EXHAUSTED; its callback runs now (Java's FutureFailure and callback)."""
        batch = ProducerBatch(tp, now, 0, None, created_wall_ms=ts)
        batch.try_append(ts, key, value, headers, 0, now, callback)
        self._buffer_exhausted(1, error)
        batch.complete(BatchState.FAILED, BatchResult(-1, -1, BUFFER_EXHAUSTED, str(error)))
        if self._on_batch_done is not None:
            self._on_batch_done(batch)
        return RecordHandle(batch, 0)

    def _check_ready_for_send(self) -> None:
        """Java's failIfNotReadyForSend: after a fatal error nothing can be sent; a
        transactional producer sends only inside a transaction that has not failed."""
        fatal = self.fatal_error
        if fatal:
            raise ProducerFatalError(f"the producer cannot send after a fatal error: {fatal}")
        txn = self.transactions
        if txn is not None and txn.state is not TransactionState.IN_TRANSACTION:
            if txn.has_error:
                raise TransactionAbortableError(
                    f"cannot send: transaction {txn.transactional_id!r} failed ({txn.last_error}); "
                    "abort it first")
            raise KctlError(f"cannot send in transaction state {txn.state.value}: "
                            "call begin_transaction() first")

    # -- the load path --------------------------------------------------------------------------
    def send_bulk(self, topic: str, pool: RecordPool, start: int, count: int, *,
                  shape: RecordShape = PLAIN, intended_first_ns: int = -1,
                  intended_step_ns: int = 0, first_seq: int = -1) -> int:
        """The load path: ``count`` records of ``pool`` from index ``start`` on
        (wrapping at its end), through the same partitioner, accumulator, batches
        and sender as ``send``; no object per record. Completion is reported per
        batch through ``on_batch_done`` (its append slices), not per record.

        Record i of the slice (i < count) was meant to go at ``intended_first_ns +
        i * intended_step_ns`` (``intended_first_ns`` < 0: no schedule). Records get
        the sequence numbers ``first_seq, first_seq + 1, ...`` in the order they are
        appended (per partition, in schedule order), which the identity header
        carries (``shape.identity``). Returns how many new batches were opened.
        """
        if self._closed:
            raise ProducerClosedError("send_bulk() after close()")
        if count <= 0:
            return 0
        if self._guarded:
            self._check_ready_for_send()
        if shape.identity is not None and first_seq < 0:
            raise KctlError("send_bulk: records with an identity need first_seq")
        t = self._topics.get(topic)
        if t is None or t.version != self.metadata.version:
            t = self._topic(topic)
        if self._kip794:
            self._report_sticky(t)
        template, record_bytes = self._template_for(shape, pool)
        size = len(pool.values)
        run = _BulkRun(template, record_bytes, pool.value_size, intended_first_ns, intended_step_ns,
                       first_seq, self.clock.now_ns())
        self._topic_use[topic] = run.handed_ns
        done = 0
        start %= size
        while done < count:
            n = min(count - done, size - start)
            if pool.keys is not None and self._uses_keys:
                self._place_keyed(t, pool, start, n, done, run)
            elif self.partitioner.kind is PartitionerKind.ROUND_ROBIN:
                self._place_round_robin(t, pool, start, n, done, run)
            else:
                self._place_sticky(t, pool.values, pool.keys, start, n, done, run)
            done += n
            start = 0
        if run.opened or self.clock.now_ns() >= self._next_wake_ns:
            self._step(0)
        return run.opened

    def _template_for(self, shape: RecordShape, pool: RecordPool) -> tuple[BatchTemplate, int]:
        """The shape's template (one per shape, with this producer's codec) and an upper
        bound of one pool record's bytes in a batch."""
        nulls = pool.null_values
        templates = self._null_value_templates if nulls else self._templates
        template = templates.get(shape)
        if template is None:
            template = templates[shape] = BatchTemplate(
                headers=shape.headers, identity=shape.identity, compression=self._compression,
                compression_level=self.config.compression.level, null_values=nulls)
        key = (shape, pool)
        record_bytes = self._record_bytes.get(key)
        if record_bytes is None:
            value_len = pool.longest_value
            longest = None if pool.max_key_size < 0 else b"k" * pool.max_key_size
            record_bytes = template.record_size(value_len, longest)
            if len(self._record_bytes) >= 64:
                self._record_bytes.clear()
            self._record_bytes[key] = record_bytes
        return template, record_bytes

    def _place_keyed(self, t: _TopicState, pool: RecordPool, a: int, n: int, offset: int,
                     run: _BulkRun) -> None:
        """Records a..a+n of a keyed pool (stream positions offset..): each partition's
        share, from the pool's layout, as one slice; keyless records stick."""
        key = (t.topic, pool)
        layout = self._layouts.get(key)
        if layout is None or layout.num_partitions != t.num_partitions:
            num = t.num_partitions
            kp = self.partitioner.key_partition
            layout = KeyLayout.of(pool, num, lambda k: kp(k, num))
            if len(self._layouts) >= 16:
                self._layouts.clear()
            self._layouts[key] = layout
        b = a + n
        base = a - offset
        for g in layout.groups:
            pos = g.positions
            lo = bisect_left(pos, a)
            hi = bisect_left(pos, b, lo)
            if hi <= lo:
                continue
            if g.partition < 0:
                part = self.partitioner.partition(t.topic, None, t.num_partitions, t.available)
                tp = t.tps[part]
                self._append(tp, g.values[lo:hi], g.keys[lo:hi], run, pos[lo:hi], base)
                if self._kip794:
                    self.partitioner.on_append(t.topic, part, (hi - lo) * run.record_bytes,
                                               self.accumulator.all_batches_full(tp))
            else:
                self._append(t.tps[g.partition], g.values[lo:hi], g.keys[lo:hi], run, pos[lo:hi], base)

    def _place_round_robin(self, t: _TopicState, pool: RecordPool, a: int, n: int, offset: int,
                           run: _BulkRun) -> None:
        """Record i goes to the available partition the counter start+i points at:
        partition j's share is every m-th record, a strided slice."""
        first = self.partitioner.round_robin_start(t.topic, n)
        avail = t.available or range(t.num_partitions)
        m = len(avail)
        keys = pool.keys
        for j in range(min(m, n)):
            part = avail[(first + j) % m]
            values = pool.values[a + j:a + n:m]
            self._append(t.tps[part], values, keys[a + j:a + n:m] if keys is not None else None,
                         run, range(offset + j, offset + n, m), 0)

    def _place_sticky(self, t: _TopicState, values: Sequence[bytes | None],
                      keys: Sequence[bytes | None] | None, a: int, n: int, offset: int,
                      run: _BulkRun) -> None:
        """Keyless records (or keys ignored) on the sticky partition, in chunks that end
        where per-record appends would switch: KIP-794 at batch.size bytes when the
        last batch is full, or at twice that; KIP-480 (``murmur2`` kind) when a new
        batch would open."""
        pt = self.partitioner
        acc = self.accumulator
        rb = run.record_bytes
        # KIP-794 counts the bytes a record adds to its batch's estimated written
        # size (Java's appendedBytes): with compression, scaled by the topic's ratio
        # estimate (compression_ratio.py).
        f = acc.written_factor(t.topic)
        rbw = max(1, int(rb * f)) if f else rb
        keyed = keys is not None
        done = 0
        while done < n:
            part = pt.partition(t.topic, None, t.num_partitions, t.available)
            tp = t.tps[part]
            left = n - done
            if self._kip794:
                may, must = pt.sticky_bytes_left(t.topic)
                if may > 0:
                    take = -(-may // rbw)
                else:
                    room = acc.open_room(tp, run.template, rb, keyed)
                    take = room if room > 0 else max(1, (self.config.batch_size - RECORD_BATCH_OVERHEAD) // rbw)
                    take = min(take, max(1, -(-must // rbw)))
            else:
                take = acc.open_room(tp, run.template, rb, keyed)
                if take == 0 and not run.switched:
                    # KIP-480: the next record would open a batch; move first.
                    pt.on_new_batch(t.topic, part)
                    run.switched = True
                    continue
                if take == 0:
                    take = max(1, (self.config.batch_size - RECORD_BATCH_OVERHEAD) // rb)
                run.switched = False
            take = min(take, left)
            s = a + done
            self._append(tp, values[s:s + take], keys[s:s + take] if keyed else None, run,
                         None, offset + done)
            if self._kip794:
                pt.on_append(t.topic, part, take * rbw, acc.all_batches_full(tp))
            done += take

    def _append(self, tp: TopicPartition, values: Sequence[bytes | None],
                keys: Sequence[bytes | None] | None, run: _BulkRun,
                positions: Sequence[int] | None, stream_offset: int) -> None:
        """One partition's slice into the accumulator, waiting for memory as needed.
        ``positions`` None: the records are consecutive from schedule position
        ``stream_offset``; else their positions, less ``stream_offset`` (the base)."""
        total = len(values)
        done = 0
        step = run.intended_step_ns
        while done < total:
            now = self.clock.now_ns()
            if positions is None:
                first = (run.intended_first_ns + (stream_offset + done) * step
                         if run.intended_first_ns >= 0 else -1)
                res = self.accumulator.append_bulk(
                    tp, values[done:] if done else values, run.record_bytes, run.template, now,
                    self.clock.wall_ms(), keys=(keys[done:] if done else keys) if keys is not None else None,
                    value_size=run.value_size, intended_first_ns=first, intended_step_ns=step,
                    first_seq=run.next_seq, handed_ns=run.handed_ns)
            else:
                res = self.accumulator.append_bulk(
                    tp, values[done:] if done else values, run.record_bytes, run.template, now,
                    self.clock.wall_ms(), keys=(keys[done:] if done else keys) if keys is not None else None,
                    value_size=run.value_size, intended_first_ns=run.intended_first_ns,
                    intended_step_ns=step, first_seq=run.next_seq,
                    positions=positions[done:] if done else positions, positions_base=stream_offset,
                    handed_ns=run.handed_ns)
            done += res.appended
            if run.next_seq >= 0:
                run.next_seq += res.appended
            run.opened += res.new_batches
            if res.needs_memory:
                try:
                    if run.no_memory:
                        raise run.no_memory
                    self._wait_for_memory(res.needs_memory)
                except BufferExhaustedError as e:
                    # Every record of this call that got no memory fails (one wait per call).
                    run.no_memory = e
                    left = total - done
                    self._buffer_exhausted(left, e)
                    if run.next_seq >= 0:
                        run.next_seq += left
                    return

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

    def close(self, timeout_s: float | None = None, *, abandon_reason: str | None = None) -> None:
        """Flushes within ``timeout_s`` (forever when None); closes sockets. What is left
        after the timeout fails with PRODUCER_CLOSED, or with ``abandon_reason`` is
        abandoned: given up without a verdict (the broker may still have it), counted
        apart from failures. An open transaction that cannot commit is aborted first
        (as Java's close)."""
        if self._closed:
            return
        self._closed = True
        try:
            txn = self.transactions
            if txn is not None and txn.state in (TransactionState.IN_TRANSACTION,
                                                 TransactionState.ABORTABLE_ERROR):
                try:
                    self._run_until(txn.begin_abort(), timeout_s, "abort_transaction")
                except KctlError:
                    pass   # fenced or timed out: what is left is failed or abandoned below
            self.accumulator.close()
            if not self.flush(timeout_s):
                if abandon_reason is not None:
                    self.sender.abandon_everything(abandon_reason)
                else:
                    now = self.clock.now_ns()
                    for b in self.accumulator.remove_all():
                        self.sender._fail(b, "PRODUCER_CLOSED",
                                          "the producer was closed before the record was sent", now,
                                          count_error=True)
                    self.sender.fail_in_flight("PRODUCER_CLOSED",
                                               "the producer was closed before the broker answered", now)
            if txn is not None:
                txn.close()
        finally:
            # acks=0 has nothing to wait for: close gracefully so the broker reads
            # the last request before it sees the connection end.
            self.network.close_all(linger_s=1.0 if self.config.acks == 0 else 0.0)
            self.pool.close()

    # -- transactions (Java's initTransactions / beginTransaction / commitTransaction / abortTransaction) --
    def _txn(self) -> Transactions:
        if self.transactions is None:
            raise KctlError("this producer is not transactional: set transactional.id")
        return self.transactions

    def _run_until(self, result: TransactionResult, timeout_s: float | None, what: str,
                   deadline_ns: int | None = None) -> None:
        """Runs the loop until the coordinator has answered ``result`` (max.block.ms by
        default, as Java; ``deadline_ns`` when given); raises on its error:
        ``ProducerFatalError`` for a fatal one, ``TransactionAbortableError`` when the
        transaction must be aborted, ``TransactionTimeoutError`` when time ran out."""
        if deadline_ns is None:
            deadline_ns = self.clock.now_ns() + self._limit_ns(timeout_s)
        while not result.done:
            now = self.clock.now_ns()
            if now >= deadline_ns:
                raise TransactionTimeoutError(self._timeout_message(what, timeout_s))
            self._step(min(deadline_ns - now, 10 * NS_PER_MS))
        if result.error is not None:
            txn = self._txn()
            if txn.has_fatal_error:
                raise ProducerFatalError(f"{what}: {txn.explain(result.error)}")
            if result.error in AUTHORIZATION_ERRORS:
                # InitProducerId refused (Java's Sender.shouldHandleAuthorizationError): the
                # producer goes back to UNINITIALIZED; init_transactions may be asked again.
                if txn.has_abortable_error:
                    self._step(0)
                raise KctlError(f"{what}: {result.error}: the principal may not use transactional.id "
                                f"{txn.transactional_id!r} (init_transactions may be called again "
                                "once it is authorized)")
            raise TransactionAbortableError(f"{what}: {result.error}")

    def _limit_ns(self, timeout_s: float | None) -> int:
        return int((self.config.max_block_ms / 1000 if timeout_s is None else timeout_s) * 1e9)

    def _timeout_message(self, what: str, timeout_s: float | None) -> str:
        if timeout_s is None:
            return (f"{what}: no answer from the transaction coordinator within "
                    f"{self.config.max_block_ms} ms (max.block.ms)")
        return f"{what}: not complete within {timeout_s * 1000:g} ms"

    def init_transactions(self, timeout_s: float | None = None) -> None:
        """Finds the transaction coordinator and gets the producer id for
        ``transactional.id`` (fencing any older producer with the same id)."""
        self._run_until(self._txn().initialize(), timeout_s, "init_transactions")

    def begin_transaction(self) -> None:
        txn = self._txn()
        if txn.has_error:
            raise TransactionAbortableError(
                f"begin_transaction: the producer is in error: {txn.explain(txn.last_error or '')}")
        txn.begin()

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Sends what is queued, waits for every record's answer, then commits (EndTxn).
        ``TransactionAbortableError``: the transaction must be aborted instead."""
        txn = self._txn()
        if txn.has_abortable_error:
            # A batch of it failed meanwhile (Java's maybeFailWithError in beginCommit):
            # the application aborts, as after a failed commit.
            raise TransactionAbortableError(f"commit_transaction: {txn.explain(txn.last_error or '')}")
        result = txn.begin_commit()
        # One deadline for both halves (Java's commitTransaction blocks max.block.ms in all).
        deadline = self.clock.now_ns() + self._limit_ns(timeout_s)
        if not self.flush(max(0, deadline - self.clock.now_ns()) / 1e9):
            limit = (f"{self.config.max_block_ms} ms (max.block.ms)" if timeout_s is None
                     else f"{timeout_s * 1000:g} ms")
            raise TransactionTimeoutError(f"commit_transaction: records of the transaction still "
                                          f"have no answer from the broker after {limit}")
        self._run_until(result, timeout_s, "commit_transaction", deadline)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Fails what was never sent, waits for what was, then aborts (EndTxn); bumps the
        epoch when the coordinator can and an error asked for it."""
        self._run_until(self._txn().begin_abort(), timeout_s, "abort_transaction")

    @property
    def transaction_error(self) -> str | None:
        """The error that makes the open transaction abortable (None: none)."""
        txn = self.transactions
        return txn.last_error if txn is not None and txn.has_abortable_error else None

    @property
    def fatal_error(self) -> str | None:
        """The fatal error, with why it is fatal (``Transactions.explain``)."""
        fatal = self.sender.fatal_error or (self.idempotence.fatal_error if self.idempotence else None)
        if fatal is not None and self.transactions is not None:
            return self.transactions.explain(fatal)
        return fatal

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def in_flight_requests(self) -> int:
        return self.network.in_flight_request_count()

    def wall_ms(self) -> int:
        return self.clock.wall_ms()
