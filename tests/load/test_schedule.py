import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kctl.load.schedule import NS_PER_S, SMOOTH_WINDOW_NS, CatchUp, Schedule, split


def test_due_counts_records_whose_time_has_come():
    s = Schedule(rate=1000, start_ns=0)
    assert s.due(-1) == 0
    assert s.due(0) == 1
    assert s.due(999_999) == 1
    assert s.due(1_000_000) == 2
    assert s.intended_ns(5) == 5_000_000


def test_a_stall_does_not_move_the_schedule():
    # A stall does not change when records are meant to go: after it, the backlog
    # is due at once and later records keep their original times.
    s = Schedule(rate=100, start_ns=0)
    assert s.due(2 * NS_PER_S) == 201
    assert s.intended_ns(300) == 3 * NS_PER_S


def test_split_spaces_workers_evenly_and_shares_records():
    parts = split(3000, 3, 0, num_records=10, duration_ns=None)
    assert [p.num_records for p in parts] == [4, 3, 3]
    assert [p.rate for p in parts] == [1000, 1000, 1000]
    times = sorted(p.intended_ns(i) for p in parts for i in range(3))
    gaps = {b - a for a, b in zip(times, times[1:])}
    assert max(gaps) - min(gaps) <= 1 and abs(min(gaps) - NS_PER_S / 3000) < 1


def test_duration_bounds_the_total():
    s = Schedule(rate=1000, start_ns=0, duration_ns=NS_PER_S)
    assert s.total == 1000
    assert s.due(5 * NS_PER_S) == 1000
    assert s.over(1000, 0)


def test_unpaced_schedule():
    s = Schedule(rate=0, start_ns=10, duration_ns=100)
    assert not s.paced and s.total is None
    assert not s.over(10**9, 50) and s.over(0, 110)
    assert Schedule(rate=0, start_ns=0, num_records=5).due(0) == 5


def _drive(sched: Schedule, stalls: dict[int, int], late_ns: int, n: int,
           stop: list[int] | None = None) -> list[int]:
    """Hand-over times of ``n`` records when a worker loop (stepped on a fake clock) takes
    ``late_ns`` to wake for each record it slept until (not for a wait on the catch-up
    limit, which it polls through, as load/worker.py does) and stalls ``stalls[i]`` ns
    after handing record i - 1 over. ``stop``: ``[stop_ns]``, the loop sees a stop set
    then at its next turn (as load/worker.py's loop) and appends its last turn's time."""
    catch = sched.catch_up()
    now, sent, out = 0, 0, []
    turn_ns = sched.start_ns - 1
    while sent < n:
        if stop is not None and now >= stop[0]:
            stop.append(turn_ns)
            break
        turn_ns = now
        now += stalls.pop(sent, 0)
        due = sched.due(now)
        if catch is not None:
            due = sent + catch.allowed(due, sent, now)
        if due > sent:
            for _ in range(due - sent):
                out.append(now)
            if catch is not None:
                catch.handed(now)
            sent = due
            continue
        due_at = sched.next_due_ns(sent)
        if catch is not None and catch.next_ok_ns > due_at:
            now = max(now, catch.next_ok_ns)            # held by the limit: polled, on time
        else:
            now = max(now, due_at) + late_ns            # asleep until due: woken late_ns late
    return out


def _fullest_window(times: list[int], window_ns: int = 10_000_000) -> int:
    return max(bisect.bisect_left(times, t + window_ns) - i for i, t in enumerate(times))


def test_sparse_schedule_catches_up_without_a_burst():
    # 1,000 records/s and a 3 ms stall after record 99: the records it held up do
    # not go at once (13 in a 10 ms window); at most 11 do, and the backlog is gone
    # a few tens of records later.
    sched = Schedule(rate=1000, start_ns=0)
    times = _drive(sched, {100: 3_000_000}, 0, 400)
    assert _fullest_window(times) == 11
    late = [t - sched.intended_ns(i) for i, t in enumerate(times)]
    assert max(late) == 2_000_000                   # record 100, due 1 ms into the stall
    assert all(x == 0 for x in late[200:])


def test_dense_schedule_sends_its_backlog_at_once():
    sched = Schedule(rate=5000, start_ns=0)
    assert sched.catch_up() is None
    times = _drive(sched, {100: 3_000_000}, 0, 400)
    assert times.count(times[100]) == 15            # all that fell due during the stall


@pytest.mark.parametrize("late_ns", [400_000, 600_000, 1_000_000, 3_000_000])
@pytest.mark.parametrize("stall_ns", [0, 20_000_000])
def test_slow_wake_ups_do_not_stop_a_catch_up(late_ns, stall_ns):
    # Every wake-up late by up to 3 ms (a busy small host), with or without a 20 ms
    # stall: the worker keeps the rate; records stay about one wake-up late, not later
    # and later, and no 10 ms holds more than 11.
    sched = Schedule(rate=1000, start_ns=0)
    times = _drive(sched, {50: stall_ns}, late_ns, 3000)
    late = [t - sched.intended_ns(i) for i, t in enumerate(times)]
    if stall_ns:
        assert max(late[:100]) >= stall_ns - 1_000_000
    assert max(late[2500:]) <= late_ns + 1_000_000
    assert _fullest_window(times) <= 11
    assert _fullest_window(times) <= 11


