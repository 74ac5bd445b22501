#!/usr/bin/env bash
# bench/install-peers.sh: install the tools bench/wan.sh compares tern with.
#
#   bash bench/install-peers.sh            apt-get update, then install each package
#   bash bench/install-peers.sh --status   only report what is installed
#
# Installs, one package at a time so that one failure does not stop the rest:
# iperf3, rsync, openssh-server, openssh-client, globus-gass-copy-progs
# (globus-url-copy), globus-gridftp-server-progs (globus-gridftp-server),
# xrootd-client (xrdcp), xrootd-server (xrootd), mptcpd (mptcpize: iperf3 over MPTCP in
# bench/multipath.sh). Needs root and apt-get.
# Writes a summary to stdout and to bench/peers-status.txt (ignored by git),
# which bench/wan.sh copies into its report. Exit status is 0 even when some
# packages fail; the summary says which and why.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATUS_FILE=$REPO/bench/peers-status.txt
PACKAGES="iperf3 rsync openssh-server openssh-client globus-gass-copy-progs globus-gridftp-server-progs xrootd-client xrootd-server mptcpd"
# The command each package is installed for (what wan.sh runs).
declare -A PROVIDES=(
    [iperf3]=iperf3 [rsync]=rsync [openssh-server]=/usr/sbin/sshd [openssh-client]=scp
    [globus-gass-copy-progs]=globus-url-copy [globus-gridftp-server-progs]=globus-gridftp-server
    [xrootd-client]=xrdcp [xrootd-server]=xrootd [mptcpd]=mptcpize
)

STATUS_ONLY=0
case "${1:-}" in
    --status) STATUS_ONLY=1 ;;
    "") ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-peers.sh: unknown argument: $1" >&2; exit 2 ;;
esac

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/tern-peers.XXXXXX")
trap 'rm -rf "$LOGDIR"' EXIT

export DEBIAN_FRONTEND=noninteractive
declare -A WHY=()
if [ "$STATUS_ONLY" = 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-peers.sh: needs root (apt-get install)" >&2
        exit 1
    fi
    log "apt-get update"
    if ! timeout 300 apt-get update -q >"$LOGDIR/update.log" 2>&1; then
        log "apt-get update failed (continuing with the old package lists):"
        tail -5 "$LOGDIR/update.log" >&2
    fi
    for pkg in $PACKAGES; do
        if dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            log "$pkg: already installed"
            continue
        fi
        log "apt-get install $pkg"
        if timeout 600 apt-get install -y -q --no-install-recommends "$pkg" >"$LOGDIR/$pkg.log" 2>&1; then
            log "$pkg: installed"
        else
            rc=$?
            # The last error line apt printed says why (no candidate, conflicts, network...).
            why=$(grep -E '^(E:|Err:)' "$LOGDIR/$pkg.log" | tail -2 | tr '\n' ' ')
            [ "$rc" = 124 ] && why="timed out after 600 s. $why"
            WHY[$pkg]="apt-get install exited $rc: ${why:-$(tail -1 "$LOGDIR/$pkg.log")}"
            log "$pkg: FAILED: ${WHY[$pkg]}"
        fi
    done
fi

{
    printf '# peers status, %s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
    for pkg in $PACKAGES; do
        cmd=${PROVIDES[$pkg]}
        ver=$(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || true)
        if dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' &&
            command -v "$cmd" >/dev/null; then
            printf '%s\tok\t%s\t%s\n' "$pkg" "$ver" "$(command -v "$cmd")"
        else
            printf '%s\tmissing\t-\t%s\n' "$pkg" "${WHY[$pkg]:-not installed ($cmd not found)}"
        fi
    done
} >"$STATUS_FILE"
column -t -s $'\t' "$STATUS_FILE" 2>/dev/null || cat "$STATUS_FILE"
exit 0
