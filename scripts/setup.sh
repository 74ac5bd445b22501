#!/usr/bin/env bash
# Installs what building and testing tern needs on a fresh Debian 12 machine.
# Idempotent; safe to run again.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: cargo not found. Install Rust (stable, 1.85 or newer) with rustup first." >&2
    exit 1
  fi
fi

need=()
# iperf3 and ping serve the netlab tests and the demo's untuned baseline;
# ssh, ssh-keygen and sshd the ssh bootstrap tests (a private sshd on
# loopback); python3 (with venv, for `pip install ./python`) the advisor's
# Python client and its tests; postgresql the advisor's store tests on
# PostgreSQL (scripts/pg-test.sh starts a throwaway cluster; runuser runs it
# as the postgres user); rsync the reference of the awkward-tree round trip
# (crates/tern/tests/awkward.rs compares tern's copies with rsync -a's);
# chromium the dashboard's tests in a real (headless) browser.
for tool in mount:util-linux kill:procps cmp:diffutils ip:iproute2 iperf3:iperf3 ping:iputils-ping gcc:gcc \
    ssh:openssh-client ssh-keygen:openssh-client python3:python3 runuser:util-linux \
    rsync:rsync chromium:chromium; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  else
    echo "setup: please install: ${need[*]}" >&2
    exit 1
  fi
fi

rustup component add rustfmt clippy >/dev/null 2>&1 || true

# The dashboard's browser tests drive the system Chromium through Playwright
# (no browser download: they point it at /usr/bin/chromium), and /metrics is
# checked with the Prometheus project's own parser.
python3 -c 'import playwright, prometheus_client' >/dev/null 2>&1 ||
  python3 -m pip install --quiet --break-system-packages playwright prometheus_client 2>/dev/null ||
  python3 -m pip install --quiet playwright prometheus_client
