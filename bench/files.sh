#!/usr/bin/env bash
# bench/files.sh: many small files and a mixed tree over an emulated 1 Gbit/s x
# 50 ms path (netlab), disk to disk: tern cp -r to a tern serve daemon (and over
# ssh with no daemon, when this tern has --ssh) against rsync -a over ssh (also
# with --fsync), scp -r and tar | ssh. Every copy is verified (file count, a
# digest of every file's path and contents, the directories); modes and mtimes
# are compared too.
#
#   bash bench/files.sh              full run (about 30 minutes), writes bench/files-results.md
#   bash bench/files.sh --quick      smoke run (a few minutes), writes bench/files-quick-results.md
#   bash bench/files.sh --write      write the report into BENCHMARKS.md instead, as the section
#                                    between <!-- files:start --> and <!-- files:end --> (replaced
#                                    on every --write run, appended if missing; the rest is kept)
#   bash bench/files.sh --out FILE   write the report to FILE (and, with --write, BENCHMARKS.md)
#
# FILES_TOOLS="tern rsync-fsync" runs only those tools (the others are reported as
# skipped), FILES_DATASETS=many only that dataset: for a quicker side by side.
#
# Needs root (netlab), target/release/{tern,netlab} (or TERN=, NETLAB=), python3,
# /usr/bin/time, openssh-server and -client, rsync, tar. Traffic stays inside
# the lab's namespaces; everything started is stopped, the lab taken down and
# the temporary directory ($BENCH_TMPDIR or /tmp) deleted on exit. See bench/README.md.
set -euo pipefail

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
NETLAB=${NETLAB:-$REPO/target/release/netlab}
BENCH_NAME=files.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_args files "$@"

if [ "$QUICK" = 1 ]; then
    MODE=quick
    MANY_FILES=1000 MANY_DIRS=4           # dataset A
    MIX_SMALL=400 MIX_MEDIUM=30 MIX_LARGE=256   # dataset B (large: MiB, comma-separated)
    COPY_TIMEOUT=60                       # per copy, every tool alike
    REPS=1                                # runs per tool and dataset; the best counts
else
    MODE=full
    MANY_FILES=10000 MANY_DIRS=10
    MIX_SMALL=2000 MIX_MEDIUM=200 MIX_LARGE=256,512,1024
    COPY_TIMEOUT=300
    REPS=2
fi
SEED=20261122
FILE_SIZE=16384
RTT=50 RATE=1000 MTU=9000   # the emulator does ~1.1 Gbit/s at MTU 1500, ~4.7 at 9000
UP_ARGS=(--rtt "$RTT" --rate "$RATE" --mtu "$MTU")
LAB=filesbench$$            # namespaces filesbench<pid>-a and -b
B0=10.47.0.2                # host B
TPORT=4747 SPORT=2222
TOOLS_ALL="tern tern-ssh rsync rsync-fsync scp tar"   # the order of a run; the second run goes backwards

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "needs root (netlab creates network namespaces)"
[ -x "$TERN" ] || die "no tern binary at $TERN; build it with: cargo build --release -p tern -p netlab"
[ -x "$NETLAB" ] || die "no netlab binary at $NETLAB; build it with: cargo build --release -p tern -p netlab"
for tool in python3 timeout pgrep ss sha256sum tar /usr/bin/time; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
for f in make_tree.py files_report.py reportlib.py; do
    python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$REPO/bench/$f" ||
        die "bench/$f does not parse"
done
declare -A HAVE=()
have() { [ "${HAVE[$1]:-0}" = 1 ]; }
HAVE[tern]=1
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null && [ -x /usr/sbin/sshd ] && HAVE[ssh]=1
command -v rsync >/dev/null && have ssh && HAVE[rsync]=1
# rsync --fsync (3.2.4 and later): durable like tern, which fsyncs each file before renaming it into place.
have rsync && rsync --help 2>/dev/null | grep -q -- '--fsync' && HAVE[rsync-fsync]=1
command -v scp >/dev/null && have ssh && HAVE[scp]=1
have ssh && HAVE[tar]=1
# tern's ssh bootstrap (issue 5, part 1): only if this binary has it.
TERN_SSH_NOTE="this tern binary has no ssh mode (no --ssh in tern cp --help)"
if "$TERN" cp --help 2>/dev/null | grep -q -- '--ssh'; then
    if have ssh; then HAVE[tern-ssh]=1; TERN_SSH_NOTE=""; else TERN_SSH_NOTE="no ssh/sshd installed"; fi
