#!/usr/bin/env bash
# bench/disk-check.sh DIR: runs fio with etcd's recommended profile
# (fio-profiles/etcd-wal.fio) and `stratabench disk` on the same directory,
# prints the two side by side (sequential sync IOPS, fdatasync latency
# percentiles) and fails if their IOPS differ by more than TOLERANCE
# percent of fio's.
#
# Disk timings are noisy on shared machines, so each attempt runs the two
# tools interleaved, ABBA (fio, stratabench, stratabench, fio), and
# compares pooled IOPS (all writes over all the time). A disagreement is
# not final: the attempt is repeated the other way round (BAAB), up to
# ATTEMPTS in all; the check passes as soon as one attempt agrees.
#
#   make disk-check DIR=/var/lib/etcd-test     # full profile (22 MiB each)
#   SHORT=1 bash bench/disk-check.sh DIR       # RUNTIME seconds each
#
# Environment: SHORT=1 (stop each run after RUNTIME seconds, default 2),
# ATTEMPTS (default 2), TOLERANCE (percent, default 25), STRATABENCH
# (default bin/stratabench). fio is installed from Debian's packages when
# missing (apt-get, through sudo unless root).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -ne 1 || -z $1 ]]; then
	echo "usage: bench/disk-check.sh DIR   (DIR: a directory on the disk to check)" >&2
	exit 2
fi
DIR=$1
SHORT=${SHORT:-}
RUNTIME=${RUNTIME:-2}
ATTEMPTS=${ATTEMPTS:-2}
TOLERANCE=${TOLERANCE:-25}
STRATABENCH=${STRATABENCH:-bin/stratabench}
PROFILE=fio-profiles/etcd-wal.fio

[[ -x $STRATABENCH ]] || { echo "$STRATABENCH missing: run make build" >&2; exit 1; }
[[ $RUNTIME =~ ^[0-9]+$ && $RUNTIME -gt 0 ]] || { echo "RUNTIME must be a whole number of seconds" >&2; exit 2; }
[[ $ATTEMPTS =~ ^[0-9]+$ && $ATTEMPTS -gt 0 ]] || { echo "ATTEMPTS must be a positive number" >&2; exit 2; }

if ! command -v fio >/dev/null; then
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
mode="full profile (22 MiB each)"
if [[ -n $SHORT ]]; then
	fio_args+=(--runtime="$RUNTIME")
	sb_args+=(--duration "${RUNTIME}s")
	mode="short: ${RUNTIME} s each"
fi

echo "disk-check: $DIR on $(df -PT "$DIR" | awk 'NR==2 {print $1 " (" $2 ")"}'), $(fio --version), $mode"

run_fio() {
	rm -f "$fiofile"
	fio "${fio_args[@]}" --output="$work/fio.$1.json" "$PROFILE"
	rm -f "$fiofile"
}
run_sb() {
	# The progress bar is kept for failures only.
	"$STRATABENCH" "${sb_args[@]}" >"$work/sb.$1.json" 2>"$work/sb.$1.err" || { cat "$work/sb.$1.err" >&2; return 1; }
}

# Warm-up, not measured: the first sync-heavy run on a fresh directory
# (or after an idle disk) was seen running 1.6x faster than every run after
# it, which alone failed a comparison.
"$STRATABENCH" disk --dir "$DIR" --duration 1s -w json >/dev/null 2>&1 || true

for ((a = 1; a <= ATTEMPTS; a++)); do
	# ABBA: each tool runs twice, first and last or in the middle, so a
	# load that rises or falls during the attempt weighs on both alike.
	if ((a % 2 == 1)); then
		order=(fio sb sb fio)
	else
		order=(sb fio fio sb)
	fi
	echo "--- attempt $a of $ATTEMPTS: ${order[*]}"
	nf=0 nb=0 cmp=()
	for tool in "${order[@]}"; do
		if [[ $tool == fio ]]; then
			nf=$((nf + 1))
			run_fio "$a.$nf"
			cmp+=(--fio "$work/fio.$a.$nf.json")
		else
			nb=$((nb + 1))
			run_sb "$a.$nb"
			cmp+=(--bench "$work/sb.$a.$nb.json")
		fi
	done
	if "$STRATABENCH" disk compare "${cmp[@]}" --tolerance "$TOLERANCE"; then
		echo "disk-check: PASS (attempt $a): stratabench disk and fio agree on sequential sync IOPS within ±$TOLERANCE%"
		exit 0
	fi
done
echo "disk-check: FAIL: stratabench disk and fio disagreed by more than ±$TOLERANCE% in all $ATTEMPTS attempts" >&2
exit 1
