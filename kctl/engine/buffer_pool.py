"""BufferPool: batch memory bounded by ``buffer.memory`` (the Java client's BufferPool).

How this works
--------------
The pool owns ``total_memory`` bytes of budget. It keeps a free list of
buffers of exactly ``poolable_size`` bytes (``batch.size``), because nearly
every batch is that size and reusing a ``bytearray`` saves allocating and
zeroing 16 KiB per batch. Any other size is allocated fresh and only counted
against the budget; when such a buffer comes back its bytes return to the
budget and the object is dropped. Invariant (checked by ``_check`` in tests)::

    unallocated_memory + len(free) * poolable_size + allocated_memory == total_memory

When the free list and the unallocated budget together cannot cover a
request, the Java pool parks the calling thread until another thread frees
memory. kctl's engine is single-threaded per worker process, so nobody else
could free memory while we wait: instead ``try_allocate`` returns ``None`` and
``allocate`` keeps running the producer's sender loop (a ``run_step`` callback
that completes batches, which gives their buffers back) until the request fits
or ``max.block.ms`` has passed, then raises ``BufferExhaustedError``.

Reused buffers are not zeroed (neither are the Java client's): a batch writer
tracks how many bytes it wrote. Callers must not resize a buffer they got from
the pool; ``deallocate`` takes the size that was allocated so the accounting
stays right even if they did.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from kctl.engine.clock import NS_PER_MS, Clock
from kctl.errors import BufferExhaustedError, KctlError, RecordTooLargeError

RunStep = Callable[[int, int], object]
"""``run_step(now_ns, deadline_ns)``: one sender-loop step; should not block past ``deadline_ns``."""


class BufferPool:
    __slots__ = (
        "total_memory",
        "poolable_size",
        "_free",
        "_unallocated",
        "_outstanding",
        "_queued",
        "_closed",
        "wait_time_ns_total",
        "exhausted_total",
    )

    def __init__(self, total_memory: int, poolable_size: int) -> None:
        # batch.size=0 is legal in Kafka (one record per batch): nothing is pooled then.
        if poolable_size < 0:
            raise ValueError(f"poolable_size must not be negative, got {poolable_size}")
        if total_memory < 0:
            raise ValueError(f"total_memory must not be negative, got {total_memory}")
        self.total_memory = total_memory
        self.poolable_size = poolable_size
        self._free: deque[bytearray] = deque()
        # Budget not held by the free list nor by callers (Java: nonPooledAvailableMemory).
        self._unallocated = total_memory
        # id() of every buffer handed out and not yet returned, to catch a double free
        # (which would silently grow the budget). Outstanding buffers are alive, so
        # their ids are unique. One set operation per batch, not per record.
        self._outstanding: set[int] = set()
        self._queued = 0
        self._closed = False
        #: Nanoseconds callers spent in ``allocate`` waiting for memory (Java's bufferpool-wait-time-ns-total).
        self.wait_time_ns_total = 0
        #: How many ``allocate`` calls gave up after max.block.ms (Java's buffer-exhausted-total).
        self.exhausted_total = 0

    # -- accounting --------------------------------------------------------

    @property
    def available_memory(self) -> int:
        """Bytes a caller could get now: the unallocated budget plus the free list."""
        return self._unallocated + len(self._free) * self.poolable_size

    @property
    def unallocated_memory(self) -> int:
        """Budget held neither by the free list nor by a caller."""
        return self._unallocated

    @property
    def allocated_memory(self) -> int:
        """Bytes handed out and not yet returned."""
        return self.total_memory - self.available_memory

    @property
    def free_buffers(self) -> int:
        """Poolable buffers waiting in the free list for reuse."""
        return len(self._free)

    @property
    def queued(self) -> int:
        """Callers currently waiting in ``allocate`` (0 or 1 in a single-threaded worker)."""
        return self._queued

    @property
    def exhausted(self) -> bool:
        """True while a caller is waiting for memory: the accumulator treats every
        batch as ready then, so the sender drains and frees memory (Java's
        ``RecordAccumulator.ready``: ``exhausted = free.queued() > 0``)."""
        return self._queued > 0

    # -- allocation --------------------------------------------------------

    def try_allocate(self, size: int) -> bytearray | None:
        """A buffer of ``size`` bytes, or ``None`` if the budget cannot cover it now. Never blocks."""
        if self._closed:
            raise KctlError("producer closed while allocating batch memory")
        if size > self.total_memory:
            raise RecordTooLargeError(
                f"a {size}-byte batch can never fit in buffer.memory "
                f"({self.total_memory} bytes); raise buffer.memory or make the record smaller"
            )
        if size < 0:
            raise ValueError(f"cannot allocate {size} bytes")
        buffer: bytearray
        if size == self.poolable_size and self._free:
            buffer = self._free.pop()
        elif self._unallocated + len(self._free) * self.poolable_size >= size:
            # Release pooled buffers to the budget until it covers the request
            # (Java's freeUp), then carve the request out of the budget.
            while self._unallocated < size:
                self._free.popleft()
                self._unallocated += self.poolable_size
            self._unallocated -= size
            buffer = bytearray(size)
        else:
            return None
        self._outstanding.add(id(buffer))
        return buffer

    def deallocate(self, buffer: bytearray, size: int | None = None) -> None:
        """Give back a buffer from this pool. ``size`` is the size it was allocated
        with (default ``len(buffer)``). Poolable buffers go to the free list."""
        key = id(buffer)
        if key not in self._outstanding:
            raise KctlError("buffer returned to the pool twice, or not from this pool (a kctl bug)")
        self._outstanding.remove(key)
        if size is None:
            size = len(buffer)
        if size == self.poolable_size and len(buffer) == size and size > 0:
            self._free.append(buffer)
        else:
            self._unallocated += size

    def allocate(
        self,
        size: int,
        *,
        max_block_ms: int,
        clock: Clock,
        run_step: RunStep,
    ) -> bytearray:
        """A buffer of ``size`` bytes, running ``run_step`` until one is free.

        ``run_step(now_ns, deadline_ns)`` is one step of the producer's sender
        loop (send ready batches, read responses, complete or expire batches,
        which returns their memory); it should wait on sockets no later than
        ``deadline_ns``. After ``max_block_ms`` without success this raises
        ``BufferExhaustedError``, as the Java producer's ``send`` does.
        """
        buffer = self.try_allocate(size)
        if buffer is not None:
            return buffer
        start_ns = clock.now_ns()
        deadline_ns = start_ns + max_block_ms * NS_PER_MS
        self._queued += 1
        try:
            while True:
                now_ns = clock.now_ns()
                if now_ns >= deadline_ns:
                    self.exhausted_total += 1
                    raise BufferExhaustedError(
                        requested=size,
                        total_memory=self.total_memory,
                        available_memory=self.available_memory,
                        max_block_ms=max_block_ms,
                    )
                run_step(now_ns, deadline_ns)
                buffer = self.try_allocate(size)
                if buffer is not None:
                    return buffer
        finally:
            self._queued -= 1
            self.wait_time_ns_total += clock.now_ns() - start_ns

    def close(self) -> None:
        """Refuse further allocations (a waiting ``allocate`` fails on its next try)."""
        self._closed = True

    def _check(self) -> None:
        """Assert the accounting invariant (for tests)."""
        held = self.total_memory - self._unallocated - len(self._free) * self.poolable_size
        assert held >= 0, f"pool over-returned: {held}"
        assert self._unallocated >= 0, f"negative budget {self._unallocated}"
        assert all(len(b) == self.poolable_size for b in self._free)

    def __repr__(self) -> str:
        return (
            f"BufferPool(total_memory={self.total_memory}, poolable_size={self.poolable_size}, "
            f"available={self.available_memory}, free_buffers={len(self._free)}, queued={self._queued})"
        )
