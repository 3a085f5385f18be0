"""worker_specs: what each worker's producer is told (load/run.py)."""

from __future__ import annotations

from kctl.config import ProducerConfig
from kctl.load.run import LoadSpec, worker_specs


def _spec(workers: int, **props: str) -> LoadSpec:
    producer = ProducerConfig.from_properties({"bootstrap.servers": "127.0.0.1:9092", **props})
    return LoadSpec(topic="t", producer=producer, num_records=100, workers=workers)


def test_workers_name_themselves_when_client_id_is_not_set():
    """As the Java client sends producer-<n> when client.id is not set (an audit with
    tshark found kctl's Produce requests without one)."""
    ids = [ws.producer.client_id for ws in worker_specs(_spec(3))]
    assert ids == ["kctl-producer-0", "kctl-producer-1", "kctl-producer-2"]


def test_a_given_client_id_is_kept_by_every_worker():
    assert {ws.producer.client_id for ws in worker_specs(_spec(2, **{"client.id": "load"}))} == {"load"}


def test_an_empty_client_id_set_by_the_user_is_sent_empty():
    """Java's ProducerConfig.maybeOverrideClientId: a client.id the user configured is used
    as it is, empty too (only the consumer names itself when it is empty)."""
    assert [ws.producer.client_id for ws in worker_specs(_spec(2, **{"client.id": ""}))] == ["", ""]


def test_transactional_ids_stay_one_per_worker_beside_the_client_id():
    specs = worker_specs(_spec(2, **{"transactional.id": "tx"}))
    assert [ws.producer.transactional_id for ws in specs] == ["tx-0", "tx-1"]
    assert [ws.producer.client_id for ws in specs] == ["kctl-producer-0", "kctl-producer-1"]
    one = worker_specs(_spec(1, **{"transactional.id": "tx"}))
    assert one[0].producer.transactional_id == "tx"
