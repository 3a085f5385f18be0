import pytest

from kctl.engine.clock import NS_PER_MS, Clock, FakeClock, SystemClock


def test_fake_clock_moves_only_when_told():
    clock: Clock = FakeClock(now_ns=5, wall_ms=1_000)
    assert clock.now_ns() == 5 and clock.wall_ms() == 1_000
    assert clock.advance(ms=3) == 5 + 3 * NS_PER_MS
    assert clock.wall_ms() == 1_003
    clock.advance(500_000)
    assert clock.wall_ms() == 1_003  # half a millisecond later
    clock.advance_to(10)  # already past: no-op
    assert clock.now_ns() == 5 + 3_500_000
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_system_clock_is_monotonic():
    clock = SystemClock()
    a = clock.now_ns()
    b = clock.now_ns()
    assert b >= a
    assert clock.wall_ms() > 1_600_000_000_000
