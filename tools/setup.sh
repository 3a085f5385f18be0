#!/usr/bin/env bash
# Installs everything kctl's tests need on a clean machine, idempotently:
# system packages (when a test needs one) and a virtual environment at .venv
# with kctl and its broker, test and spark extras.
#
#   bash tools/setup.sh            # broker + test + spark extras
#   KCTL_EXTRAS=broker bash tools/setup.sh   # just enough for `kctl produce`
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${KCTL_EXTRAS:-broker,test,spark}"

# System packages needed by the tests (packet capture tools, TLS terminator, ...;
# chromium opens kctl bench's HTML report headless; libhdrhistogram-java is Java's
# HdrHistogram, which tests/stats/test_java_hdrhistogram.py checks kctl's percentiles against;
# the JDK (javac) builds tests/engine/java/JaasOracle.java, Java's own JAAS tokenizer).
apt_packages=(tcpdump tshark stunnel4 chromium openjdk-17-jdk-headless libhdrhistogram-java)
need_apt=()
for p in "${apt_packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ "${#need_apt[@]}" -gt 0 ] && [ "$extras" != "broker" ]; then
    # tshark asks whether non-root users may capture; answer no without a prompt.
    preseed="wireshark-common wireshark-common/install-setuid boolean false"
    if [ "$(id -u)" = 0 ]; then
        echo "$preseed" | debconf-set-selections 2>/dev/null || true
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
    else
        echo "$preseed" | sudo debconf-set-selections 2>/dev/null || true
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
    fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras}]"
.venv/bin/python -c "import kctl"