def test_records_held_at_a_stop_are_scheduled_and_abandoned():
    # 1,000 records/s, a 100 ms stall after record 49: 100 records fall due at once and
    # the catch-up limit (11 per 10.5 ms) drains them at about 5% above the rate; a stop
    # 50 ms later finds most of them held back. Every record due by the worker's last
    # turn is counted: handed over (its verdict comes from the producer) or never handed
    # over (abandoned); the schedule's records after the stop are neither.
    sched = Schedule(rate=1000, start_ns=0)
    stop = [200_000_000]
    times = _drive(sched, {50: 100_000_000}, 0, 10**6, stop=stop)
    last_turn = stop[1]
    handed = len(times)
    assert stop[0] - 11_000_000 < last_turn < stop[0]  # bursts of 11 every 10.5 ms
    unsent = sched.unsent_at_stop(handed, last_turn)
    assert handed == 50 + 5 * 11                        # at the stall's end and 4 x 10.5 ms on
    assert unsent == sched.due(last_turn) - handed and unsent > 80
    # (tests/load/test_worker_stop.py: the worker reports them, and its counts add up.)


def test_nothing_is_held_at_a_stop_on_schedule_or_after_the_last_record():
    sched = Schedule(rate=1000, start_ns=0, num_records=100)
    stop = [50_500_000]
    times = _drive(sched, {}, 300_000, 100, stop=stop)
    # On time: the last turn handed over everything due by then.
    assert sched.unsent_at_stop(len(times), stop[1]) == 0
    # The schedule ran out: a stop long after it leaves nothing unsent.
    assert sched.unsent_at_stop(100, 10 * NS_PER_S) == 0
    # Max throughput has no due records.
    assert Schedule(rate=0, start_ns=0, num_records=10).unsent_at_stop(3, NS_PER_S) == 0
    # Nothing is due before the start.
    assert Schedule(rate=1000, start_ns=5).unsent_at_stop(0, 4) == 0


def test_duration_end_counts_the_records_due_before_it():
    # The end of --duration is not a stop: the schedule's records are those due before
    # it (the one due exactly at the end belongs to the next window), all handed over
    # even if the worker is late, so a stall just before the end leaves none behind.
    sched = Schedule(rate=1000, start_ns=0, duration_ns=NS_PER_S)
    assert sched.total == 1000 and sched.intended_ns(999) < NS_PER_S == sched.intended_ns(1000)
    times = _drive(sched, {990: 30_000_000}, 0, sched.total)
    assert len(times) == 1000 and times[-1] > NS_PER_S
    assert sched.over(len(times), times[-1])


@settings(max_examples=60, deadline=None)
@given(rate=st.sampled_from([50, 200, 333, 500, 1000]),
       stalls=st.dictionaries(st.integers(0, 1500), st.integers(0, 30_000_000), max_size=8),
       late_ns=st.integers(0, 3_000_000))
def test_no_window_holds_more_than_one_above_the_schedule(rate, stalls, late_ns):
    """Issue 11's measure at any sparse rate: no 10 ms window holds more than
    ceil(rate x 10 ms) + 1 hand-overs, whatever the stalls, and every record goes."""
    sched = Schedule(rate=rate, start_ns=0)
    times = _drive(sched, dict(stalls), late_ns, 1600)
    assert len(times) == 1600
    assert _fullest_window(times) <= -(-rate * 10 // 1000) + 1


def test_catch_up_limit_counts_the_last_hand_overs():
    c = CatchUp(2, SMOOTH_WINDOW_NS)
    assert c.allowed(5, 0, 0) == 1 and c.next_ok_ns == 0
    c.handed(0)
    c.handed(1_000)
    assert c.next_ok_ns == SMOOTH_WINDOW_NS
    assert c.allowed(5, 2, SMOOTH_WINDOW_NS - 1) == 0
    assert c.allowed(5, 2, SMOOTH_WINDOW_NS) == 1
    assert c.allowed(2, 2, SMOOTH_WINDOW_NS) == 0  # nothing overdue


@pytest.mark.parametrize(("rate", "duration_s", "expected"), [
    (3000, 6, 18000), (3000, 4, 12000), (2000, 5, 10000), (1, 1, 1), (3, 1, 3), (0.5, 3, 2)])
def test_a_rate_schedule_over_a_duration_holds_rate_times_duration(rate, duration_s, expected):
    """t = i / rate for i in [0, rate x D): 3000/s over 6 s is 18000 records (the rounded
    spacing, 333333 ns, gave 18001), whatever the worker count."""
    for workers in (1, 2, 3, 7):
        scheds = split(rate, workers, 0, num_records=None, duration_ns=duration_s * NS_PER_S)
        assert sum(s.total for s in scheds) == expected, workers


@settings(max_examples=300, deadline=None)
@given(rate=st.one_of(st.integers(1, 5_000_000),
                      st.decimals(min_value="0.1", max_value="2000000", places=3).map(float)),
       duration_ms=st.integers(1, 3_600_000), workers=st.integers(1, 16))
def test_scheduled_count_is_exact_over_any_duration(rate, duration_ms, workers):
    """Bounded property: the workers' records add up to ceil(rate x D) (exact rational
    arithmetic), and each worker's last record is due inside the duration and counted
    as due at its end."""
    from fractions import Fraction
    duration_ns = duration_ms * 1_000_000
    exact = Fraction(rate) * duration_ns / NS_PER_S
    expected = -(-exact.numerator // exact.denominator)
    scheds = split(rate, workers, 0, num_records=None, duration_ns=duration_ns)
    assert sum(s.total for s in scheds) == expected
    for s in scheds:
        if s.total:
            assert s.intended_ns(s.total - 1) < duration_ns
            assert s.due(duration_ns) == s.total
