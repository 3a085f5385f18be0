"""The default worker count: cores - 1 when the broker shares the host, one per core
otherwise (only numeric or loopback addresses here: nothing is resolved off the host)."""

from dataclasses import replace

from kctl.load.worker_count import WorkerCount, default_workers, is_local_host, paced_workers


def test_embedded_or_local_broker_leaves_the_broker_a_core():
    assert default_workers(None, cores=8).count == 7
    assert default_workers(None, cores=1).count == 1
    local = default_workers("127.0.0.1:9092,localhost:9093", cores=4)
    assert local.count == 3 and "this host" in local.reason


def test_remote_brokers_get_one_worker_per_core():
    remote = default_workers("192.0.2.10:9092", cores=4)            # TEST-NET-1, numeric
    assert remote.count == 4 and "other hosts" in remote.reason
    mixed = default_workers("127.0.0.1:9092,192.0.2.10:9092", cores=4)
    assert mixed.count == 4


def test_local_means_loopback_or_one_of_this_hosts_addresses():
    assert is_local_host("127.0.0.5") is True
    assert is_local_host("::1") is True
    assert is_local_host("192.0.2.10", own={"192.0.2.10"}) is True
    assert is_local_host("192.0.2.11", own={"192.0.2.10"}) is False


def test_a_paced_rate_one_worker_carries_gets_one_worker():
    remote = default_workers("192.0.2.10:9092", cores=8)
    one = paced_workers(remote, 1000, 100)
    assert one.count == 1 and "1,000 records/s" in one.reason
    assert paced_workers(remote, 0, 100) == remote                      # full speed
    assert paced_workers(remote, 500_000, 100) == remote                # more than one carries
    assert paced_workers(remote, 1000, 1_000_000) == remote             # 1 GB/s of values
    assert paced_workers(WorkerCount(1, "x"), 1000, 100) == WorkerCount(1, "x")
    assert "0.4 records/s" in paced_workers(remote, 0.4, 100).reason


def test_one_worker_only_when_its_monotonic_share_fits(monkeypatch):
    # --payload-monotonic holds one value per record of a worker's share (at most
    # MAX_MONOTONIC): a paced run keeps the default count when one worker's share
    # would not fit, instead of failing on a share the user never chose.
    import kctl.load.payload as payload
    import kctl.load.produce as produce
    monkeypatch.setattr(payload, "MAX_MONOTONIC", 100)
    monkeypatch.setattr(produce, "MAX_MONOTONIC", 100)
    monkeypatch.setattr(produce, "default_workers", lambda _b: WorkerCount(2, "two"))
    options = produce.ProduceOptions(bootstrap="192.0.2.10:9092", rate=1000, payload="monotonic")
    kept = produce.prepare(replace(options, num_records=150))
    assert kept.spec_args["workers"] == 2
    one = produce.prepare(replace(options, num_records=80))
    assert one.spec_args["workers"] == 1 and len(one.spec_args["payload"].values) == 80
