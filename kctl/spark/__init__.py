"""PySpark pipelines: distributed load, capture analysis, dataset replay.

Imported only when a Spark path is used (``kctl produce --spark``, ``kctl analyze``,
``kctl replay``); nothing outside this package imports pyspark, and an
import-linter contract keeps the local paths free of it. Spark is only a
backend here: tasks call the same plain-Python engine (kctl.load.worker) and
capture decoder (kctl.inspect.session) that the local commands use.
"""