fi

bench_workdir files
REPORT=$OUT                 # copy_run reuses OUT for each copy's destination
chmod 1777 "$DST"
SRCROOT=$WORK/src           # the datasets; each copy lands in $DST/r<N>/<same name>
SSHDIR=$WORK/ssh

# Space: both datasets and every copy of the larger one (copies are kept
# until their dataset is done, see copy_run), plus slack.
DATASETS=${FILES_DATASETS:-many mixed}
MIX_MAX_KIB=$((MIX_SMALL * 64 + MIX_MEDIUM * 8 * 1024 + ($(tr , + <<<"$MIX_LARGE")) * 1024))
grep -qw mixed <<<"$DATASETS" || MIX_MAX_KIB=0
COPIES=$((REPS * 6))
bench_need_space $((MANY_FILES * FILE_SIZE / 1024 + MIX_MAX_KIB * (1 + COPIES) + 512 * 1024))

# results.tsv columns (files_report.py reads them by position):
#  1 dataset (many|mixed)  2 tool  3 run  4 command  5 status (ok|differs|timeout|failed|skipped)
#  6 wall s  7 files (verified, or present when killed)  8 bytes (likewise)  9 CPU s in A
#  10 CPU s in B  11 modes kept (yes|no|-)  12 mtimes kept  13 streams (tern)  14 load (1 min)
#  15 note
bench_tables
row() { result "$@"; }

# ------------------------------------------------------------------ environment
bench_meta_machine "$MODE"
meta rsync_version "$(first_line rsync --version)"
meta ssh_version "$(first_line ssh -V)"
meta tar_version "$(first_line tar --version)"
meta copy_timeout "$COPY_TIMEOUT"
meta reps "$REPS"
meta seed "$SEED"
meta rtt "$RTT"
meta rate "$RATE"
meta mtu "$MTU"
meta netlab_up "netlab up $(quote "${UP_ARGS[@]}")"
meta work "$WORK"
meta tern "$TERN"
meta netlab "$NETLAB"
meta repo "$REPO"
meta write "$WRITE"
meta tern_ssh_note "$TERN_SSH_NOTE"
# FILES_TOOLS: only the tools named run; FILES_DATASETS: only the datasets named.
declare -A UNSELECTED=()
if [ -n "${FILES_TOOLS:-}" ]; then
    for t in $TOOLS_ALL; do
        case " $FILES_TOOLS " in *" $t "*) ;; *) if have "$t"; then HAVE[$t]=0 UNSELECTED[$t]=1; fi ;; esac
    done
fi
meta files_tools "${FILES_TOOLS:-all}"
meta files_datasets "$DATASETS"
for t in $TOOLS_ALL; do meta "have_$t" "${HAVE[$t]:-0}"; done
log "mode $MODE: A = $MANY_FILES files of $FILE_SIZE B, B = $MIX_SMALL small + $MIX_MEDIUM medium + $MIX_LARGE MiB;" \
    "copy timeout ${COPY_TIMEOUT}s, $REPS run(s) each; lab $LAB; work dir $WORK"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -z "$TERN_SSH_NOTE" ] || log "tern over ssh: skipped ($TERN_SSH_NOTE)"

