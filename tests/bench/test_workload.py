"""Workload TOML, command-line matrix, cell expansion and the checks that fail early."""

from __future__ import annotations

from pathlib import Path

import pytest

from kctl.bench.workload import Workload, load_workload, parse_matrix_option
from kctl.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bench.toml"


def test_example_workload_parses_into_two_cells():
    w = load_workload(EXAMPLE).validate()
    assert w.repetitions == 2 and w.duration == "2s" and w.rate == 5000
    assert [c.label for c in w.cells()] == ["acks=1", "acks=all"]
    assert [c.name for c in w.cells()] == ["acks-1", "acks-all"]
    assert dict(w.properties)["batch.size"] == "16384"


def test_matrix_expands_every_combination_in_order(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text('[workload]\nrate = "max"\nduration = 3\n[matrix]\nacks = ["1", "all"]\n'
                 '"linger.ms" = [0, 5, 50]\n"enable.idempotence" = false\n')
    w = load_workload(f).validate()
    assert w.rate == 0 and w.duration == "3s"
    cells = w.cells()
    assert len(cells) == 6
    assert cells[0].label == "acks=1 linger.ms=0 enable.idempotence=false"
    assert cells[-1].name == "acks-all_linger.ms-50_enable.idempotence-false"


def test_command_line_matrix_and_overrides():
    assert parse_matrix_option("linger.ms=0, 5,50") == ("linger.ms", ("0", "5", "50"))
    w = Workload().with_overrides(matrix=(parse_matrix_option("acks=1,all"),), repetitions=4, topic=None)
    assert w.repetitions == 4 and w.topic == "kctl-bench" and len(w.cells()) == 2
    assert Workload().cells()[0].name == "default"


@pytest.mark.parametrize("text, message", [
    ("[workload]\nrepetitions = 0\n", "repetitions must be at least 1"),
    ("[workload]\nduraton = \"2s\"\n", "unknown key(s) in [workload]: duraton"),
    ("[workload]\nduration = \"2 parsecs\"\n", "duration must be a duration"),
    ("[workload]\nrate = \"fast\"\n", "rate must be records/s such as 5000"),
    ("[matrix]\nacks = [\"1\", \"2\"]\n", "cell acks=2"),
    ("[matrix]\n\"linger.mss\" = [0]\n", "linger.mss"),
    ("[matrix]\nacks = []\n", "matrix acks has no values"),
    ("[wrkload]\n", "unknown table(s) wrkload"),
    ("[workload\n", "not valid TOML"),
])
def test_bad_workloads_fail_naming_the_problem(tmp_path, text, message):
    f = tmp_path / "w.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_workload(f).validate()
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_matrix_option_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="--matrix expects name=value1,value2"):
        parse_matrix_option("acks")
    with pytest.raises(ConfigError, match="does not exist"):
        load_workload(tmp_path / "nope.toml")


def test_results_workload_keeps_secrets_out():
    w = Workload().with_overrides(properties=(("security.protocol", "SASL_SSL"), ("sasl.password", "s3cret")))
    d = w.to_dict()
    assert d["properties"] == {"security.protocol": "SASL_SSL", "sasl.password": "[redacted]"}
    assert "s3cret" not in repr(d)
    assert w.properties[1] == ("sasl.password", "s3cret")   # the runs still get it


def test_bench_admin_client_gets_the_security_settings(monkeypatch):
    """The topic set-up before the runs uses the same TLS/SASL settings as the producers."""
    from kctl.bench.runner import BenchRunner
    from kctl.errors import KctlError
    from kctl.load import produce

    seen = []

    class Refuse:
        def __init__(self, address, **kw):
            seen.append((address, kw.get("security")))
            raise KctlError("stop here")

    monkeypatch.setattr(produce, "BlockingClient", Refuse)
    w = Workload().with_overrides(bootstrap="broker.example:9093", duration="1s", warmup="0s",
                                  properties=(("security.protocol", "SASL_SSL"),
                                              ("sasl.mechanism", "SCRAM-SHA-256"),
                                              ("sasl.username", "u"), ("sasl.password", "p")))
    with pytest.raises(Exception, match="stop here"):
        BenchRunner(w).run()
    (address, security), = seen
    assert address == "broker.example:9093"
    assert security.uses_tls and security.uses_sasl and security.sasl_username == "u"


def test_cells_send_the_identity_header_as_kctl_produce_does(tmp_path):
    """A cell runs what `kctl produce` with the same flags runs: the 24-byte identity
    header on every record unless --no-id-headers (id_headers = false); it was left out
    unless --consume."""
    from kctl.bench.runner import BenchRunner

    cell = Workload().cells()[0]
    assert BenchRunner(Workload())._options(cell, "127.0.0.1:9").id_headers is True
    off = Workload().with_overrides(id_headers=False)
    assert BenchRunner(off)._options(cell, "127.0.0.1:9").id_headers is False
    assert off.to_dict()["id_headers"] is False
    f = tmp_path / "w.toml"
    f.write_text("[workload]\nid_headers = false\n")
    assert load_workload(f).validate().id_headers is False
    with pytest.raises(ConfigError, match="drop --no-id-headers"):
        Workload().with_overrides(id_headers=False, consume=True).validate()


def test_consumer_properties_reach_the_consume_side():
    from kctl.bench.runner import BenchRunner

    cell = Workload().cells()[0]
    w = Workload().with_overrides(consume=True, consumer_properties=("fetch.max.wait.ms=20",))
    assert BenchRunner(w)._options(cell, "127.0.0.1:9").consumer_properties == ("fetch.max.wait.ms=20",)
    assert w.to_dict()["consumer_properties"] == {"fetch.max.wait.ms": "20"}
    with pytest.raises(ConfigError, match="give --consume too"):
        BenchRunner(Workload().with_overrides(consumer_properties=("fetch.max.wait.ms=20",)))
