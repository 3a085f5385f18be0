"""Spark for the tests: one local SparkSession for the whole session (a cold start costs
seconds), and, for the tests that need a real cluster, one standalone cluster.

``local[4]``: four task slots whatever the machine's cores, so barrier stages of up to
four tasks can be tested on a two-core runner. Skips when pyspark or Java is absent.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator

import pytest

SPARK_MASTER = "local[4]"


def _need_spark() -> None:
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("pyspark not installed (pip install 'kctl[spark]')")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (a JRE 17+) on PATH")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    _need_spark()
    from kctl.spark.session import spark_session
    session = spark_session(SPARK_MASTER, app_name="kctl-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory) -> Iterator[object]:
    """A Spark standalone cluster (master + two 1-core workers) on 127.0.0.1; stopped by
    PID at the end of the session, whatever happened."""
    _need_spark()
    from tests.spark.standalone import StandaloneCluster
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def captures(broker, tmp_path_factory):
    """Two captures written by kctl inspect in front of the broker: one of a 2-worker load
    run plus a read-back (Produce, Fetch, Metadata, ...), one of metadata and fetches only.
    Returns (paths, proxy ports)."""
    from kctl.config import ProducerConfig
    from kctl.engine import admin
    from kctl.engine.blocking_client import BlockingClient
    from kctl.inspect.proxy import InspectorProxy
    from kctl.load.run import LoadRun, LoadSpec
    d = tmp_path_factory.mktemp("captures")
    paths, ports = [], []
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, ["cap-a", "cap-b"], partitions=2)
    for i, topic in enumerate(["cap-a", "cap-b"]):
        path = d / f"run{i}.pcapng"
        with InspectorProxy([broker.bootstrap], capture=path) as proxy:
            if i == 0:
                spec = LoadSpec(topic=topic, producer=ProducerConfig.from_properties(
                                    {"bootstrap.servers": proxy.bootstrap, "linger.ms": "2"}),
                                rate=4000, num_records=4000, workers=2, interval_s=0.5)
                LoadRun(spec, config_for_summary={}).run()
            with BlockingClient(proxy.bootstrap, client_id=f"reader-{i}") as c:
                admin.fetch_metadata(c, [topic, "no-such-topic-here"])
                for p in range(2):
                    admin.read_partition(c, "cap-a", p)
        paths.append(str(path))
        ports.append(int(proxy.bootstrap.rsplit(":", 1)[1]))
    return paths, ports
