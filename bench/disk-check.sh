#!/usr/bin/env bash
# bench/disk-check.sh DIR: runs fio with etcd's recommended profile
# (fio-profiles/etcd-wal.fio) and `stratabench disk` on the same directory
# and sets them side by side (sequential sync IOPS, fdatasync latency
# percentiles).
#
# Comparison (make disk-check DIR=...): disk timings are noisy on shared
# machines (two runs of one tool a minute apart were seen 50% apart), so
# the tools run interleaved, ROUNDS rounds of one run each, the order
# alternating (fio sb, sb fio, fio sb, ...) so that a load that rises or
# falls weighs on both alike. Each tool is summarised by the median of its
# runs, and the verdict names each tool's run-to-run spread: agree (within
# ±TOLERANCE% of fio's IOPS), disagree (beyond it, with steady runs), or
# inconclusive (the disk's own spread is as large as the difference). Only
# agree exits 0.
#
# Check (CHECK=1, make test's disk-check-short): each tool runs once for
# CHECK_RUNTIME seconds, and only what holds on any disk is checked: both
# tools run, their outputs parse, they wrote the same block size, and
# every figure is positive and in its unit. No speeds are compared: a
# check that fails on a noisy disk blocks everyone for nothing.
#
#   make disk-check DIR=/var/lib/etcd-test     # full profile (22 MiB each)
#   SHORT=1 bash bench/disk-check.sh DIR       # RUNTIME seconds each
#   CHECK=1 bash bench/disk-check.sh DIR       # make test's check
#
# Environment: ROUNDS (default 5), SHORT=1 (stop each run after RUNTIME
# seconds, default 2), TOLERANCE (percent, default 25), CHECK=1,
# CHECK_RUNTIME (default 1), STRATABENCH (default bin/stratabench), FIO
# (default fio). fio is installed from Debian's packages when missing
# (apt-get, through sudo unless root).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -ne 1 || -z $1 ]]; then
	echo "usage: bench/disk-check.sh DIR   (DIR: a directory on the disk to check)" >&2
	exit 2
fi
DIR=$1
SHORT=${SHORT:-}
CHECK=${CHECK:-}
RUNTIME=${RUNTIME:-2}
CHECK_RUNTIME=${CHECK_RUNTIME:-1}
ROUNDS=${ROUNDS:-5}
TOLERANCE=${TOLERANCE:-25}
STRATABENCH=${STRATABENCH:-bin/stratabench}
FIO=${FIO:-fio}
PROFILE=fio-profiles/etcd-wal.fio

[[ -x $STRATABENCH ]] || { echo "$STRATABENCH missing: run make build" >&2; exit 1; }
for v in RUNTIME CHECK_RUNTIME ROUNDS; do
	[[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "$v must be a positive whole number" >&2; exit 2; }
done

if ! command -v "$FIO" >/dev/null; then
	[[ $FIO == fio ]] || { echo "FIO=$FIO: not found" >&2; exit 1; }
	echo "fio not found; installing it from Debian's packages" >&2
	sudo=()
	if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get install -y fio >/dev/null ||
		{ "${sudo[@]}" apt-get update >/dev/null && "${sudo[@]}" apt-get install -y fio >/dev/null; } ||
		{ echo "could not install fio (apt-get install -y fio failed)" >&2; exit 1; }
fi

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
work=$(mktemp -d)
fiofile=$DIR/etcd-wal.0.0 # fio's name for the job's file
cleanup() { rm -rf "$work"; rm -f "$fiofile"; }
trap cleanup EXIT

fio_args=(--directory="$DIR" --output-format=json)
sb_args=(disk --dir "$DIR" -w json)
if [[ -n $CHECK ]]; then
	fio_args+=(--runtime="$CHECK_RUNTIME")
	sb_args+=(--duration "${CHECK_RUNTIME}s")
	mode="check: ${CHECK_RUNTIME} s each, no speed comparison"
elif [[ -n $SHORT ]]; then
	fio_args+=(--runtime="$RUNTIME")
	sb_args+=(--duration "${RUNTIME}s")
	mode="short: ${RUNTIME} s each, $ROUNDS rounds"
else
	mode="full profile (22 MiB each), $ROUNDS rounds"
fi

echo "disk-check: $DIR on $(df -PT "$DIR" | awk 'NR==2 {print $1 " (" $2 ")"}'), $("$FIO" --version), $mode"

run_fio() {
	rm -f "$fiofile"
	"$FIO" "${fio_args[@]}" --output="$work/fio.$1.json" "$PROFILE" ||
		{ echo "disk-check: fio failed" >&2; return 1; }
	rm -f "$fiofile"
}
run_sb() {
	# The progress bar is kept for failures only.
	"$STRATABENCH" "${sb_args[@]}" >"$work/sb.$1.json" 2>"$work/sb.$1.err" ||
		{ cat "$work/sb.$1.err" >&2; echo "disk-check: stratabench disk failed" >&2; return 1; }
}

if [[ -n $CHECK ]]; then
	run_fio 1
	run_sb 1
	"$STRATABENCH" disk compare --check-only --fio "$work/fio.1.json" --bench "$work/sb.1.json"
	echo "disk-check: PASS (check only; make disk-check DIR=... compares the two tools' speeds)"
	exit 0
fi

# Warm-up, not measured: the first sync-heavy run on a fresh directory
# (or after an idle disk) was seen running 1.6x faster than every run after
# it.
"$STRATABENCH" disk --dir "$DIR" --duration 1s -w json >/dev/null 2>&1 || true

cmp=()
for ((r = 1; r <= ROUNDS; r++)); do
	if ((r % 2 == 1)); then order=(fio sb); else order=(sb fio); fi
	echo "--- round $r of $ROUNDS: ${order[*]}"
	for tool in "${order[@]}"; do
		if [[ $tool == fio ]]; then
			run_fio "$r"
			cmp+=(--fio "$work/fio.$r.json")
		else
			run_sb "$r"
			cmp+=(--bench "$work/sb.$r.json")
		fi
	done
done
if "$STRATABENCH" disk compare "${cmp[@]}" --tolerance "$TOLERANCE"; then
	echo "disk-check: PASS: stratabench disk and fio agree on sequential sync IOPS within ±$TOLERANCE% (medians of $ROUNDS runs each)"
	exit 0
fi
echo "disk-check: FAIL: stratabench disk and fio do not agree within ±$TOLERANCE% (see the verdict above: a disagreement, or a disk too noisy to tell)" >&2
exit 1
