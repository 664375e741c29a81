SHELL := /bin/bash
# Strata build, test and benchmark targets. Everything a fresh machine needs
# (Go modules, etcd/etcdctl for differential tests, fio) is fetched by the
# targets that need it, from the Go module proxy or Debian's packages.

GO       ?= go
BIN      := bin
DATA_DIR ?= default.strata
# Fuzz time per target inside `make test`; `make fuzz-long` runs longer.
FUZZTIME ?= 10s

.PHONY: all build run test unit fuzz fuzz-long bench bench-engine bench-readpath bench-compare bench-stratabench bench-scale vet fmt-check clean e2e e2e-bin disk-check disk-check-short

.PHONY: etcd-src testguard testguard-test fulldisk fulldisk-long robustness slow-follower etcd-e2e etcd-e2e-short linearizability linearizability-long scale-long powerloss-long proxy-diff k8s-chart k8s monitoring migrate-long range-stream-memory lease-checkpoint-long

# make e2e runs every differential scenario (e2e/scenarios_*_test.go)
# against real etcd 3.7; E2E_SCENARIOS=kv|watch runs only TestDiff's kv and
# watch scenarios (by hand, while debugging one).
E2E_SCENARIOS ?=

all: build

build:
	@mkdir -p $(BIN)
	@for c in strata stratautl stratabench; do \
		if [ -d cmd/$$c ]; then $(GO) build -o $(BIN)/$$c ./cmd/$$c || exit 1; fi; \
	done

# Starts one member on $(DATA_DIR), serving clients on 127.0.0.1:2379 like etcd.
run: build
	@if [ ! -x $(BIN)/strata ]; then echo "strata server not built yet (cmd/strata missing)"; exit 1; fi
	$(BIN)/strata --name default --data-dir $(DATA_DIR)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every test runs under bin/testguard (.ci/testguard): a failure, a skip
# not in .ci/skip-allowlist, or a run where nothing passed fails the target.
GUARD = $(CURDIR)/$(BIN)/testguard -allow $(CURDIR)/.ci/skip-allowlist

unit: etcd-src testguard
	set -o pipefail; $(GO) test -json -count=1 -timeout 15m ./... | $(GUARD)

# etcd's server sources in the module cache, read by server/config's
# TestFlagListMatchesEtcdSource: 3.7.3's flags, and the 3.6 and 3.5
# releases' --experimental-* spellings. From the Go module proxy; run
# outside this module, so go.mod and go.sum stay as they are.
ETCD_SRC := go.etcd.io/etcd/server/v3@v3.7.3 go.etcd.io/etcd/server/v3@v3.6.16 go.etcd.io/etcd/server/v3@v3.5.35
etcd-src:
	@tmp=$$(mktemp -d) && cd "$$tmp" && GOWORK=off $(GO) mod download $(ETCD_SRC) && rmdir "$$tmp"

testguard:
	@mkdir -p $(BIN)
	cd .ci/testguard && $(GO) build -o $(CURDIR)/$(BIN)/testguard .

# The guard's own tests: it must catch a skip, a failure, a build failure
# and an empty run (real go test runs on a throwaway module).
testguard-test:
	cd .ci/testguard && $(GO) vet . && $(GO) test -count=1 .

# Short fuzz runs of every fuzz target (package:Func); each runs FUZZTIME.
FUZZ_TARGETS := wal:FuzzDecodeRecord lease:FuzzRecordDecode raft/transport:FuzzMessageStream raft/transport:FuzzMsgAppV2Stream server:FuzzClientRPC server:FuzzDecodeFast server:FuzzPutProposal \
	pagestore:FuzzOpenDamagedFile etcdsnap:FuzzToPageStore mvcc:FuzzOpenStore server/config:FuzzParse wal:FuzzOpenDir

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		bash .ci/fuzz $$pkg $$fn $(FUZZTIME) || exit 1; \
	done

fuzz-long:
	$(MAKE) fuzz FUZZTIME=10m

