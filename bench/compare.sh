#!/usr/bin/env bash
# bench/compare.sh: strata against etcd 3.7 on the same disk with etcd's
# own load generator (go.etcd.io/etcd/v3/tools/benchmark, v3.6.8), in one
# run. Both servers get identical flags and fresh data dirs under
# $STRATA_BENCH_DIR (default: a temp dir on the disk of /tmp). Each
# round starts both servers fresh and runs every workload on one and
# then on the other, which one goes first alternating from workload to
# workload and from round to round, so that background noise hits both;
# every throughput workload (the 1-client put too) runs in SLICES parts
# a round, the two servers' parts interleaved. The median of ROUNDS
# rounds' ratios is reported, with each round's ratio.
#
# NODES=1 (default): one member, every workload in each round,
# in this order on one fresh data dir (about 124,000 writes in all):
#   put from 1 client; put from 1000 clients on 100 connections; txn-put
#   from 100 clients on 10 connections; then 100 keys under a100/ and
#   10,000 under b10k/ are loaded (stratabench, the same for both);
#   linearizable and serializable ranges of one key from 1000 clients on
#   100 connections; linearizable ranges of the 100-key prefix and of the
#   10,000-key prefix with --limit 500 (kube-apiserver's paginated list)
#   from 100 clients on 10 connections; watch-latency with 1000 watchers
#   of one key (10 streams x 100) under a paced put load (p99 event
#   latency, lower is better); then the server's RSS right after the
#   run and 5 s later, its data dir and its db file; last, how much the
#   db file grows when stratabench puts 20,000 Kubernetes Pods in JSON
#   (2 KiB each, --val-kind pod), values that compress as real objects
#   do, where etcd's benchmark writes random bytes.
# NODES=3: a 3-member cluster of each, all members on this machine and
# disk: puts from 1 client (to the leader), puts from 1000 clients on 100
# connections and linearizable ranges from 1000 clients on 100
# connections (both spread over every member, as etcd's benchmark does
# with several endpoints).
#
# After the ratios: for each workload that loads the CPUs, the CPU time
# per request of etcd's benchmark process and of the members, and the
# ratio those sums bound (client and servers share this machine's CPUs).
#
# FLOOR=1 (the default with NODES=1): a third server takes the puts, the
# txn-puts and the 1-key ranges in each round beside the two,
# `stratabench floor-server`: a member's gRPC configuration with nothing
# behind it but a group-committed fdatasync for each put (no raft, index,
# page store, metrics or auth). Its ratio against etcd is the best a
# server on gRPC-go can reach on this machine with this client, and the
# CPU a member spends beyond the floor's is strata's own.
#
#   make bench-compare                 # builds what it needs, then runs
#   make bench-compare NODES=3
#   ROUNDS=5 TOTAL1=5000 bash bench/compare.sh
#   NODES=3 PARTS="20000 100000 20000 100000" bash bench/compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-1}
ROUNDS=${ROUNDS:-3}
TOTAL1=${TOTAL1:-3000}        # puts for the 1-client workload
# Requests for each 1000-client workload (NODES=3). A part of the run
# (TOTAL1000 / SLICES requests) starts a benchmark process that opens 100
# connections to three members: about 0.4 CPU-s of the client's and 0.2
# of the members' that do not depend on the count, and a ramp while
# three members' read batches and streams fill. With 20,000-request
# parts that start-up was a third of the client's CPU per request and
# pulled both servers' rates, and so their ratio, toward the start-up's;
# 100,000-request parts measure the steady state (bench/RESULTS.md;
# PARTS below measures it).
TOTAL1000=${TOTAL1000:-300000}
RANGE1000=${RANGE1000:-150000} # 1-key ranges from 1000 clients (NODES=1; NODES=3 runs TOTAL1000)
PUT1000=${PUT1000:-75000}     # puts from 1000 clients (NODES=1)
TXN100=${TXN100:-30000}       # txn-puts from 100 clients (NODES=1)
PREFIX=${PREFIX:-20000}       # 100-key prefix ranges from 100 clients (NODES=1)
PREFIX10K=${PREFIX10K:-5000}  # 10,000-key prefix ranges (--limit 500) from 100 clients (NODES=1)
FLOOR=${FLOOR:-$((NODES == 1))}
SLICES=${SLICES:-3}          # each throughput workload runs in this many alternating parts a round
WATCHPUTS=${WATCHPUTS:-5000}  # puts, at WATCHRATE/s, seen by 1000 watchers (NODES=1)
WATCHRATE=${WATCHRATE:-1000}
PODPUTS=${PODPUTS:-20000}     # 2 KiB Kubernetes Pods in JSON put by stratabench after the rest (NODES=1)
[[ $NODES == 1 || $NODES == 3 ]] || { echo "NODES must be 1 or 3" >&2; exit 2; }
[[ $NODES == 1 ]] || RANGE1000=$TOTAL1000
BINDIR=$(bash e2e/build-etcd.sh | tail -1)
ETCD=$BINDIR/etcd
CTL=$BINDIR/etcdctl
BENCH=$BINDIR/benchmark
STRATA=$PWD/bin/strata
LOADER=$PWD/bin/stratabench
[[ -x $STRATA && -x $LOADER ]] || { echo "bin/strata or bin/stratabench missing: run make build" >&2; exit 1; }
base=${STRATA_BENCH_DIR:-$(mktemp -d)}
mkdir -p "$base"
# The data dirs are removed at exit (a round leaves about 250 MiB per
# member, and repeated runs filled a disk), not after each round: on a
# file system mounted with discard, freeing them sends the disk work
# that the next server's round would share. Their logs stay in $base; a
# temporary $base goes too, and so do members still running when the
# script is interrupted.
PIDS=()
ALLDIRS=()
declare -A SPIDS=() SEPS=() SDIRS=()
cleanup() {
	local srv
	for srv in "${!SPIDS[@]}"; do
		[[ -n ${SPIDS[$srv]} ]] || continue
		use "$srv"
		stop
	done
	stop
	if ((${#ALLDIRS[@]})); then rm -rf "${ALLDIRS[@]}"; fi
	[[ -n ${STRATA_BENCH_DIR:-} ]] || rm -rf "$base"
}
trap cleanup EXIT

# ports N -> N distinct free ports, one per line (all bound at once, so
# two calls in a row cannot hand out the same port twice)
ports() {
	python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# start NAME BIN -> sets PIDS (one per member), EPS (client host:port per
# member, in member order) and EP (all of them, comma-separated)
start() {
	local name=$1 bin=$2 i initial="" tag=$RANDOM
	local -a cps pps
	PIDS=(); EPS=(); DIRS=()
	local -a free
	mapfile -t free < <(ports $((2 * NODES)))
	for i in $(seq 1 "$NODES"); do
		cps[i]=${free[2 * i - 2]}; pps[i]=${free[2 * i - 1]}
		initial+="${initial:+,}$name$i=http://127.0.0.1:${pps[i]}"
	done
	for i in $(seq 1 "$NODES"); do
		local dir=$base/$name$i.$tag
		rm -rf "$dir"
		"$bin" --name "$name$i" --data-dir "$dir" \
			--listen-client-urls "http://127.0.0.1:${cps[i]}" --advertise-client-urls "http://127.0.0.1:${cps[i]}" \
			--listen-peer-urls "http://127.0.0.1:${pps[i]}" --initial-advertise-peer-urls "http://127.0.0.1:${pps[i]}" \
			--initial-cluster "$initial" --initial-cluster-token "bench-$tag" --log-level error >"$dir.log" 2>&1 &
		PIDS+=($!)
		EPS+=("127.0.0.1:${cps[i]}")
		DIRS+=("$dir")
		ALLDIRS+=("$dir")
	done
	EP=$(IFS=,; echo "${EPS[*]}")
	local pid
	for _ in $(seq 1 300); do
		if "$CTL" --endpoints="$EP" --dial-timeout=1s --command-timeout=2s endpoint health --cluster >/dev/null 2>&1; then return 0; fi
		for pid in "${PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null || { echo "$name: a member exited while starting" >&2; break 2; }
		done
		sleep 0.1
	done
	echo "$name did not start" >&2; cat "$base/$name"*".$tag.log" >&2; exit 1
}

# startfloor -> the floor server (stratabench floor-server), with PIDS,
# EPS, EP and DIRS as start sets them
startfloor() {
	local port dir=$base/floor.$RANDOM
	port=$(ports 1)
	mkdir -p "$dir"
	"$LOADER" floor-server --listen "127.0.0.1:$port" --data-dir "$dir" >"$dir.log" 2>&1 &
	PIDS=($!); EPS=("127.0.0.1:$port"); DIRS=("$dir"); EP=${EPS[0]}
	ALLDIRS+=("$dir")
	for _ in $(seq 1 300); do
		grep -q "^floor serving" "$dir.log" && return 0
		kill -0 "${PIDS[0]}" 2>/dev/null || break
		sleep 0.1
	done
	echo "the floor server did not start" >&2; cat "$dir.log" >&2; exit 1
}

stop() {
	((${#PIDS[@]})) || return 0
	kill "${PIDS[@]}" 2>/dev/null
	wait "${PIDS[@]}" 2>/dev/null || true
	PIDS=()
}

# leader -> the client host:port of the member that leads
leader() {
	local ep
	for ep in "${EPS[@]}"; do
		if "$CTL" --endpoints="$ep" endpoint status -w json 2>/dev/null |
			python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["Status"]; sys.exit(0 if s["header"]["member_id"]==s["leader"] else 1)'; then
			echo "$ep"; return 0
		fi
	done
	echo "no leader among ${EPS[*]}" >&2; exit 1
}

# put EP CONNS CLIENTS TOTAL -> prints req/s
put() {
	"$BENCH" --endpoints="$1" --conns="$2" --clients="$3" put --key-size=8 --sequential-keys \
		--total="$4" --val-size=256 2>/dev/null | awk '/Requests\/sec/ {print $2}'
}

# bench ARGS... -> prints req/s from etcd's benchmark
bench() { "$BENCH" "$@" 2>/dev/null | awk '/Requests\/sec/ {print $2}'; }

# ticks -> CPU time (user + system, clock ticks) the members have used
ticks() {
	local pid
	for pid in "${PIDS[@]}"; do cat "/proc/$pid/stat"; done | awk '{t += $14 + $15} END {print t}'
}

# cpubench N ARGS... -> "req/s client-us members-us busy" for etcd's
# benchmark given ARGS and N requests: the CPU time per request of the
# benchmark process and of all members together (user + system), and
# how busy the machine's CPUs were over the run (1.00: every CPU all the
# time). With client and members on the same CPUs, a ratio of req/s can
# only exceed the ratio of their CPU sums per request while CPUs idle.
cpubench() {
	local n=$1 t0 t1 out
	shift
	t0=$(ticks)
	# `times` in this group reports the CPU of its children: the
	# benchmark (and the awk that reads its output). The wall time is
	# the whole process's, as its CPU time is (start-up included).
	out=$({ date +%s.%N; "$BENCH" "$@" 2>/dev/null | awk '/Requests\/sec/ {print $2 + 0}'; date +%s.%N; times; } | tr '\n' ' ')
	t1=$(ticks)
	awk -v out="$out" -v n="$n" -v dt="$((t1 - t0))" -v hz="$HZ" -v ncpu="$NCPU" 'BEGIN {
		split(out, f, " ")
		# f[1] start, f[2] req/s, f[3] end, f[4..5] the CPU of this shell,
		# f[6..7] that of its children ("0m1.234s")
		c = 0
		for (i = 6; i <= 7; i++) { split(f[i], m, "m"); sub("s", "", m[2]); c += m[1] * 60 + m[2] }
		wall = f[3] - f[1]
		busy = (wall > 0 ? (c + dt / hz) / (wall * ncpu) : 0)
		printf "%s %.1f %.1f %.2f\n", f[2], c / n * 1e6, dt / hz / n * 1e6, busy }'
}
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)

# p99 ARGS... -> prints the last "99% in" latency of etcd's benchmark, in ms
p99() { "$BENCH" "$@" 2>/dev/null | awk '/^ *99% in/ {v=$3} END {print v*1000}'; }

# load EP PREFIX N -> N sequential keys under PREFIX (256-byte values)
load() {
	"$LOADER" --endpoints "$1" put --prefix "$2" --key-space-size "$3" --sequential-keys \
		--total "$3" --clients 50 --conns 5 --val-size 256 >/dev/null 2>&1
}

# prefix_end PREFIX -> the range end of the prefix (its last byte plus one)
prefix_end() { python3 -c 'import sys; p=sys.argv[1]; print(p[:-1]+chr(ord(p[-1])+1))' "$1"; }

# rss PID -> resident set in MiB
rss() { awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }

# dusize PATH -> MiB allocated on disk
dusize() { du -s -B1 "$1" | awk '{printf "%.1f", $1/1048576}'; }

# fsync -> "sum count" of the WAL fdatasync histogram summed over the
# members (etcd and strata export the same metric)
fsync() {
	local ep
	for ep in "${EPS[@]}"; do curl -s "http://$ep/metrics"; done |
		awk '/^etcd_disk_wal_fsync_duration_seconds_sum/ {s+=$2} /^etcd_disk_wal_fsync_duration_seconds_count/ {c+=$2} END {print s+0, c+0}'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# lower[w] marks a workload where less is better (latency, sizes): its
# ratio is etcd ÷ strata, so above 1 is a win for strata in every row.
declare -A lower=()
if [[ $NODES == 1 ]]; then
	workloads=(1 1000 txn100 rangel ranges prefix100 prefix10k watchp99 rss rss5 datadir db dbpod)
	declare -A label=([1]="put, 1 client" [1000]="put, 1000 clients/100 conns"
		[txn100]="txn-put, 100 clients/10 conns" [rangel]="range -l, 1000 clients/100 conns"
		[ranges]="range -s, 1000 clients/100 conns" [prefix100]="range 100-key prefix, 100 cl"
		[prefix10k]="range 10k prefix --limit 500, 100 cl" [watchp99]="watch p99 ms, 1000 watchers"
		[rss]="RSS right after the run, MiB" [rss5]="RSS 5 s after the run, MiB" [datadir]="data dir after the run, MiB" [db]="db file, MiB"
		[dbpod]="db growth from $((PODPUTS / 1000))k 2 KiB pods, MiB")
	lower=([watchp99]=1 [rss]=1 [rss5]=1 [datadir]=1 [db]=1 [dbpod]=1)
	cpuworkloads=(1000 txn100 rangel ranges prefix100 prefix10k)
else
	workloads=(1 1000 rangel)
	cpuworkloads=(1000 rangel)
	declare -A label=([1]="put, 1 client (leader)" [1000]="put, 1000 clients/100 conns" [rangel]="range -l, 1000 clients/100 conns")
fi

# Both servers run side by side through a round, and each step below
# runs on one and then at once on the other, which goes first alternating
# from step to step and from round to round. A step's two measurements are
# seconds apart, so a slow stretch of this shared machine (its speed moves
# by half within minutes) falls on both far more often than when each
# server had half a round to itself. Before each measurement both servers
# settle: dirty pages are written back and the members' CPU use falls to
# near idle, so that one server's background work after a load (commits,
# compaction, the idle trim, its writes still in the page cache) is not
# charged to the other.
SRVS=(etcd strata)
((FLOOR)) && SRVS+=(floor)
# the steps the floor takes part in
declare -A floorsteps=([step_put1]=1 [step_put1000]=1 [step_txn100]=1 [step_rangel]=1 [step_ranges]=1)
# use SRV -> PIDS, EPS, EP and DIRS of that server
use() {
	read -ra PIDS <<<"${SPIDS[$1]}"
	read -ra EPS <<<"${SEPS[$1]}"
	read -ra DIRS <<<"${SDIRS[$1]}"
	EP=$(IFS=,; echo "${EPS[*]}")
}

# allticks -> CPU clock ticks used by every member of both servers
allticks() {
	local srv pid
	for srv in "${SRVS[@]}"; do
		for pid in ${SPIDS[$srv]:-}; do cat "/proc/$pid/stat"; done
	done | awk '{t += $14 + $15} END {print t + 0}'
}

# settle: write back what the page cache holds dirty (both servers' WAL
# segments and db pages, which the kernel would otherwise write during the
# next measurement, competing with its fdatasyncs), then wait until the
# members of both servers use at most 2 ticks of CPU in a quarter second
# (8% of one CPU), for at most 5 s
settle() {
	local a b
	sync
	for _ in $(seq 1 20); do
		a=$(allticks); sleep 0.25; b=$(allticks)
		((b - a > 2)) || return 0
	done
}

# pass STEP PARITY: STEP SRV on each server in turn, etcd first when
# PARITY is even, strata first when it is odd (the floor, when it runs
# and takes STEP, last when PARITY is even and first when it is odd)
pass() {
	local order=(etcd strata) srv
	(($2 % 2)) && order=(strata etcd)
	if ((FLOOR)) && [[ -n ${floorsteps[$1]:-} ]]; then
		if (($2 % 2)); then order=(floor "${order[@]}"); else order+=(floor); fi
	fi
	for srv in "${order[@]}"; do
		settle
		use "$srv"
		"$1" "$srv"
	done
}

# both STEP: STEP on both servers, the order alternating from step to
# step and from round to round
step=0
both() {
	pass "$1" $((round + step))
	step=$((step + 1))
}

# sliced STEP: a throughput workload in SLICES passes, the order flipping
# from pass to pass (etcd, strata, strata, etcd, ...), so that the two
# servers' parts interleave within seconds: this machine's speed moves by
# a fifth from one run of a few seconds to the next (the same server, the
# same load), and a ratio of single runs moves with it. Each part adds to
# part[SRV.W] (slice); the parts are then combined into one measurement
# (req/s: all the requests over all the parts' time; CPU per request:
# the mean).
sliced() {
	local i key
	part=()
	for i in $(seq 1 "$SLICES"); do
		pass "$1" $((round + step + i))
	done
	step=$((step + 1))
	for key in "${!part[@]}"; do
		recordcpu "${key%%.*}" "${key#*.}" "$(awk 'NF == 4 && $1 > 0 {
			n++; t += 1 / $1; c += $2; m += $3; b += $4 }
			END { if (n) printf "%.4f %.1f %.1f %.2f\n", n / t, c / n, m / n, b / n; else print "0 0 0 0" }' <<<"${part[$key]}")"
	done
}

# slice SRV W TOTAL ARGS...: one part of workload W, TOTAL / SLICES
# requests of etcd's benchmark run with ARGS (cpubench)
slice() {
	local srv=$1 w=$2 n=$(($3 / SLICES))
	shift 3
	part[$srv.$w]+="$(cpubench "$n" "$@" --total="$n")"$'\n'
}

# record SRV W VALUE: one measurement of workload W
record() { results[$1.$2]+="$3 "; }
# recordcpu SRV W "req/s client-us members-us busy"
recordcpu() {
	record "$1" "$2" "${3%% *}"
	results[$1.cpu.$2]+="$(tr ' ' , <<<"${3#* }") "
}

# The steps. Each runs against the server whose members use set.
step_put1() {
	local srv=$1 lead f0 f1
	if [[ $srv == floor ]]; then
		part[$srv.1]+="$(put "$EP" 1 1 $((TOTAL1 / SLICES))) 0 0 0"$'\n'
		return
	fi
	lead=$(leader)
	f0=$(fsync)
	# one part: "req/s 0 0 0" (no CPU columns for this row)
	part[$srv.1]+="$(put "$lead" 1 1 $((TOTAL1 / SLICES))) 0 0 0"$'\n'
	f1=$(fsync)
	# the WAL fdatasyncs' total time and count during the parts
	fsyncs[$srv]=$(awk -v a="$f0" -v b="$f1" -v s="${fsyncs[$srv]:-0 0}" 'BEGIN {
		split(a, x, " "); split(b, y, " "); split(s, z, " "); print z[1] + y[1] - x[1], z[2] + y[2] - x[2] }')
}
# after the sliced 1-client puts: their mean WAL fdatasync, then the same
# client's round trip with no disk in it
step_rtt() {
	local srv=$1 lead fs r1 rt
	lead=$(leader)
	# mean WAL fdatasync during the 1-client parts, in microseconds
	fs=$(awk -v s="${fsyncs[$srv]:-0 0}" 'BEGIN {split(s, z, " "); print (z[2] > 0 ? z[1] / z[2] * 1e6 : 0)}')
	fsyncs[$srv]=
	record "$srv" fsync "$fs"
	r1=$(tr ' ' '\n' <<<"${results[$srv.1]}" | grep . | tail -1)
	# Serializable reads of one key from 1 client on the leader. A put
	# pays this round trip (gRPC on both sides, the client's and the
	# server's goroutine wake-ups) plus the fdatasync.
	"$CTL" --endpoints="$lead" put bench-range-key "$(head -c 256 /dev/zero | tr '\0' v)" >/dev/null
	rt=$(bench --endpoints="$lead" --conns=1 --clients=1 range bench-range-key --consistency=s --total="$TOTAL1")
	record "$srv" rtt "$(awk -v r="$rt" 'BEGIN {print (r > 0 ? 1e6 / r : 0)}')"
	roundline[$srv]=$(printf 'round %d %-6s  %s: %8.1f req/s (WAL fdatasync mean %4.0f us)' "$round" "$srv" "${label[1]}" "$r1" "$fs")
}
step_put1000() {
	local n=$PUT1000
	[[ $NODES == 1 ]] || n=$TOTAL1000
	slice "$1" 1000 "$n" --endpoints="$EP" --conns=100 --clients=1000 put --key-size=8 \
		--sequential-keys --val-size=256
}
step_txn100() {
	slice "$1" txn100 "$TXN100" --endpoints="$EP" --conns=10 --clients=100 txn-put --key-size=8 \
		--key-space-size=10000 --val-size=256
}
step_load() {
	load "$EP" a100/ 100
	load "$EP" b10k/ 10000
}
step_rangel() {
	slice "$1" rangel "$RANGE1000" --endpoints="$EP" --conns=100 --clients=1000 range bench-range-key \
		--consistency=l
}
step_ranges() {
	slice "$1" ranges "$RANGE1000" --endpoints="$EP" --conns=100 --clients=1000 range bench-range-key \
		--consistency=s
}
step_prefix100() {
	slice "$1" prefix100 "$PREFIX" --endpoints="$EP" --conns=10 --clients=100 range a100/ "$(prefix_end a100/)" \
		--consistency=l
}
step_prefix10k() {
	slice "$1" prefix10k "$PREFIX10K" --endpoints="$EP" --conns=10 --clients=100 range b10k/ "$(prefix_end b10k/)" \
		--consistency=l --limit=500
}
# the watch latency, then the RSS right after it and 5 s later (the same
# pause for both servers), then the sizes on disk
step_watch() {
	record "$1" watchp99 "$(p99 --endpoints="$EP" --conns=10 --clients=10 watch-latency --streams=10 \
		--watchers-per-stream=100 --put-rate="$WATCHRATE" --put-total="$WATCHPUTS" --val-size=256)"
	record "$1" rss "$(rss "${PIDS[0]}")"
	sleep 5
	record "$1" rss5 "$(rss "${PIDS[0]}")"
	record "$1" datadir "$(dusize "${DIRS[0]}")"
	dbsize[$1]=$(dusize "${DIRS[0]}/member/snap/db")
	record "$1" db "${dbsize[$1]}"
}
# etcd's benchmark writes random values, which no engine can compress;
# values shaped like real objects show what compression saves. Measured
# after the rows above, as growth.
step_pods() {
	"$LOADER" --endpoints "$EP" put --prefix pods/ --key-space-size "$PODPUTS" --sequential-keys \
		--total "$PODPUTS" --clients 50 --conns 5 --val-size 2048 --val-kind pod >/dev/null 2>&1
	record "$1" dbpod "$(awk -v a="$(dusize "${DIRS[0]}/member/snap/db")" -v b="${dbsize[$1]}" 'BEGIN {printf "%.1f", a - b}')"
}

# PARTS="N1 N2 ...": no comparison; one fresh strata cluster of NODES
# members takes linearizable 1-key ranges from 1000 clients on 100
# connections, one run of each size in turn, and each run's reads/s and
# CPU per read (the benchmark's, the members') are printed. A short run
# that costs more per read than a long one shows the run's start-up
# (process start, connections, ramp), which a workload's parts above
# must be long enough to make small (see TOTAL1000).
if [[ -n ${PARTS:-} ]]; then
	start strata "$STRATA"
	"$CTL" --endpoints="$EP" put bench-range-key v >/dev/null
	printf '%-10s %10s %15s %16s\n' requests reads/s "client us/read" "members us/read"
	for n in $PARTS; do
		read -r rps cl mb _ < <(cpubench "$n" --endpoints="$EP" --conns=100 --clients=1000 \
			range bench-range-key --consistency=l --total="$n")
		printf '%-10d %10.0f %15s %16s\n' "$n" "$rps" "$cl" "$mb"
	done
	exit 0
fi

declare -A results roundline dbsize part fsyncs
for round in $(seq 1 "$ROUNDS"); do
	step=0
	for srv in "${SRVS[@]}"; do
		bin=$ETCD; [[ $srv == strata ]] && bin=$STRATA
		if [[ $srv == floor ]]; then startfloor; else start "$srv" "$bin"; fi
		SPIDS[$srv]="${PIDS[*]}"; SEPS[$srv]="${EPS[*]}"; SDIRS[$srv]="${DIRS[*]}"
	done
	sliced step_put1
	both step_rtt
	sliced step_put1000
	if [[ $NODES == 1 ]]; then
		sliced step_txn100
		both step_load
		sliced step_rangel
		sliced step_ranges
		sliced step_prefix100
		sliced step_prefix10k
		both step_watch
		both step_pods
	else
		for srv in "${SRVS[@]}"; do
			use "$srv"
			"$CTL" --endpoints="$EP" put bench-range-key "$(head -c 256 /dev/zero | tr '\0' v)" >/dev/null
		done
		sliced step_rangel
	fi
	for srv in "${SRVS[@]}"; do
		use "$srv"
		stop
		SPIDS[$srv]=""
		line=${roundline[$srv]:-}
		if [[ $srv == floor ]]; then
			line=$(printf 'round %d %-6s  %s: %8.1f req/s' "$round" "$srv" "${label[1]}" \
				"$(tr ' ' '\n' <<<"${results[$srv.1]}" | grep . | tail -1)")
		fi
		for w in "${workloads[@]:1}"; do
			v=$(tr ' ' '\n' <<<"${results[$srv.$w]:-}" | grep . | tail -1 || true)
			[[ -n $v ]] || continue
			line+=$(printf '\n        %-38s %10.1f' "${label[$w]}" "$v")
		done
		echo "$line"
	done
done

echo
# The ratio reported is the median of the rounds' ratios. A round's two
# servers ran in interleaved parts within the same minutes, so its ratio
# is measured at one speed of this machine, which drifts up to 2x within
# minutes (bench/RESULTS.md); the ratio of the two servers' medians
# ("medians", also printed) may pair etcd's median round with
# strata's from another minute.
echo "median of $ROUNDS rounds, $NODES member(s) each, 256-byte values, same disk ($base):"
echo "ratio: strata's advantage (req/s: strata / etcd; latency and sizes: etcd / strata), so above 1.00x favours strata;"
echo "the median of the rounds' ratios; per round: the ratio of that round's two runs, and the spread (max - min) of those ratios;"
echo "medians: the ratio of the two servers' medians (the etcd and strata columns)"
printf '%-40s %10s %10s %8s %10s   %s\n' workload etcd strata ratio medians "per round (spread)"
declare -A paired
for w in "${workloads[@]}"; do
	e=$(tr ' ' '\n' <<<"${results[etcd.$w]}" | grep . | median)
	s=$(tr ' ' '\n' <<<"${results[strata.$w]}" | grep . | median)
	inv=${lower[$w]:-0}
	rounds=$(awk -v e="${results[etcd.$w]}" -v s="${results[strata.$w]}" -v inv="$inv" 'BEGIN {
		n = split(e, a, " "); split(s, b, " ")
		for (i = 1; i <= n; i++) print (inv ? (b[i] > 0 ? a[i] / b[i] : 0) : (a[i] > 0 ? b[i] / a[i] : 0)) }')
	per=$(awk '{out = out sprintf("%s%.2f", (NR > 1 ? " " : ""), $1); if (NR == 1 || $1 < lo) lo = $1; if ($1 > hi) hi = $1}
		END {printf "%s (%.2f)", out, hi - lo}' <<<"$rounds")
	ratio=$(median <<<"$rounds")
	paired[$w]=$ratio
	ofmed=$(awk -v a="$s" -v b="$e" -v inv="$inv" 'BEGIN {if (inv) print (a > 0 ? b / a : 0); else print (b > 0 ? a / b : 0)}')
	printf '%-40s %10.1f %10.1f %7.2fx %9.2fx   %s\n' "${label[$w]}" "$e" "$s" "$ratio" "$ofmed" "$per"
done

# Where the CPU went: client and server share this machine's CPUs, so
# when the run kept them busy, req/s is bounded by the CPU both sides
# spend per request, and the best ratio strata can show is etcd's sum
# over strata's ("CPU bound"). A measured ratio near the bound says that
# the rest is the client's share, not a wait in the server.
echo
echo "CPU per request in us (median of the rounds; client: etcd's benchmark process, members: all members summed; busy: share of all $NCPU CPUs used over the run; CPU bound and measured: the median of the rounds' own)"
printf '%-40s %8s %8s %8s %8s %6s %6s %9s %9s\n' workload "etcd cl" "etcd mb" "str cl" "str mb" "busy e" "busy s" "CPU bound" measured
for w in "${cpuworkloads[@]}"; do
	col() { tr ' ' '\n' <<<"${results[$1.cpu.$w]}" | grep . | cut -d, -f"$2" | median; }
	ec=$(col etcd 1); em=$(col etcd 2); eb=$(col etcd 3)
	sc=$(col strata 1); sm=$(col strata 2); sb=$(col strata 3)
	# The bound, as the ratio above, is the median of the rounds' own.
	bound=$(awk -v e="${results[etcd.cpu.$w]}" -v s="${results[strata.cpu.$w]}" 'BEGIN {
		n = split(e, a, " "); split(s, b, " ")
		for (i = 1; i <= n; i++) {split(a[i], x, ","); split(b[i], y, ","); print (y[1] + y[2] > 0 ? (x[1] + x[2]) / (y[1] + y[2]) : 0)} }' | median)
	awk -v l="${label[$w]}" -v ec="$ec" -v em="$em" -v sc="$sc" -v sm="$sm" -v eb="$eb" -v sb="$sb" -v bound="$bound" -v m="${paired[$w]}" 'BEGIN {
		printf "%-40s %8.1f %8.1f %8.1f %8.1f %6.2f %6.2f %8.2fx %8.2fx\n", l, ec, em, sc, sm, eb, sb, bound, m }'
done

# The 1-client ceiling: a put must wait for one WAL fdatasync before it is
# acknowledged (on a cluster, the leader's and a follower's, in parallel),
# so no server can beat 1e6 / (its mean fdatasync) req/s with one client.
# Printed so a missed 1-client target can be told apart from a slow disk.
e1=$(tr ' ' '\n' <<<"${results[etcd.1]}" | grep . | median)
s1=$(tr ' ' '\n' <<<"${results[strata.1]}" | grep . | median)
sf=$(tr ' ' '\n' <<<"${results[strata.fsync]}" | grep . | median)
ef=$(tr ' ' '\n' <<<"${results[etcd.fsync]}" | grep . | median)
echo
printf 'WAL fdatasync mean during the 1-client runs (median over members): etcd %.0f us, strata %.0f us\n' "$ef" "$sf"
awk -v e="$e1" -v s="$s1" -v f="$sf" 'BEGIN {if (f > 0) printf "1-client ceiling (1 / strata mean fdatasync): %.0f req/s = %.2fx etcd; etcd reaches %.0f%% of it, strata %.0f%%\n", 1e6/f, 1e6/f/e, 100*e*f/1e6, 100*s*f/1e6}'
# A put from one client also waits for the client's round trip, which
# no server-side change removes: the second ceiling adds it, each server's
# own (measured above, median of the rounds).
srt=$(tr ' ' '\n' <<<"${results[strata.rtt]}" | grep . | median)
ert=$(tr ' ' '\n' <<<"${results[etcd.rtt]}" | grep . | median)
printf '1-client round trip without the disk (serializable 1-key read, 1 client): etcd %.0f us, strata %.0f us\n' "$ert" "$srt"
awk -v e="$e1" -v s="$s1" -v sf="$sf" -v ef="$ef" -v sr="$srt" -v er="$ert" 'BEGIN {
	if (sf + sr > 0 && ef + er > 0) {
		sc = 1e6 / (sf + sr); ec = 1e6 / (ef + er)
		printf "1-client ceiling with the round trip (1 / (mean fdatasync + round trip)): strata %.0f req/s = %.2fx etcd; strata reaches %.0f%% of its own, etcd %.0f%% of its own (%.0f req/s)\n", sc, sc / e, 100 * s / sc, 100 * e / ec, ec
	} }'

# The floor (FLOOR=1): what a server on gRPC-go reaches against etcd
# with nothing behind its API but an fdatasync for each batch of puts.
# "floor/etcd" is the best ratio any change to strata's own code could
# show in this run; "strata/floor" is how much of that strata reaches;
# "own" is the CPU per request strata's members spend beyond the floor's
# (its raft, WAL, index, page store, metrics, auth and their garbage).
if ((FLOOR)); then
	echo
	echo "the floor (stratabench floor-server: a member's gRPC configuration, puts group-committed to one file, nothing else), median of the rounds' own ratios:"
	printf '%-40s %10s %11s %12s %13s %9s %9s %7s\n' workload "floor" "floor/etcd" "strata/etcd" "strata/floor" "floor mb" "str mb" own
	for w in 1 1000 txn100 rangel ranges; do
		f=$(tr ' ' '\n' <<<"${results[floor.$w]:-}" | { grep . || true; } | median)
		[[ -n $f ]] || continue
		fe=$(awk -v e="${results[etcd.$w]}" -v f="${results[floor.$w]}" 'BEGIN {
			n = split(e, a, " "); split(f, b, " "); for (i = 1; i <= n; i++) print (a[i] > 0 ? b[i] / a[i] : 0) }' | median)
		sf=$(awk -v s="${results[strata.$w]}" -v f="${results[floor.$w]}" 'BEGIN {
			n = split(s, a, " "); split(f, b, " "); for (i = 1; i <= n; i++) print (b[i] > 0 ? a[i] / b[i] : 0) }' | median)
		fm=- sm=- own=-
		if [[ $w != 1 && -n ${results[floor.cpu.$w]:-} ]]; then
			fm=$(tr ' ' '\n' <<<"${results[floor.cpu.$w]}" | grep . | cut -d, -f2 | median)
			sm=$(tr ' ' '\n' <<<"${results[strata.cpu.$w]}" | grep . | cut -d, -f2 | median)
			own=$(awk -v a="$sm" -v b="$fm" 'BEGIN {printf "%.1f", a - b}')
		fi
		printf '%-40s %10.1f %10.2fx %11.2fx %12.2f %9s %9s %7s\n' "${label[$w]}" "$f" "$fe" "${paired[$w]}" "$sf" "$fm" "$sm" "$own"
	done
fi
