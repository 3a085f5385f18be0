from kctl.load.schedule import NS_PER_S, Schedule, split


def test_due_counts_records_whose_time_has_come():
    s = Schedule(rate=1000, start_ns=0)
    assert s.due(-1) == 0
    assert s.due(0) == 1
    assert s.due(999_999) == 1
    assert s.due(1_000_000) == 2
    assert s.intended_ns(5) == 5_000_000


def test_no_catch_up_burst_the_schedule_is_kept():
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