# ------------------------------------------------------------------- datasets
# tree_sig DIR: "FILES BYTES CONTENT DIRS MODES MTIMES": the number and total size
# of regular files; digests of every file's path and contents, of the list of
# directories, of every entry's type, mode and path, and of every file's mtime
# (whole seconds: tar and scp keep no more) and path.
tree_sig() {
    (
        cd "$1" || exit 1
        export LC_ALL=C
        printf '%s %s %s %s %s %s\n' \
            "$(find . -type f | wc -l)" \
            "$(find . -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }')" \
            "$(find . -type f -print0 | sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-16)" \
            "$(find . -mindepth 1 -type d | sort | sha256sum | cut -c1-16)" \
            "$(find . -mindepth 1 -printf '%y %m %p\n' | sort | sha256sum | cut -c1-16)" \
            "$(find . -type f -printf '%T@ %p\n' | sed 's/^\([0-9]*\)\.[0-9]* /\1 /' | sort | sha256sum | cut -c1-16)"
    )
}
declare -A SIG=()
mkdir -p "$SRCROOT"
log "writing dataset A (many): $MANY_FILES files of $FILE_SIZE bytes in $MANY_DIRS directories"
timeout 600 python3 "$REPO/bench/make_tree.py" many "$SRCROOT/many" --files "$MANY_FILES" --dirs "$MANY_DIRS" \
    --size "$FILE_SIZE" --seed "$SEED" >"$WORK/dataset-many.json" || die "could not write dataset A"
if grep -qw mixed <<<"$DATASETS"; then
    log "writing dataset B (mixed)"
    timeout 1200 python3 "$REPO/bench/make_tree.py" mixed "$SRCROOT/mixed" --small "$MIX_SMALL" --medium "$MIX_MEDIUM" \
        --large "$MIX_LARGE" --seed "$SEED" >"$WORK/dataset-mixed.json" || die "could not write dataset B"
fi
chmod 755 "$SRCROOT"
sync
# What an fsync costs per small file on this disk (tern fsyncs every file; rsync, scp, tar do not).
read -r WRITE_MS FSYNC_MS < <(python3 - "$WORK/fsync-probe" <<'PY'
import os, sys, time
d = sys.argv[1]
os.makedirs(d)
buf = os.urandom(16384)
out = []
for sync in (False, True):
    t = time.monotonic()
    for i in range(200):
        with open(os.path.join(d, f"{int(sync)}-{i}"), "wb") as f:
            f.write(buf)
            if sync:
                os.fsync(f.fileno())
    out.append("%.2f" % ((time.monotonic() - t) / 200 * 1000))
print(*out)
PY
) || true
rm -rf "$WORK/fsync-probe"
meta write_ms "${WRITE_MS:-?}"
meta fsync_ms "${FSYNC_MS:-?}"
log "writing a 16 KiB file: ${WRITE_MS:-?} ms, with fsync ${FSYNC_MS:-?} ms"
for ds in $DATASETS; do
    SIG[$ds]=$(tree_sig "$SRCROOT/$ds")
    log "  $ds: $(json_get '"%d files, %d directories, %.1f MiB" % (d["files"], d["dirs"], d["bytes"] / 1048576)' <"$WORK/dataset-$ds.json")"
done

if have ssh; then
    bench_sshd_setup tern-files || { log "sshd rejected its configuration; no ssh-based tools"; HAVE[ssh]=0 HAVE[rsync]=0 HAVE[rsync-fsync]=0 HAVE[scp]=0 HAVE[tar]=0 HAVE[tern-ssh]=0; }
fi

