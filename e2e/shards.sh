#!/usr/bin/env bash
# Runs the e2e package's tests in E2E_SHARDS (default 2) `go test`
# processes at once, each through testguard, and fails if any shard does.
#
# Why: the e2e tests spend most of their time waiting (for fdatasyncs,
# elections, health intervals, the etcd processes they start); one
# process at a time kept the machine's two CPUs about a third busy and
# took about 12 minutes of make test's 20. The tests share nothing a
# second process could disturb: ports come from internal/testport (locked
# across processes), data dirs from t.TempDir, and the reference binaries
# are built before (make e2e-bin), so the shards only read them.
#
# Tests go to shards longest first, each to the shard with the least work
# so far, by the durations below (seconds, from a make test run; a test
# not listed counts 5). A test's place in the list changes only how well
# the shards balance, never whether it runs: the shards' -run lists are
# made from `go test -list`, so every test of the package is in exactly
# one of them.
#
# Usage: e2e/shards.sh GUARD [GUARD ARGS...]   (from the Makefile)
set -euo pipefail
cd "$(dirname "$0")"
shards=${E2E_SHARDS:-2}
go=${GO:-go}

declare -A weight=(
	[TestProxyDiff]=85 [TestKillLoop]=71 [TestDiff]=90 [TestRollingMigration]=61
	[TestClusterDiffQuorumLoss]=52 [TestClusterDiffMixed]=32 [TestScaleUnderLoad]=23
	[TestRestoreThenGrow]=21 [TestPartitionOneWay]=21 [TestPartitionFlapping]=21
	[TestReconfigDiff]=19 [TestClusterDiff]=18 [TestMixedAuthLeaseExpiry]=17
	[TestStatefulSetScale]=16 [TestLinearizability]=16 [TestMixedConfChangeRefusals]=14
	[TestGateway]=13 [TestSlowFollowerDoesNotStallLeader]=12 [TestMixedDivergenceCaught]=12
	[TestMixedClusterVersionAndDowngrade]=12 [TestPartitionDelayDrop]=11 [TestDowngradeMixed]=80 [TestDowngradeClusterDiff]=13
	[TestPartitionIsolatedLeader]=10 [TestFullDiskWAL]=10 [TestRangeStreamMemory]=13 [TestBenchScale]=110
)

# The package's own helper packages first: quick, and -run lists below
# name only the e2e package's tests.
set -o pipefail
$go test -json -count=1 -timeout 5m ./harness ./lin | "$@"

mapfile -t tests < <($go test -list '^Test' . | grep '^Test')
if ((${#tests[@]} == 0)); then
	echo "shards.sh: go test -list found no tests in the e2e package" >&2
	exit 1
fi
# Longest first.
mapfile -t tests < <(for t in "${tests[@]}"; do echo "${weight[$t]:-5} $t"; done | sort -k1,1nr -k2 | cut -d' ' -f2)
load=() names=()
for ((i = 0; i < shards; i++)); do load[i]=0 names[i]=; done
for t in "${tests[@]}"; do
	best=0
	for ((i = 1; i < shards; i++)); do
		((load[i] < load[best])) && best=$i
	done
	load[best]=$((load[best] + ${weight[$t]:-5}))
	names[best]+="${names[best]:+|}$t"
done

pids=()
for ((i = 0; i < shards; i++)); do
	[[ -n ${names[i]} ]] || continue
	echo "shard $((i + 1)) of $shards (about ${load[i]} s): ${names[i]//|/ }"
	(
		set -o pipefail
		STRATA_E2E_NOBUILD=1 $go test -json -count=1 -timeout 25m -run "^(${names[i]})\$" . | "$@" |
			sed -u "s/^/[shard $((i + 1))] /"
	) &
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=1
done
exit $rc