test: fmt-check vet build testguard-test disk-check-short unit e2e etcd-e2e-short fuzz

# fio's etcd-wal.fio and stratabench disk on the same directory, side by
# side: ROUNDS (default 5) interleaved runs of each, compared by their
# medians; the verdict names each tool's run-to-run spread. Fails unless
# their sequential sync IOPS agree within ±25% (a disk too noisy to tell
# says so). Not in make test: on a shared disk it fails on noise.
# Installs fio from Debian's packages when missing.
disk-check: build
	@if [ -z "$(DIR)" ]; then echo "usage: make disk-check DIR=/a/directory/on/the/disk"; exit 2; fi
	bash bench/disk-check.sh "$(DIR)"

# make test's part: each tool once, 1 s, on a directory of this checkout's
# disk (not /tmp, which may be tmpfs); checks only what holds on any disk:
# both run, their outputs parse, same block size, every figure positive
# and in its unit. No speeds are compared.
DISK_CHECK_DIR ?= $(CURDIR)/tmp/disk-check
disk-check-short: build
	CHECK=1 bash bench/disk-check.sh "$(DISK_CHECK_DIR)"
	@rmdir "$(DISK_CHECK_DIR)" 2>/dev/null || true

# Builds etcd, etcdctl, etcdutl 3.7.3 and etcd's benchmark tool from the Go
# module proxy into $(go env GOCACHE)/../strata-e2e-bin (once).
e2e-bin:
	bash e2e/build-etcd.sh

# Real etcd and bin/strata get the same etcdctl commands; outputs must match.
# Progress: each test's start and result, each scenario's step count, the
# full-disk tests' figures (FULL-DISK lines), the partition tests' counts
# (PARTITION lines) and the linearizability counts (LIN lines; the short
# mode, 2 histories × 300 operations). The tests run in E2E_SHARDS
# (default 2) processes at once (e2e/shards.sh says why and how);
# E2E_SCENARIOS=kv|watch runs only those scenarios of TestDiff.
E2E_SHOW = '^(=== RUN|--- |    --- )|steps,|FULL-DISK|SLOW-FOLLOWER|PARTITION |^LIN |^WATCH |SRV: |GATEWAY |GRPC-PROXY: |PROXY-DIFF |MIXIN: |DASHBOARD: |BACKUP: |^SCALE|RESTORE-GROW|STATEFULSET: |MIXED: |^MIGRATE|RANGESTREAM-MEMORY|: SCALE (\| |table)'
e2e: build e2e-bin testguard
ifneq ($(E2E_SCENARIOS),)
	cd e2e && $(GO) vet ./... && set -o pipefail && \
		STRATA_E2E_TARGET=../bin/strata $(GO) test -json -count=1 -timeout 25m -run 'TestDiff/^($(E2E_SCENARIOS))$$' . | \
		$(GUARD) -show $(E2E_SHOW)
else
	cd e2e && $(GO) vet ./... && \
		STRATA_E2E_TARGET=$(CURDIR)/bin/strata GO=$(GO) bash shards.sh $(GUARD) -show $(E2E_SHOW)
endif

# The full-disk tests: bin/strata on small
# tmpfs file systems the test mounts, one for --wal-dir and one for the
# data dir; a ballast file fills each in turn and is deleted to give space
# back. They need root to mount (as a fresh CI machine is); without it they
# report why, and the skip guard fails the run. `make e2e` (so `make test`)
# runs each case once (about a minute); `make fulldisk-long` runs more
# fill/free cycles and a minute of writers against the full data disk.
# Both print what the client saw, RSS before and after, and how many
# acknowledged writes were read back (FULL-DISK lines).
FULLDISK_RUN = cd e2e && set -o pipefail && STRATA_E2E_TARGET=../bin/strata $(GO) test -json -count=1 -timeout 30m -run 'TestFullDisk' . | \
	$(GUARD) -show '^(--- |    --- )|FULL-DISK'

fulldisk: build e2e-bin testguard
	$(FULLDISK_RUN)