# ------------------------------------------------------------ the copy commands
# tool_cmd TOOL DATASET: the command that copies $SRCROOT/DATASET into $OUT
# (landing as $OUT/DATASET) into CMD, and the server whose CPU it uses into SRV.
# Every tool gets what a user would type; tern adds only --fingerprint (what
# the daemon printed), --json (to record its streams) and --no-progress.
# rsync --fsync is there for a like-for-like durability cost: tern fsyncs each
# file before renaming it into place, rsync, scp and tar do not by default.
tool_cmd() {
    local src=$SRCROOT/$2
    case "$1" in
        tern) SRV=tern CMD=("$TERN" cp -r --fingerprint "$FP" --json --no-progress "$src" "tern://$B0:$TPORT/${OUT#"$DST"/}/") ;;
        tern-ssh) SRV=sshd CMD=("$TERN" cp -r --ssh "$SSH_E" --remote-tern "$TERN" --json --no-progress "$src" "root@$B0:$OUT/") ;;
        rsync) SRV=sshd CMD=(rsync -a -e "$SSH_E" "$src" "root@$B0:$OUT/") ;;
        rsync-fsync) SRV=sshd CMD=(rsync -a --fsync -e "$SSH_E" "$src" "root@$B0:$OUT/") ;;
        scp) SRV=sshd CMD=(scp -r -q -P "$SPORT" "${SSH_OPTS[@]}" "$src" "root@$B0:$OUT/") ;;
        tar) SRV=sshd CMD=(bash -o pipefail -c "tar -C $SRCROOT -cf - $2 | $SSH_E root@$B0 tar -C $OUT -xf -") ;;
        *) die "unknown tool $1" ;;
    esac
}
clear_dst() { find "$DST" -mindepth 1 -delete 2>/dev/null || rm -rf "${DST:?}"/* "$DST"/.[!.]* 2>/dev/null || true; }

# copy_run DATASET TOOL RUN: one timed copy, then its check; one row of results.tsv.
# Every copy goes into a directory of its own, created empty just before it
# ($DST/r1, r2, ...); copies are deleted only once a dataset is done. Deleting
# 10 000 files leaves the file system work that made the fsyncs of the next
# copy slower (here 11 s instead of 6.5 s for tern, and slower rsync --fsync
# too), so a copy after a delete paid for its predecessor.
declare -A LAST=()   # dataset:tool -> status of its last run
COPY_SEQ=0
copy_run() {
    local ds=$1 tool=$2 run=$3 load status note="" files bytes modes=- mtimes=- streams=- got want
    load=$(cut -d' ' -f1 /proc/loadavg)
    COPY_SEQ=$((COPY_SEQ + 1))
    OUT=$DST/r$COPY_SEQ
    mkdir -p "$OUT"
    sync
    if [ "$tool" = tern ] && ! ensure_tern "$ds, before tern run $run"; then
        row "$ds" "$tool" "$run" "tern cp -r" failed nan nan nan nan nan - - - "$load" "tern serve would not start"
        LAST[$ds:$tool]=failed
        return
    fi
    tool_cmd "$tool" "$ds"
    measure_a "$SRV" "$COPY_TIMEOUT" "${CMD[@]}"
    read -r -a want <<<"${SIG[$ds]}"
    if [ "$M_RC" = 0 ]; then
        if [ -d "$OUT/$ds" ]; then read -r -a got <<<"$(tree_sig "$OUT/$ds")"; else got=(0 0 - - - -); fi
        files=${got[0]} bytes=${got[1]}
        if [ "${got[0]}" != "${want[0]}" ]; then note="$((got[0])) of ${want[0]} files arrived"
        elif [ "${got[2]}" != "${want[2]}" ]; then note="file names or contents differ from the source"
        elif [ "${got[3]}" != "${want[3]}" ]; then note="directories differ from the source"
        fi
        if [ -z "$note" ]; then
            status=ok
            if [ "${got[4]}" = "${want[4]}" ]; then modes=yes; else modes=no; fi
            if [ "${got[5]}" = "${want[5]}" ]; then mtimes=yes; else mtimes=no; fi
        else
            status=differs
        fi
    elif [ "$M_RC" = 124 ]; then
        status=timeout
        sleep 1   # what the receiving end still had in hand
        # Files at their final names (rsync and tern write dot-named temporaries); the last may be partial.
        files=$(find "$OUT/$ds" -type f ! -name '.*' 2>/dev/null | wc -l)
        bytes=$(find "$OUT/$ds" -type f ! -name '.*' -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { printf "%d", s }')
        note="killed after ${COPY_TIMEOUT} s with $files of ${want[0]} files at their final names (not verified)"
    else
        status=failed files=nan bytes=nan
        note=$(fail_note)
    fi
    if [ "$tool" = tern ] || [ "$tool" = tern-ssh ]; then
        cp "$LOGS/run.out" "$LOGS/$ds-$tool-$run.json" 2>/dev/null || true
        streams=$(json_get 'max([d.get("streams") or 0] + [s.get("streams", 0) for s in (d.get("tuning") or {}).get("stream_steps", [])]) or None' - <"$LOGS/run.out")
        if [ "$status" = ok ]; then
            note=$(json_get '"tern --json: elapsed %.2f s, of which setup %.2f s" % (d["elapsed_s"], d["setup_s"])' "" <"$LOGS/run.out")
        fi
    fi
    row "$ds" "$tool" "$run" "$M_CMD" "$status" "$M_WALL" "$files" "$bytes" "$M_CPU_A" "$M_CPU_B" "$modes" "$mtimes" "$streams" "$load" "$note"
    LAST[$ds:$tool]=$status
    case "$status" in
        ok) log "  $tool run $run: ${M_WALL} s, $(awk -v n="${want[0]}" -v t="$M_WALL" 'BEGIN { printf "%.0f", n / t }') files/s, verified (modes kept: $modes, mtimes kept: $mtimes$([ "$streams" = - ] || echo ", streams $streams"))" ;;
        *) log "  $tool run $run: $status after ${M_WALL} s: $note"; tail -n 3 "$LOGS/run.err" >&2 || true ;;
    esac
}
skip_row() { row "$1" "$2" - "-" skipped nan nan nan nan nan - - - - "$3"; }

# ------------------------------------------------------------------- the runs
log "netlab up $(quote "${UP_ARGS[@]}") (lab $LAB)"
lab_up path "${UP_ARGS[@]}"
timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-start.json" || true
# Servers live at most as long as all copies can take.
SERVER_TIMEOUT=$((2 * REPS * 6 * (COPY_TIMEOUT + 120) + 600))
start_tern || die "tern serve did not start in B"
if have ssh; then
    if start_server sshd "$SPORT" /usr/sbin/sshd -D -f "$SSHDIR/sshd_config" -E "$LOGS/sshd.log"; then
        meta ssh_cipher "$(ssh_cipher)"
    else
        HAVE[rsync]=0 HAVE[rsync-fsync]=0 HAVE[scp]=0 HAVE[tar]=0 HAVE[tern-ssh]=0
        echo "sshd did not start in B: no rsync, scp, tar or tern over ssh" >>"$WORK/events.txt"
    fi
fi

for ds in $DATASETS; do
    log "dataset $ds"
    for run in $(seq "$REPS"); do
        order=$TOOLS_ALL
        if [ $((run % 2)) = 0 ]; then order=$(tr ' ' '\n' <<<"$TOOLS_ALL" | tac | tr '\n' ' '); fi
        for tool in $order; do
            if ! have "$tool"; then
                if [ "$run" = 1 ] && [ "${UNSELECTED[$tool]:-0}" = 1 ]; then
                    skip_row "$ds" "$tool" "not selected (FILES_TOOLS=$FILES_TOOLS)"
                elif [ "$run" = 1 ]; then
                    case "$tool" in
                        tern-ssh) skip_row "$ds" "$tool" "${TERN_SSH_NOTE:-sshd did not start}" ;;
                        rsync-fsync) skip_row "$ds" "$tool" "rsync without --fsync (3.2.4 or later needed), or no sshd" ;;
                        *) skip_row "$ds" "$tool" "$tool or sshd not available" ;;
                    esac
                fi
                continue
            fi
            # A tool that timed out or failed is not run again on this dataset.
            case "${LAST[$ds:$tool]:-}" in timeout | failed | differs) continue ;; esac
            copy_run "$ds" "$tool" "$run"
        done
    done
    clear_dst
    sync
done

timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-end.json" || true
if ! server_alive tern; then echo "tern serve had exited by the end of the run" >>"$WORK/events.txt"; fi
stop_servers
SPID=()
lab_down
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------------- report
if ! python3 "$REPO/bench/files_report.py" "$WORK" "$REPORT"; then
    # Keep what the run measured, so the report can be made again without rerunning it.
    rm -rf "$REPO/bench/files-report-inputs"
    mkdir -p "$REPO/bench/files-report-inputs"
    cp -r "$WORK"/*.tsv "$WORK"/*.json "$WORK"/*.txt "$LOGS" "$SSHDIR" "$REPO/bench/files-report-inputs/" 2>/dev/null || true
    die "the report generator failed; its inputs are in bench/files-report-inputs (python3 bench/files_report.py bench/files-report-inputs OUT.md)"
fi
if [ "$SPLICE_ONLY" = 0 ]; then log "report written to $REPORT"; fi
if [ "$WRITE" = 1 ]; then
    python3 "$REPO/bench/files_report.py" --splice "$REPORT" "$REPO/BENCHMARKS.md"
    log "section <!-- files:start --> ... <!-- files:end --> of BENCHMARKS.md replaced"
fi
