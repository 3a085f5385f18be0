"""``kctl bench`` and ``kctl report`` without the rendering: workloads and their matrix
(workload.py), the interleaved runner over kctl produce (runner.py), the results model
and the readers of earlier runs (results.py), the regression gate (gate.py), JUnit XML
(junit.py) and the charts (charts.py, matplotlib and plotly: the ``kctl[bench]`` extra)."""
