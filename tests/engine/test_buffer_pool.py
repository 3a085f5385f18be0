import pytest
from hypothesis import given, settings, strategies as st

from kctl.engine.buffer_pool import BufferPool
from kctl.engine.clock import FakeClock
from kctl.errors import BufferExhaustedError, KctlError, RecordTooLargeError


def test_poolable_buffers_are_reused():
    pool = BufferPool(total_memory=4 * 1024, poolable_size=1024)
    first = pool.try_allocate(1024)
    assert first is not None and len(first) == 1024
    first[:5] = b"hello"
    pool.deallocate(first)
    assert pool.free_buffers == 1
    again = pool.try_allocate(1024)
    assert again is first  # the very same object: no new 16 KiB allocation per batch
    assert pool.free_buffers == 0
    pool._check()


def test_non_poolable_sizes_count_against_the_total_and_are_not_kept():
    pool = BufferPool(total_memory=4000, poolable_size=1000)
    big = pool.try_allocate(2500)
    assert big is not None and len(big) == 2500
    assert pool.available_memory == 1500
    assert pool.unallocated_memory == 1500
    pool.deallocate(big)
    assert pool.free_buffers == 0
    assert pool.available_memory == 4000
    pool._check()


def test_full_pool_returns_none_and_free_list_is_released_for_odd_sizes():
    pool = BufferPool(total_memory=3000, poolable_size=1000)
    bufs = [pool.try_allocate(1000) for _ in range(3)]
    assert all(b is not None for b in bufs)
    assert pool.try_allocate(1000) is None
    assert pool.try_allocate(1) is None
    for b in bufs:
        pool.deallocate(b)
    assert pool.free_buffers == 3 and pool.unallocated_memory == 0
    # 1500 bytes: two pooled buffers go back to the budget to cover it (Java's freeUp).
    odd = pool.try_allocate(1500)
    assert odd is not None
    assert pool.free_buffers == 1
    assert pool.unallocated_memory == 500
    assert pool.available_memory == 1500
    pool._check()


def test_more_than_total_can_never_fit():
    pool = BufferPool(total_memory=1000, poolable_size=100)
    with pytest.raises(RecordTooLargeError, match=r"buffer.memory \(1000 bytes\)"):
        pool.try_allocate(1001)


def test_double_free_is_caught():
    pool = BufferPool(total_memory=1000, poolable_size=100)
    buf = pool.try_allocate(100)
    pool.deallocate(buf)
    with pytest.raises(KctlError, match="twice"):
        pool.deallocate(buf)
    with pytest.raises(KctlError):
        pool.deallocate(bytearray(100))


def test_deallocate_uses_the_allocated_size_even_if_the_buffer_grew():
    pool = BufferPool(total_memory=1000, poolable_size=100)
    buf = pool.try_allocate(100)
    buf += b"x"  # a careless writer grew it: it must not go back to the free list
    pool.deallocate(buf, 100)
    assert pool.free_buffers == 0
    assert pool.available_memory == 1000
    pool._check()


def test_allocate_runs_the_sender_until_memory_is_freed():
    clock = FakeClock()
    pool = BufferPool(total_memory=2000, poolable_size=1000)
    held = [pool.try_allocate(1000), pool.try_allocate(1000)]
    steps = []

    def run_step(now_ns, deadline_ns):
        steps.append((now_ns, deadline_ns))
        assert pool.queued == 1 and pool.exhausted
        clock.advance(ms=10)
        if len(steps) == 3:  # the sender completed a batch and gave its memory back
            pool.deallocate(held.pop())

    buf = pool.allocate(1000, max_block_ms=60_000, clock=clock, run_step=run_step)
    assert buf is not None and len(steps) == 3
    assert steps[0] == (0, 60_000 * 1_000_000)
    assert pool.queued == 0 and not pool.exhausted
    assert pool.wait_time_ns_total == 30 * 1_000_000
    pool._check()


def test_allocate_fails_clearly_after_max_block_ms():
    clock = FakeClock()
    pool = BufferPool(total_memory=33554432, poolable_size=16384)
    while pool.try_allocate(16384) is not None:
        pass
    calls = 0

    def run_step(now_ns, deadline_ns):
        nonlocal calls
        calls += 1
        clock.advance_to(min(deadline_ns, now_ns + 7_000_000_000))

    with pytest.raises(BufferExhaustedError) as info:
        pool.allocate(16384, max_block_ms=60000, clock=clock, run_step=run_step)
    message = str(info.value)
    assert "buffer.memory (33554432 bytes) exhausted for 60000 ms (max.block.ms)" in message
    assert "16384 bytes" in message
    assert clock.now_ns() == 60_000_000_000
    assert calls == 9
    assert pool.queued == 0 and pool.exhausted_total == 1


def test_allocate_with_zero_max_block_fails_without_running_the_sender():
    clock = FakeClock()
    pool = BufferPool(total_memory=100, poolable_size=100)
    pool.try_allocate(100)
    with pytest.raises(BufferExhaustedError):
        pool.allocate(100, max_block_ms=0, clock=clock, run_step=lambda *_: pytest.fail("ran"))


def test_closed_pool_refuses():
    pool = BufferPool(total_memory=100, poolable_size=10)
    pool.close()
    with pytest.raises(KctlError, match="closed"):
        pool.try_allocate(10)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from([0, 1, 50, 100, 100, 100, 150, 400])), max_size=60))
def test_accounting_invariant_holds_under_any_sequence(ops):
    pool = BufferPool(total_memory=1000, poolable_size=100)
    held: list[tuple[bytearray, int]] = []
    for release, size in ops:
        if release and held:
            buf, n = held.pop(0)
            pool.deallocate(buf, n)
        else:
            buf = pool.try_allocate(size)
            if buf is None:
                assert pool.available_memory < size
            else:
                assert len(buf) == size
                held.append((buf, size))
        pool._check()
        assert pool.allocated_memory == sum(n for _, n in held)
    for buf, n in held:
        pool.deallocate(buf, n)
    assert pool.available_memory == 1000


def test_batch_size_zero_pools_nothing():
    # batch.size=0 is legal in Kafka (one record per batch).
    pool = BufferPool(total_memory=100, poolable_size=0)
    buf = pool.try_allocate(10)
    pool.deallocate(buf)
    assert pool.free_buffers == 0 and pool.available_memory == 100