fulldisk-long: build e2e-bin testguard
	export STRATA_FULLDISK=long; $(FULLDISK_RUN)

# etcd 3.7.3's own end-to-end tests (go.etcd.io/etcd/tests/v3, package e2e)
# with bin/strata as etcd and etcd's etcdctl/etcdutl, one test per process,
# from conformance/etcd-e2e.list; prints a table and fails when a must-pass
# test fails. Not in make test (about an hour); see conformance/README.md.
# TARGET=etcd runs the list against real etcd 3.7.3; RUN=REGEXP selects
# tests, PARTS=must-pass,cluster|all more parts, TIMEOUT=5m the limit.
etcd-e2e: build e2e-bin
	bash conformance/etcd-e2e.sh

# make test's part: the runner's own tests, then the short subset of the
# must-pass part (a few fast tests, marked short in the list), which also
# checks that the list classifies every test of the binary.
etcd-e2e-short: build e2e-bin testguard
	cd conformance && $(GO) vet . && set -o pipefail && $(GO) test -json -count=1 . | $(GUARD)
	SHORT=1 bash conformance/etcd-e2e.sh

# A follower SIGSTOPped for 30 s under 100 writers: the
# cluster keeps at least 80% of its throughput, the leader's RSS stays
# bounded and the follower catches up. make e2e runs a short mode that
# checks the data and prints the figures without judging them.
slow-follower: build e2e-bin testguard
	cd e2e && set -o pipefail && STRATA_SLOWFOLLOWER=long STRATA_E2E_TARGET=../bin/strata $(GO) test -json -count=1 -timeout 10m -run 'TestSlowFollowerDoesNotStallLeader' . | \
		$(GUARD) -show '^(--- |    --- )|SLOW-FOLLOWER'

# Linearizability on 3 members: porcupine histories of get,
# put, delete and txn through clientv3 on every member while the leader is
# SIGKILLed, a member SIGSTOPped, the leader isolated and one direction
# between two members cut by the peer proxies. Each history prints a LIN
# line (operations, in-doubt writes, faults, violations, lost writes,
# HashKV), the run a LIN total line. `make e2e` runs the short mode (2
# histories × 300 operations); `make linearizability-long` runs
# STRATA_LIN_HISTORIES (default 20) × STRATA_LIN_OPS (default 2000).
# STRATA_LIN_SEED replays a run; see e2e/README.md.
LIN_RUN = cd e2e && set -o pipefail && STRATA_E2E_TARGET=../bin/strata $(GO) test -json -count=1 -timeout 90m -run '^TestLinearizability$$' . | \
	$(GUARD) -show '^(--- |    --- )|^LIN |^WATCH '

linearizability: build e2e-bin testguard
	$(LIN_RUN)

linearizability-long: build e2e-bin testguard
	export STRATA_LIN_HISTORIES=$${STRATA_LIN_HISTORIES:-20} STRATA_LIN_OPS=$${STRATA_LIN_OPS:-2000}; $(LIN_RUN)

# Scaling under load: 1 → 3 → 5 → 3 members, one member added
# (learner, then promoted) or removed (the leader among them) at a time,
# while clientv3 writers and readers run on every member; porcupine over
# the whole history, every acknowledged write read back, HashKV equal at
# the end (a SCALE line). `make e2e` runs one cycle; this runs
# STRATA_SCALE=long (4 cycles of 3 → 5 → 3, 1,500 operations per step).
# STRATA_SCALE_SEED replays a run.
scale-long: build e2e-bin testguard
	cd e2e && set -o pipefail && STRATA_SCALE=long STRATA_E2E_TARGET=../bin/strata $(GO) test -json -count=1 -timeout 30m -run '^TestScaleUnderLoad$$' . | \
		$(GUARD) -show '^(--- |    --- )|^SCALE'

