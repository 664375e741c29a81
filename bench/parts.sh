#!/usr/bin/env bash
# bench/parts.sh: what one run of etcd's benchmark costs apart from its
# requests. One fresh 3-member strata cluster (NODES=1: one member) takes
# linearizable 1-key ranges from 1000 clients on 100 connections, in runs
# of each size in SIZES, in turn; each line is one run's reads/s and the
# CPU per read of the benchmark process and of the members together.
# If a short run costs more per read than a long one, the difference is
# the run's start-up (process start, connections, ramp), and a workload
# of bench/compare.sh should run parts long enough to make it small.
#
#   bash bench/parts.sh                  # SIZES="20000 100000 20000 100000"
#   NODES=1 SIZES="50000 200000" bash bench/parts.sh
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-3}
SIZES=${SIZES:-20000 100000 20000 100000}
BINDIR=$(bash e2e/build-etcd.sh | tail -1)
BENCH=$BINDIR/benchmark
make -s build >/dev/null
DIR=$(mktemp -d "${STRATA_BENCH_DIR:-/tmp}/parts.XXXXXX")
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait; rm -rf "$DIR"' EXIT

base=$((30000 + RANDOM % 5000 * 4))
ic= eps=
for i in $(seq 1 "$NODES"); do
	ic+="${ic:+,}m$i=http://127.0.0.1:$((base + 100 + i))"
	eps+="${eps:+,}127.0.0.1:$((base + i))"
done
for i in $(seq 1 "$NODES"); do
	bin/strata --name "m$i" --data-dir "$DIR/m$i" \
		--listen-client-urls "http://127.0.0.1:$((base + i))" --advertise-client-urls "http://127.0.0.1:$((base + i))" \
		--listen-peer-urls "http://127.0.0.1:$((base + 100 + i))" --initial-advertise-peer-urls "http://127.0.0.1:$((base + 100 + i))" \
		--initial-cluster "$ic" >"$DIR/m$i.log" 2>&1 &
	PIDS+=($!)
done
for _ in $(seq 1 100); do
	"$BINDIR/etcdctl" --endpoints="$eps" --dial-timeout=1s put bench-range-key v >/dev/null 2>&1 && break
	sleep 0.2
done

ticks() { for p in "${PIDS[@]}"; do cat "/proc/$p/stat"; done | awk '{t += $14 + $15} END {print t}'; }
HZ=$(getconf CLK_TCK)
printf '%-10s %10s %14s %15s\n' requests reads/s "client us/read" "members us/read"
for n in $SIZES; do
	t0=$(ticks)
	# `times` reports the CPU of this group's children: the benchmark
	out=$({ "$BENCH" --endpoints="$eps" --conns=100 --clients=1000 range bench-range-key \
		--consistency=l --total="$n" 2>/dev/null | awk '/Requests\/sec/ {print $2 + 0}'; times; } | tr '\n' ' ')
	t1=$(ticks)
	awk -v out="$out" -v n="$n" -v dt="$((t1 - t0))" -v hz="$HZ" 'BEGIN {
		split(out, f, " ")
		c = 0
		for (i = 4; i <= 5; i++) { split(f[i], m, "m"); sub("s", "", m[2]); c += m[1] * 60 + m[2] }
		printf "%-10d %10.0f %14.1f %15.1f\n", n, f[1], c / n * 1e6, dt / hz / n * 1e6 }'
done
