"""kctl's Kafka error-code table, checked against kio's independent table (a test oracle only)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kctl.errors import BrokerError
from kctl.protocol.error_codes import (
    ERRORS_BY_CODE,
    ERRORS_BY_NAME,
    ErrorCode,
    broker_error,
    error_for,
)

REPO = Path(__file__).resolve().parents[2]
KAFKA_GIT = Path("/work/.mirror/apache+kafka/repo")


def kio_table() -> dict[int, tuple[str, bool, str]]:
    """kio's table as {code: (NAME, retriable, description)}, descriptions read from its source."""
    kio_errors = pytest.importorskip("kio.schema.errors")
    tree = ast.parse(Path(kio_errors.__file__).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ErrorCode")
    docs: dict[str, str] = {}
    for stmt, nxt in zip(cls.body, cls.body[1:] + [None]):
        if (isinstance(stmt, ast.Assign) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[stmt.targets[0].id] = nxt.value.value
    return {int(e): (e.name.upper(), e.retriable, docs.get(e.name, "")) for e in kio_errors.ErrorCode}


def test_every_kio_code_matches_name_and_retriable():
    for code, (name, retriable, _) in kio_table().items():
        ours = ERRORS_BY_CODE[code]
        assert (ours.name, ours.retriable) == (name, retriable), code


def test_descriptions_match_kio():
    for code, (_, _, description) in kio_table().items():
        assert ERRORS_BY_CODE[code].description == description, code


def test_table_covers_kafka_4_1_and_later_codes():
    assert set(range(-1, 134)) <= set(ERRORS_BY_CODE)
    assert ERRORS_BY_NAME["SHARE_SESSION_LIMIT_REACHED"].code == 133
    assert ERRORS_BY_NAME["SHARE_SESSION_LIMIT_REACHED"].retriable
    assert ERRORS_BY_NAME["REBOOTSTRAP_REQUIRED"].code == 129


@pytest.mark.parametrize("name, code, retriable", [
    ("NONE", 0, False),
    ("UNKNOWN_SERVER_ERROR", -1, False),
    ("NOT_LEADER_OR_FOLLOWER", 6, True),
    ("REQUEST_TIMED_OUT", 7, True),
    ("MESSAGE_TOO_LARGE", 10, False),
    ("NOT_ENOUGH_REPLICAS", 19, True),
    ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45, False),
    ("UNKNOWN_TOPIC_ID", 100, True),   # via InvalidMetadataException
    ("PRODUCER_FENCED", 90, False),
])
def test_well_known_codes(name, code, retriable):
    e = ERRORS_BY_NAME[name]
    assert (e.code, e.retriable) == (code, retriable)
    assert ERRORS_BY_CODE[code] is e


def test_tables_are_consistent_and_read_only():
    assert len(ERRORS_BY_CODE) == len(ERRORS_BY_NAME)
    for code, e in ERRORS_BY_CODE.items():
        assert e.code == code and ERRORS_BY_NAME[e.name] is e
        assert e.name.isupper() and (e.description or code == 0)
    with pytest.raises(TypeError):
        ERRORS_BY_CODE[999] = ERRORS_BY_CODE[0]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ERRORS_BY_CODE[0].name = "X"  # type: ignore[misc]


def test_unknown_code_is_a_placeholder_not_an_exception():
    e = error_for(4242)
    assert isinstance(e, ErrorCode)
    assert (e.code, e.name, e.retriable) == (4242, "UNKNOWN_ERROR_CODE_4242", False)
    assert error_for(6) is ERRORS_BY_NAME["NOT_LEADER_OR_FOLLOWER"]


def test_broker_error_carries_code_name_retriable_and_message():
    err = broker_error(6)
    assert isinstance(err, BrokerError)
    assert (err.code, err.name, err.retriable) == (6, "NOT_LEADER_OR_FOLLOWER", True)
    assert err.message == ERRORS_BY_CODE[6].description
    assert str(broker_error(3, "topic t-1")) == "UNKNOWN_TOPIC_OR_PARTITION (3): topic t-1"
    assert broker_error(-77).name == "UNKNOWN_ERROR_CODE_-77"


@pytest.mark.skipif(not (KAFKA_GIT / "HEAD").exists(), reason="no apache/kafka git snapshot here")
def test_generated_module_is_up_to_date():
    r = subprocess.run([sys.executable, str(REPO / "tools" / "gen_error_codes.py"),
                        "--kafka-git", str(KAFKA_GIT)], capture_output=True, text=True, check=True)
    assert r.stdout == (REPO / "kctl" / "protocol" / "error_codes.py").read_text()


def test_kctl_does_not_import_kio():
    spec = importlib.util.find_spec("kctl.protocol.error_codes")
    assert "kio" not in Path(spec.origin).read_text()