# The rolling migration: 3 etcd 3.7.3 members replaced
# by Strata members one at a time under load and back, 1000 acknowledged
# operations per membership (make test runs 100). MIGRATE lines give the
# counts: porcupine, lost writes, the watch's guarantees, HashKV at each
# change, the lease, the leaders.
migrate-long: build e2e-bin testguard
	cd e2e && set -o pipefail && STRATA_MIGRATE=long STRATA_E2E_TARGET=../bin/strata $(GO) test -json -count=1 -timeout 60m -run '^TestRollingMigration$$' . | \
		$(GUARD) -show '^(--- |    --- )|^MIGRATE'

# Power loss: the page store, the WAL and a whole member
# on vfs.PowerLossFS, the power cut at a random I/O operation and every
# unsynced byte and directory entry dropped, 200 cycles each, 100
# whole-cluster cuts of 3 members, 60 cuts of one member of a running
# cluster (the leader about a third of the time) and 60 cuts inside a
# compaction or an online defrag (make test runs 40, 8, 8 and 12).
# POWER-LOSS lines give the counts.
# Kubernetes (deploy/helm/strata): helm, kube-apiserver and kubectl built
# from the Go module proxy (once, into ~/.cache; e2e/kubebuild pins the
# Kubernetes release), then e2e TestHelmChart (lint, rendering),
# TestKubeAPIServer (a kube-apiserver on a Strata member accepts every
# rendered object on kubectl apply --dry-run=server; the scale-down hook
# reads the StatefulSet through the chart's RBAC) and TestContainerImage
# (skips where no container builder exists). Not in make test: the
# builds take about 8 minutes. make test runs TestStatefulSetScale, the
# scale logic that needs no Kubernetes.
HELM_VERSION ?= v3.22.0
HELM_BIN := $(HOME)/.cache/strata-tools/helm-$(HELM_VERSION)/helm
KUBE_VERSION := $(shell sed -n 's/^require k8s.io\/kubernetes //p' e2e/kubebuild/go.mod)
KUBE_DIR := $(HOME)/.cache/strata-tools/kubernetes-$(KUBE_VERSION)
k8s: build e2e-bin testguard
	@test -x $(HELM_BIN) || (mkdir -p $(dir $(HELM_BIN)) && GOBIN=$(dir $(HELM_BIN)) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION))
	@test -x $(KUBE_DIR)/kube-apiserver -a -x $(KUBE_DIR)/kubectl || (mkdir -p $(KUBE_DIR) && \
		cd e2e/kubebuild && $(GO) build -o $(KUBE_DIR)/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
	cd e2e && set -o pipefail && STRATA_HELM=$(HELM_BIN) STRATA_KUBE_BIN=$(KUBE_DIR) STRATA_E2E_TARGET=../bin/strata \
		$(GO) test -tags helm,kube -json -count=1 -timeout 10m -run '^(TestHelmChart|TestKubeAPIServer|TestContainerImage)$$' . | \
		$(GUARD) -show '^(--- |    --- )|HELM:|KUBE:|IMAGE:|SKIP'

# Monitoring with a real Prometheus: prometheus, promtool and jsonnet
# built from the Go module proxy (once, into ~/.cache), then e2e
# TestPrometheusMixin: the etcd mixin's alerts pass promtool check rules;
# a Prometheus scraping a 3-member cluster evaluates them all without
# error, etcdMembersDown, etcdNoLeader, etcdInsufficientMembers and
# etcdHighNumberOfLeaderChanges fire on kills and forced leader moves,
# and every query of the Grafana dashboard returns data. About 2 minutes
# after a build of about 8. Not in make test.
PROM_VERSION ?= v0.316.0
JSONNET_VERSION ?= v0.22.0
PROM_DIR := $(HOME)/.cache/strata-tools/prometheus-$(PROM_VERSION)
monitoring: build e2e-bin testguard
	@test -x $(PROM_DIR)/prometheus -a -x $(PROM_DIR)/promtool || (mkdir -p $(PROM_DIR) && GOBIN=$(PROM_DIR) $(GO) install \
		github.com/prometheus/prometheus/cmd/prometheus@$(PROM_VERSION) github.com/prometheus/prometheus/cmd/promtool@$(PROM_VERSION))
	@test -x $(PROM_DIR)/jsonnet || GOBIN=$(PROM_DIR) $(GO) install github.com/google/go-jsonnet/cmd/jsonnet@$(JSONNET_VERSION)
	cd e2e && set -o pipefail && STRATA_PROM_BIN=$(PROM_DIR) STRATA_E2E_TARGET=../bin/strata \
		$(GO) test -tags prometheus -json -count=1 -timeout 15m -run '^TestPrometheusMixin$$' . | \
		$(GUARD) -show '^(--- |    --- )|PROMETHEUS:'

# The chart's rendering checks alone (helm only).
k8s-chart: testguard
	@test -x $(HELM_BIN) || (mkdir -p $(dir $(HELM_BIN)) && GOBIN=$(dir $(HELM_BIN)) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION))
	cd e2e && set -o pipefail && STRATA_HELM=$(HELM_BIN) $(GO) test -tags helm -json -count=1 -run '^TestHelmChart$$' . | \
		$(GUARD) -show '^(--- |    --- )|HELM:'

