"""One local SparkSession for every Spark test (a cold start costs seconds).

``local[4]``: four task slots whatever the machine's cores, so barrier stages of up
to four tasks can be tested on a two-core runner. Skips when pyspark or Java is absent.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator

import pytest

SPARK_MASTER = "local[4]"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("pyspark not installed (pip install 'kctl[spark]')")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (a JRE 17+) on PATH")
    from kctl.spark.session import spark_session
    session = spark_session(SPARK_MASTER, app_name="kctl-tests")
    yield session
    session.stop()
