"""arrow_arrays: Python values laid into Arrow buffers equal what ``pa.array`` makes (the
oracle, here only), for every type the analyze stage uses, nested and with nulls; and the
analyze tasks' batches are built without importing pandas."""

import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from kctl.spark.arrow_arrays import build_array, record_batch
from kctl.spark.capture_rows import arrow_schemas

SPAN = pa.list_(pa.struct([("seq", pa.int64()), ("len", pa.int64())]))
TYPES = {
    pa.int8(): st.integers(-2**7, 2**7 - 1), pa.int16(): st.integers(-2**15, 2**15 - 1),
    pa.int32(): st.integers(-2**31, 2**31 - 1), pa.int64(): st.integers(-2**63, 2**63 - 1),
    pa.float64(): st.floats(allow_nan=False), pa.float32(): st.floats(width=32, allow_nan=False),
    pa.bool_(): st.booleans(), pa.string(): st.text(), pa.binary(): st.binary(),
}
NESTED = pa.struct([("name", pa.string()), ("packet", pa.int64()), ("ok", pa.bool_()),
                    ("spans", SPAN), ("tags", pa.list_(pa.string()))])


def _values(t: pa.DataType) -> st.SearchStrategy:
    if pa.types.is_struct(t):
        return st.fixed_dictionaries({}, optional={f.name: _values(f.type) for f in t})
    if pa.types.is_list(t):
        return st.lists(st.none() | _values(t.value_type), max_size=5)
    return TYPES[t]


@pytest.mark.parametrize("t", list(TYPES) + [SPAN, NESTED, pa.list_(NESTED)], ids=str)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_build_array_equals_pa_array(t: pa.DataType, data: st.DataObject) -> None:
    values = data.draw(st.lists(st.none() | _values(t), max_size=40))
    built = build_array(values, t)
    built.validate(full=True)
    assert built.equals(pa.array(values, type=t))
    assert built.to_pylist() == pa.array(values, type=t).to_pylist()


def test_stage_rows_round_trip() -> None:
    stage, _ = arrow_schemas()
    rows = [{"kind": "pair", "range_index": 3, "ts_ns": 1_700_000_000_123_456_789, "file": "f.pcap",
             "api_name": "Produce", "latency_ms": 1.25, "errors": ["NOT_LEADER_OR_FOLLOWER"],
             "marks": [], "partitions": [{"direction": "produce", "topic": "t", "partition": 0,
                                          "batches": 1, "records": 150, "codec": None,
                                          "bytes": 16384, "topic_id": None}],
             "raw": b"\x00\x01\xff"},
            {"kind": "coverage", "range_index": 0, "coverage": {
                "direction": "request", "framed": True, "breaks": 0, "owned": 7,
                "claims": [{"seq": 1, "len": 2}], "frames": [], "tails": None}}]
    batch = record_batch(rows, stage)
    batch.validate(full=True)
    assert batch.equals(pa.RecordBatch.from_pylist(rows, schema=stage))


def test_wrong_values_raise() -> None:
    with pytest.raises(OverflowError):
        build_array([2**31], pa.int32())
    with pytest.raises(TypeError):
        build_array(["1"], pa.int64())
    with pytest.raises(TypeError):
        build_array([b"x"], pa.string())
    with pytest.raises(TypeError):
        build_array([1], pa.struct([("a", pa.int64())]))


def test_task_batches_do_not_import_pandas() -> None:
    code = ("import sys\n"
            "from kctl.spark.capture_rows import arrow_batches, arrow_schemas\n"
            "stage, _ = arrow_schemas()\n"
            "rows = [{'kind': 'pair', 'errors': ['X'], 'partitions': [{'topic': 't'}]}] * 5000\n"
            "assert sum(b.num_rows for b in arrow_batches(rows, stage)) == 5000\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