# RangeStream's memory (e2e TestRangeStreamMemory) on 1 GiB of values
# read by a slow client, with etcd 3.7.3 measured beside it; make test
# streams 256 MiB from strata alone. RANGESTREAM-MEMORY lines give the
# live heap before and at its peak, and a unary range's for contrast.
range-stream-memory: build e2e-bin testguard
	cd e2e && set -o pipefail && STRATA_STREAM_MEMORY=long STRATA_E2E_TARGET=../bin/strata $(GO) test -json -count=1 -timeout 30m -run '^TestRangeStreamMemory$$' . | \
		$(GUARD) -show '^(--- |    --- )|RANGESTREAM-MEMORY'

# The LeaseCheckpoint gate beside etcd 3.7.3, on and off (e2e
# TestLeaseCheckpointGateDiff, build tag leasecheckpoint): a lease of an
# hour, a restart past etcd's fixed 5-minute checkpoint interval; about 6
# minutes, so not in make test (server TestClusterLeaseCheckpointGate
# shows the gate on and off there, with a 1 s interval).
lease-checkpoint-long: build e2e-bin testguard
	cd e2e && set -o pipefail && STRATA_E2E_TARGET=../bin/strata $(GO) test -tags leasecheckpoint -json -count=1 -timeout 20m -run '^TestLeaseCheckpointGateDiff$$' . | \
		$(GUARD) -show '^(--- |    --- )|LEASE-CHECKPOINT'

# The whole grpc-proxy differential (e2e TestProxyDiff): make test runs
# it without the auth scenario and two of the namespaced reruns.
proxy-diff: build e2e-bin testguard
	cd e2e && set -o pipefail && STRATA_PROXY_DIFF=all STRATA_E2E_TARGET=../bin/strata $(GO) test -json -count=1 -timeout 20m -run '^TestProxyDiff$$' . | \
		$(GUARD) -show '^(--- |    --- )|PROXY-DIFF'

powerloss-long: testguard
	set -o pipefail && STRATA_POWERLOSS_CYCLES=200 STRATA_POWERLOSS_CLUSTER_CYCLES=100 STRATA_POWERLOSS_MAINT_CYCLES=60 STRATA_POWERLOSS_MEMBER_CYCLES=60 STRATA_POWERLOSS_INSTALL_CYCLES=40 STRATA_SNAPSHOT_MATRIX_CASES=1000 $(GO) test -json -count=1 -timeout 30m -run '^(TestPowerLossCycles|TestClusterPowerLossCycles|TestPowerLossDuringMaintenance|TestMemberPowerLossInCluster|TestPowerLossDuringSnapshotInstall|TestReceivedSnapshotCorruptionMatrix)$$' ./pagestore/ ./wal/ ./server/ | \
		$(GUARD) -show '^(--- |    --- )|POWER-LOSS|CORRUPTION'

