#!/usr/bin/env bash
# bench/compare.sh: strata against etcd 3.7 on the same disk with etcd's
# own load generator (go.etcd.io/etcd/v3/tools/benchmark, v3.6.8), in one
# run. Both servers get identical flags and fresh data dirs under
# $STRATA_BENCH_DIR (default: a temp dir on the disk of /tmp). Each
# workload runs ROUNDS times per server, alternating etcd and strata so
# background noise hits both, and the median req/s is reported.
#
# NODES=1 (default): one member; puts from 1 client and from 100 clients
# on 10 connections.
# NODES=3: a 3-member cluster of each, all members on this machine and
# disk: puts from 1 client (to the leader), puts from 1000 clients on 100
# connections and linearizable ranges from 1000 clients on 100
# connections (both spread over every member, as etcd's benchmark does
# with several endpoints).
#
#   make bench-compare                 # builds what it needs, then runs
#   make bench-compare NODES=3
#   ROUNDS=5 TOTAL1=5000 bash bench/compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-1}
ROUNDS=${ROUNDS:-3}
TOTAL1=${TOTAL1:-3000}        # puts for the 1-client workload
TOTAL100=${TOTAL100:-30000}   # puts for the 100-client workload (NODES=1)
TOTAL1000=${TOTAL1000:-50000} # requests for each 1000-client workload (NODES=3)
[[ $NODES == 1 || $NODES == 3 ]] || { echo "NODES must be 1 or 3" >&2; exit 2; }
BINDIR=$(bash e2e/build-etcd.sh | tail -1)
ETCD=$BINDIR/etcd
CTL=$BINDIR/etcdctl
BENCH=$BINDIR/benchmark
STRATA=$PWD/bin/strata
[[ -x $STRATA ]] || { echo "bin/strata missing: run make build" >&2; exit 1; }
base=${STRATA_BENCH_DIR:-$(mktemp -d)}
mkdir -p "$base"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start NAME BIN -> sets PIDS (one per member), EPS (client host:port per
# member, in member order) and EP (all of them, comma-separated)
start() {
	local name=$1 bin=$2 i initial="" tag=$RANDOM
	local -a cps pps
	PIDS=(); EPS=()
	for i in $(seq 1 "$NODES"); do
		cps[i]=$(port); pps[i]=$(port)
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
	done
	EP=$(IFS=,; echo "${EPS[*]}")
	for _ in $(seq 1 300); do
		if "$CTL" --endpoints="$EP" endpoint health --cluster >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	echo "$name did not start" >&2; cat "$base/$name"*".$tag.log" >&2; exit 1
}

stop() { kill "${PIDS[@]}" 2>/dev/null; wait "${PIDS[@]}" 2>/dev/null || true; }

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

# rangel EP CONNS CLIENTS TOTAL -> prints req/s of linearizable ranges of
# one existing key
rangel() {
	"$CTL" --endpoints="$1" put bench-range-key "$(head -c 256 /dev/zero | tr '\0' v)" >/dev/null
	"$BENCH" --endpoints="$1" --conns="$2" --clients="$3" range bench-range-key --consistency=l \
		--total="$4" 2>/dev/null | awk '/Requests\/sec/ {print $2}'
}

# fsync -> "sum count" of the WAL fdatasync histogram summed over the
# members (etcd and strata export the same metric)
fsync() {
	local ep
	for ep in "${EPS[@]}"; do curl -s "http://$ep/metrics"; done |
		awk '/^etcd_disk_wal_fsync_duration_seconds_sum/ {s+=$2} /^etcd_disk_wal_fsync_duration_seconds_count/ {c+=$2} END {print s+0, c+0}'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

if [[ $NODES == 1 ]]; then
	workloads=(1 100)
	declare -A label=([1]="1 client" [100]="100 clients, 10 conns")
else
	workloads=(1 1000 rangel)
	declare -A label=([1]="put, 1 client (leader)" [1000]="put, 1000 clients/100 conns" [rangel]="range -l, 1000 clients/100 conns")
fi

declare -A results
for round in $(seq 1 "$ROUNDS"); do
	for srv in etcd strata; do
		bin=$ETCD; [[ $srv == strata ]] && bin=$STRATA
		start "$srv" "$bin"
		lead=$(leader)
		f0=$(fsync)
		r1=$(put "$lead" 1 1 "$TOTAL1")
		f1=$(fsync)
		# mean WAL fdatasync during the 1-client run, in microseconds
		fs=$(awk -v a="$f0" -v b="$f1" 'BEGIN {split(a,x," "); split(b,y," "); n=y[2]-x[2]; print (n>0 ? (y[1]-x[1])/n*1e6 : 0)}')
		results[$srv.fsync]+="$fs "
		results[$srv.1]+="$r1 "
		line=$(printf 'round %d %-6s  %s: %8.1f req/s (WAL fdatasync mean %4.0f us)' "$round" "$srv" "${label[1]}" "$r1" "$fs")
		if [[ $NODES == 1 ]]; then
			r=$(put "$EP" 10 100 "$TOTAL100")
			results[$srv.100]+="$r "
			line+=$(printf '   %s: %8.1f req/s' "${label[100]}" "$r")
		else
			r=$(put "$EP" 100 1000 "$TOTAL1000")
			results[$srv.1000]+="$r "
			line+=$(printf '   %s: %8.1f' "${label[1000]}" "$r")
			r=$(rangel "$EP" 100 1000 "$TOTAL1000")
			results[$srv.rangel]+="$r "
			line+=$(printf '   %s: %8.1f' "${label[rangel]}" "$r")
		fi
		stop
		echo "$line"
	done
done

echo
echo "median of $ROUNDS rounds, $NODES member(s) each, 256-byte values, same disk ($base):"
printf '%-34s %12s %12s %8s\n' workload etcd strata ratio
for w in "${workloads[@]}"; do
	e=$(tr ' ' '\n' <<<"${results[etcd.$w]}" | grep . | median)
	s=$(tr ' ' '\n' <<<"${results[strata.$w]}" | grep . | median)
	printf '%-34s %12.1f %12.1f %7.2fx\n' "${label[$w]}" "$e" "$s" "$(awk -v a="$s" -v b="$e" 'BEGIN {print a/b}')"
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
