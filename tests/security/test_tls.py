"""TLS through stunnel (a real TLS terminator) in front of the embedded broker,
with a CA and certificates made by trustme; the broker advertises stunnel's address.

Besides the main listener (and one requiring a client certificate), stunnel runs
listeners the way older or stricter brokers are set up: TLS 1.2 with only RSA key
exchange, only a CBC-SHA suite, only TLS 1.1, a client certificate required on TLS
1.2, an expired certificate. Their names are ``TlsCluster.SERVICES``."""

from __future__ import annotations

import datetime
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
        rsa = self.ca.issue_cert("localhost", key_type=trustme.KeyType.RSA)
        rsa.private_key_and_cert_chain_pem.write_to_path(str(tmp / "server-rsa.pem"))
        expired = self.ca.issue_cert("localhost",
                                     not_before=datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc),
                                     not_after=datetime.datetime(2020, 2, 1, tzinfo=datetime.timezone.utc))
        expired.private_key_and_cert_chain_pem.write_to_path(str(tmp / "expired.pem"))
        self.port, self.mtls_port = free_port(), free_port()
        self.ports = {name: free_port() for name in self.SERVICES}

    #: name -> stunnel lines after accept/connect (each listener fronts the broker).
    SERVICES = {
        "rsa_kx": "cert = {tmp}/server-rsa.pem\nsslVersionMax = TLSv1.2\nciphers = AES128-GCM-SHA256\n",
        "cbc": "cert = {tmp}/server-rsa.pem\nsslVersionMax = TLSv1.2\nciphers = ECDHE-RSA-AES128-SHA\n",
        "tls11": ("cert = {tmp}/server-rsa.pem\nsslVersionMin = TLSv1.1\nsslVersionMax = TLSv1.1\n"
                  "ciphers = DEFAULT:@SECLEVEL=0\n"),
        "mtls12": ("cert = {tmp}/server-rsa.pem\nsslVersionMax = TLSv1.2\nCAfile = {tmp}/ca.pem\n"
                   "verifyChain = yes\nrequireCert = yes\n"),
        "expired": "cert = {tmp}/expired.pem\n",
    }

    def start(self):
        self.broker = EmbeddedBroker(advertised=f"localhost:{self.port}", stop_grace_s=1.0).start()
        conf = self.tmp / "stunnel.conf"
        conf.write_text(
            f"foreground = yes\npid =\ndebug = 3\noutput = {self.tmp / 'stunnel.log'}\n"
            f"[kafka]\naccept = 127.0.0.1:{self.port}\nconnect = {self.broker.bootstrap}\n"
            f"cert = {self.tmp / 'server.pem'}\n"
            f"[kafka-mtls]\naccept = 127.0.0.1:{self.mtls_port}\nconnect = {self.broker.bootstrap}\n"
            f"cert = {self.tmp / 'server.pem'}\nCAfile = {self.ca_file}\nverifyChain = yes\n"
            "requireCert = yes\n"
            + "".join(f"[{name}]\naccept = 127.0.0.1:{self.ports[name]}\nconnect = {self.broker.bootstrap}\n"
                      + lines.format(tmp=self.tmp) for name, lines in self.SERVICES.items()))
        exe = shutil.which("stunnel4") or shutil.which("stunnel")
        self.proc = subprocess.Popen([exe, str(conf)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        for port in (self.port, self.mtls_port, *self.ports.values()):
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


# -- keys, cipher suites, versions, certificates: what a Java client reaches, kctl reaches,
# and what it cannot, it says in one line.

def test_an_encrypted_key_without_its_password_is_one_line_not_a_prompt(tls, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from kctl.errors import ConfigError
    key = serialization.load_pem_private_key(tls.client_key.read_bytes(), None)
    encrypted = tmp_path / "client.enc.key"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"s3cret")))
    props = {"ssl.certificate.location": str(tls.client_cert), "ssl.key.location": str(encrypted)}
    # stdin closed: a prompt would fail or block rather than pass
    with pytest.raises(ConfigError, match=r"the key is encrypted; set ssl.key.password"):
        BlockingClient(f"localhost:{tls.mtls_port}", security=tls.security(**props), timeout_s=5).connect()
    with pytest.raises(ConfigError, match=r"does not decrypt with ssl.key.password"):
        BlockingClient(f"localhost:{tls.mtls_port}",
                       security=tls.security(**props, **{"ssl.key.password": "wrong"}), timeout_s=5).connect()
    with BlockingClient(f"localhost:{tls.mtls_port}",
                        security=tls.security(**props, **{"ssl.key.password": "s3cret"})) as c:
        assert c.versions is not None


def test_a_certificate_without_a_key_points_at_ssl_key_location(tls):
    from kctl.errors import ConfigError
    with pytest.raises(ConfigError, match=r"no private key in .*client.pem.*; set ssl.key.location"):
        BlockingClient(f"localhost:{tls.mtls_port}",
                       security=tls.security(**{"ssl.certificate.location": str(tls.client_cert)})).connect()


@pytest.mark.parametrize("service", ["rsa_kx", "cbc"])
def test_tls12_brokers_limited_to_rsa_key_exchange_or_cbc_suites_connect_as_java_does(tls, service):
    with BlockingClient(f"localhost:{tls.ports[service]}", security=tls.security()) as c:
        assert c.versions is not None


def test_ssl_cipher_suites_takes_iana_names_and_no_shared_suite_is_told_apart(tls):
    only = tls.security(**{"ssl.cipher.suites": "TLS_RSA_WITH_AES_128_GCM_SHA256"})
    with BlockingClient(f"localhost:{tls.ports['rsa_kx']}", security=only) as c:
        assert c.versions is not None
    # the main listener (ECDSA certificate) shares no suite with an RSA-only list
    with pytest.raises(AuthenticationError) as info:
        BlockingClient(f"localhost:{tls.ports['cbc']}", security=only, timeout_s=5).connect()
    text = str(info.value)
    assert "no cipher suite in common" in text and "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA" in text
    assert "client certificate" not in text


def test_a_client_certificate_required_on_tls12_is_not_called_a_cipher_problem(tls):
    text = _one_line_error(f"localhost:{tls.ports['mtls12']}", tls.security())
    assert "requires a client certificate" in text and "cipher" not in text


def test_a_tls11_only_broker_is_named(tls):
    text = _one_line_error(f"localhost:{tls.ports['tls11']}", tls.security())
    assert "offers only TLS 1.1" in text and "TLS 1.2 or 1.3" in text


def test_an_expired_certificate_says_so_with_its_date(tls):
    text = _one_line_error(f"localhost:{tls.ports['expired']}", tls.security())
    assert "expired on 2020-02-01 00:00:00 UTC" in text and "not trusted" not in text


def test_a_directory_of_ca_files_is_read(tls, tmp_path):
    shutil.copy(tls.other_ca_file, tmp_path / "a-other.pem")
    shutil.copy(tls.ca_file, tmp_path / "b-ours.crt")
    (tmp_path / "README").write_text("not a certificate\n")
    with BlockingClient(f"localhost:{tls.port}", security=tls.security(**{"ssl.ca.location": str(tmp_path)})) as c:
        assert c.versions is not None


def test_plaintext_against_the_tls_listener_says_the_broker_may_expect_tls(tls):
    from kctl.errors import KctlError
    with pytest.raises(KctlError) as info:
        BlockingClient(f"localhost:{tls.port}", timeout_s=5).connect()
    text = str(info.value)
    assert "\n" not in text and f"localhost:{tls.port}" in text
    assert "TLS" in text and "security.protocol" in text, text