# Long robustness runs, outside `make test`.
robustness: fulldisk-long linearizability-long slow-follower scale-long powerloss-long migrate-long

bench:
	$(GO) test -run '^$$' -bench 'BenchmarkAppendSync|BenchmarkRawFdatasync' -benchtime 2s ./wal/

# The read path inside the process (no gRPC): Range with decoded values
# against RangeEncoded, each with the protobuf encoding gRPC does.
bench-readpath:
	$(GO) test -run '^$$' -bench BenchmarkRange -benchtime 2s ./bench/readpath/

# Side-by-side page store benchmark (pagestore vs bbolt); builds the 1 GB
# and 8 GB files once under STRATA_BENCH_CACHE.
bench-engine:
	STRATA_BENCH_CACHE=$${STRATA_BENCH_CACHE:-$$($(GO) env GOCACHE)/strata-bench-cache} \
	$(GO) test ./bench/engine -run '^$$' -bench BenchmarkEngine -benchtime 1x -timeout 120m

# strata against etcd 3.7.3 with etcd's benchmark tool: both servers run
# side by side through each round and every workload runs on one and then
# on the other. NODES=3 compares a 3-member strata cluster with a 3-member
# etcd 3.7.3 cluster (both on this machine's disk); ROUNDS, TOTAL1,
# TOTAL1000, RANGE1000 and the other counts at the top of bench/compare.sh
# tune it from the environment.
NODES ?= 1
bench-compare: build e2e-bin
	NODES=$(NODES) bash bench/compare.sh

# The scale benchmark (e2e TestBenchScale, bench/SCALE.md): the same
# Kubernetes-shaped data set of SCALE_MB MiB (default 10 GiB) loaded into
# etcd 3.7.3 and into bin/strata one after the other, then the same rows
# on each (load, footprint, cold restarts, compaction and defrag under
# puts, unary and streamed lists, a paginated walk, count-only and
# keys-only, memory, a 4th member joining a loaded 3-member cluster,
# 10,000 watchers), printed as one table of both figures, their ratio
# and the goal, and written as markdown to STRATA_SCALE_OUT. Progress
# lines (SCALE ...) while it runs. The data dirs go under
# STRATA_SCALE_DIR (default tmp/bench-scale in this checkout, not /tmp,
# which may be tmpfs) and are removed as each phase ends.
# STRATA_SCALE_ROWS=3,7 runs some rows, STRATA_SCALE_CLUSTER=0 skips the
# cluster row, STRATA_SCALE_DATA_SEED replays a data set. make test runs
# the short mode (64 MiB), which never fails on a goal.
SCALE_MB ?= 10240
STRATA_SCALE_OUT ?= tmp/bench-scale-$(SCALE_MB)MB.md
STRATA_SCALE_DIR ?= tmp/bench-scale
bench-scale: build e2e-bin
	@mkdir -p $(abspath $(STRATA_SCALE_DIR))
	cd e2e && STRATA_SCALE_MB=$(SCALE_MB) STRATA_SCALE_CMD='make bench-scale SCALE_MB=$(SCALE_MB)' \
		STRATA_SCALE_OUT=$(abspath $(STRATA_SCALE_OUT)) STRATA_SCALE_DIR=$(abspath $(STRATA_SCALE_DIR)) STRATA_E2E_TARGET=$(CURDIR)/bin/strata \
		$(GO) test -count=1 -timeout 600m -run '^TestBenchScale$$' -v .

# stratabench and etcd's benchmark tool against one strata server, req/s
# side by side (a timing ratio, so a benchmark and not part of make test).
bench-stratabench: build e2e-bin
	cd e2e && STRATA_E2E_TARGET=../bin/strata $(GO) test -count=1 -run '^$$' \
		-bench BenchmarkStratabenchAgreesWithEtcdBenchmark -benchtime 1x -timeout 30m -v .

clean:
	rm -rf $(BIN)
