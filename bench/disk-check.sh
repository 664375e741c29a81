#!/usr/bin/env bash
# bench/disk-check.sh DIR: runs fio with etcd's recommended profile
# (fio-profiles/etcd-wal.fio) and `stratabench disk` on the same directory,
# prints the two side by side (sequential sync IOPS, fdatasync latency
# percentiles) and fails if their IOPS differ by more than TOLERANCE
# percent of fio's.
#
# Disk timings are noisy on shared machines, so a disagreement is not
# final: the pair is run again, in the other order (stratabench first),
# up to ATTEMPTS pairs in all; the check passes as soon as one pair agrees.
#
#   make disk-check DIR=/var/lib/etcd-test     # full profile (22 MiB each)
#   SHORT=1 bash bench/disk-check.sh DIR       # RUNTIME seconds each
#
# Environment: SHORT=1 (stop each run after RUNTIME seconds, default 3),
# ATTEMPTS (default 3), TOLERANCE (percent, default 25), STRATABENCH
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
RUNTIME=${RUNTIME:-3}
ATTEMPTS=${ATTEMPTS:-3}
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
	"$STRATABENCH" "${sb_args[@]}" >"$work/sb.$1.json"
}

for ((a = 1; a <= ATTEMPTS; a++)); do
	if ((a % 2 == 1)); then
		echo "--- attempt $a of $ATTEMPTS: fio, then stratabench"
		run_fio "$a"
		run_sb "$a"
	else
		echo "--- attempt $a of $ATTEMPTS: stratabench, then fio"
		run_sb "$a"
		run_fio "$a"
	fi
	if "$STRATABENCH" disk compare --fio "$work/fio.$a.json" --bench "$work/sb.$a.json" --tolerance "$TOLERANCE"; then
		echo "disk-check: PASS (attempt $a): stratabench disk and fio agree on sequential sync IOPS within ±$TOLERANCE%"
		exit 0
	fi
done
echo "disk-check: FAIL: stratabench disk and fio disagreed by more than ±$TOLERANCE% in all $ATTEMPTS attempts" >&2
exit 1
