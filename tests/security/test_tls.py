"""TLS through stunnel (a real TLS terminator) in front of the embedded broker,
with a CA and certificates made by trustme; the broker advertises stunnel's address."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from kctl.broker import EmbeddedBroker, free_port
from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.errors import AuthenticationError
from kctl.load.produce import ProduceOptions, execute, prepare

trustme = pytest.importorskip("trustme")
pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(shutil.which("stunnel4") is None and shutil.which("stunnel") is None,
                                 reason="stunnel not installed (tools/setup.sh)")]


class TlsCluster:
    def __init__(self, tmp) -> None:
        self.tmp = tmp
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        self.ca_file = tmp / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.other_ca_file = tmp / "other-ca.pem"
        self.other_ca.cert_pem.write_to_path(str(self.other_ca_file))
        server = self.ca.issue_cert("localhost")
        server.private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
        client = self.ca.issue_cert("kctl-client@example.com")
        self.client_cert = tmp / "client.pem"
        self.client_key = tmp / "client.key"
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))
        self.port, self.mtls_port = free_port(), free_port()

    def start(self):
        self.broker = EmbeddedBroker(advertised=f"localhost:{self.port}", stop_grace_s=1.0).start()
        conf = self.tmp / "stunnel.conf"
        conf.write_text(
            f"foreground = yes\npid =\ndebug = 3\noutput = {self.tmp / 'stunnel.log'}\n"
            f"[kafka]\naccept = 127.0.0.1:{self.port}\nconnect = {self.broker.bootstrap}\n"
            f"cert = {self.tmp / 'server.pem'}\n"
            f"[kafka-mtls]\naccept = 127.0.0.1:{self.mtls_port}\nconnect = {self.broker.bootstrap}\n"
            f"cert = {self.tmp / 'server.pem'}\nCAfile = {self.ca_file}\nverifyChain = yes\n"
            "requireCert = yes\n")
        exe = shutil.which("stunnel4") or shutil.which("stunnel")
        self.proc = subprocess.Popen([exe, str(conf)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        for port in (self.port, self.mtls_port):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or self.proc.poll() is not None:
                        raise RuntimeError("stunnel did not start: "
                                           + (self.tmp / "stunnel.log").read_text()[-2000:])
                    time.sleep(0.05)
        return self

    def stop(self):
        self.proc.terminate()
        self.proc.wait(5)
        self.broker.stop()

    def security(self, **extra):
        props = {"security.protocol": "SSL", "ssl.ca.location": str(self.ca_file)}
        props.update(extra)
        return ProducerConfig.from_properties({k: v for k, v in props.items() if v is not None}).security


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    cluster = TlsCluster(tmp_path_factory.mktemp("tls")).start()
    yield cluster
    cluster.stop()


def test_trusted_ca_connects_and_metadata_names_the_tls_listener(tls):
    with BlockingClient(f"localhost:{tls.port}", security=tls.security()) as c:
        md = admin.fetch_metadata(c)
    assert (md.brokers[0].host, md.brokers[0].port) == ("localhost", tls.port)


def test_produce_and_verify_over_tls(tls):
    plan = prepare(ProduceOptions(
        bootstrap=f"localhost:{tls.port}", topic="kctl-tls", partitions=2, num_records=3000,
        workers=1, verify=True, interval=0.5,
        properties=("security.protocol=SSL", f"ssl.ca.location={tls.ca_file}")))
    outcome = execute(plan)
    assert not outcome.result.failures
    assert outcome.summary.counts.acked == 3000
    assert outcome.verify is not None and outcome.verify.ok and outcome.verify.found == 3000


def _one_line_error(address, security) -> str:
    with pytest.raises(AuthenticationError) as info:
        BlockingClient(address, security=security, timeout_s=5).connect()
    text = str(info.value)
    assert "\n" not in text and f"broker {address}" in text
    return text


@pytest.mark.parametrize("ca", [None, "other"])
def test_untrusted_certificate(tls, ca):
    text = _one_line_error(f"localhost:{tls.port}",
                           tls.security(**{"ssl.ca.location": None if ca is None else str(tls.other_ca_file)}))
    assert "certificate is not trusted" in text and "ssl.ca.location" in text


def test_wrong_host_name_and_turning_the_check_off(tls):
    text = _one_line_error(f"127.0.0.1:{tls.port}", tls.security())
    assert "does not match the host name" in text and "127.0.0.1" in text
    off = tls.security(**{"ssl.endpoint.identification.algorithm": ""})
    with BlockingClient(f"127.0.0.1:{tls.port}", security=off) as c:
        assert c.versions is not None


def test_client_certificate_required(tls):
    text = _one_line_error(f"localhost:{tls.mtls_port}", tls.security())
    assert "client certificate" in text
    with_cert = tls.security(**{"ssl.certificate.location": str(tls.client_cert),
                                "ssl.key.location": str(tls.client_key)})
    with BlockingClient(f"localhost:{tls.mtls_port}", security=with_cert) as c:
        assert admin.fetch_metadata(c).brokers


def test_network_client_reports_a_tls_failure(tls):
    from kctl.engine.network import NetworkClient
    cfg = ProducerConfig.from_properties({"bootstrap.servers": f"127.0.0.1:{tls.port}",
                                          "security.protocol": "SSL", "ssl.ca.location": str(tls.ca_file)})
    with NetworkClient(cfg.network) as net:
        deadline = time.monotonic() + 5
        while net.authentication_error(-1) is None and time.monotonic() < deadline:
            net.ready(-1, time.monotonic_ns())
            net.poll(50_000_000, time.monotonic_ns())
        assert "does not match the host name" in str(net.authentication_error(-1))
