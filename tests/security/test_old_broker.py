"""An old broker (Produce v3, Metadata v1, ApiVersions v2, nothing flexible): kctl
falls back on ApiVersions, speaks the highest common versions, and produce and
verify work."""

from __future__ import annotations

import pytest

from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.load.produce import ProduceOptions, execute, prepare
from tests.security.kafka_proxy import API_VERSIONS, METADATA, KafkaProxy

pytestmark = pytest.mark.broker

PRODUCE, FETCH, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 1, 19, 22
CAPS = {PRODUCE: 3, METADATA: 1, API_VERSIONS: 2, FETCH: 4, CREATE_TOPICS: 2, INIT_PRODUCER_ID: 1}


@pytest.fixture(scope="module")
def old(broker):
    with KafkaProxy(broker.bootstrap, caps=CAPS) as p:
        yield p


def test_blocking_client_falls_back_and_negotiates_old_versions(old):
    with BlockingClient(old.address) as c:
        assert c.versions.version_for(PRODUCE) == 3
        assert c.versions.version_for(METADATA) == 1
        md = admin.fetch_metadata(c)
    assert md.brokers[0].port == old.port
    api_versions_sent = [v for k, v in old.requests if k == API_VERSIONS]
    assert api_versions_sent[0] > 2 and api_versions_sent[1] == 2


def test_produce_and_verify_through_an_old_broker(old):
    before = len(old.requests)
    # Tansu answers InitProducerId below v2 with UNKNOWN_SERVER_ERROR (a quirk of this
    # broker, not of old Kafka), so this run is not idempotent.
    plan = prepare(ProduceOptions(bootstrap=old.address, topic="kctl-old-broker", partitions=2,
                                  num_records=3000, workers=1, verify=True, interval=0.5,
                                  properties=("enable.idempotence=false",)))
    outcome = execute(plan)
    assert not outcome.result.failures
    assert outcome.verify is not None and outcome.verify.ok and outcome.verify.found == 3000
    sent = old.requests[before:]
    produce_versions = {v for k, v in sent if k == PRODUCE}
    assert produce_versions == {3}
    assert {v for k, v in sent if k == METADATA} == {1}
    # Every request at a version the old broker offers, none flexible.
    for key, version in sent:
        if key == API_VERSIONS:
            continue
        assert version <= CAPS.get(key, 99), (key, version)


def test_kctl_metadata_lists_brokers_topics_and_api_versions(old):
    import json
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "kctl", "metadata", "-b", old.address, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    (b,) = doc["brokers"]
    assert b["port"] == old.port and b["error"] is None
    apis = {a["api"]: a for a in b["apis"]}
    assert apis["Produce"]["max"] == 3 and apis["Produce"]["kctl_uses"] == 3
    assert apis["Metadata"]["kctl_uses"] == 1
    text = subprocess.run([sys.executable, "-m", "kctl", "metadata", "-b", old.address],
                          capture_output=True, text=True, timeout=60).stdout
    assert "broker" in text and "Produce" in text and "v0-v3" in text
