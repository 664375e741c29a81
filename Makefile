SHELL := /bin/bash
# Strata build, test and benchmark targets. Everything a fresh machine needs
# (Go modules, etcd/etcdctl for differential tests, fio) is fetched by the
# targets that need it, from the Go module proxy or Debian's packages.

GO       ?= go
BIN      := bin
DATA_DIR ?= default.strata
# Fuzz time per target inside `make test`; `make fuzz-long` runs longer.
FUZZTIME ?= 30s

.PHONY: all build run test unit fuzz fuzz-long bench bench-engine bench-compare vet fmt-check clean e2e e2e-bin disk-check disk-check-short fulldisk fulldisk-long robustness

# Differential scenarios (e2e/scenarios_*_test.go) that strata must pass
# against real etcd 3.7.
E2E_SCENARIOS ?= kv|watch|lease|concurrency|maintenance|cluster|http|quota|auth|tls

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

unit:
	$(GO) test -count=1 -timeout 15m ./...

# Short fuzz runs of every fuzz target (package:Func); each runs FUZZTIME.
FUZZ_TARGETS := wal:FuzzDecodeRecord lease:FuzzRecordDecode

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		bash .ci/fuzz $$pkg $$fn $(FUZZTIME) || exit 1; \
	done

fuzz-long:
	$(MAKE) fuzz FUZZTIME=10m

test: fmt-check vet build disk-check-short unit e2e fuzz

# fio's etcd-wal.fio and stratabench disk on the same directory, side by
# side; fails if their sequential sync IOPS differ by more than 25%.
# Installs fio from Debian's packages when missing.
disk-check: build
	@if [ -z "$(DIR)" ]; then echo "usage: make disk-check DIR=/a/directory/on/the/disk"; exit 2; fi
	bash bench/disk-check.sh "$(DIR)"

# The same, 2 seconds per run (4 runs, 8 s; up to 3 attempts on disagreement), on a directory of this checkout's
# disk (not /tmp, which may be tmpfs, where fdatasync does nothing).
DISK_CHECK_DIR ?= $(CURDIR)/tmp/disk-check
disk-check-short: build
	SHORT=1 ATTEMPTS=$${ATTEMPTS:-3} bash bench/disk-check.sh "$(DISK_CHECK_DIR)"
	@rmdir "$(DISK_CHECK_DIR)" 2>/dev/null || true

# Builds etcd, etcdctl, etcdutl 3.7.3 and etcd's benchmark tool from the Go
# module proxy into $(go env GOCACHE)/../strata-e2e-bin (once).
e2e-bin:
	bash e2e/build-etcd.sh

# Real etcd and bin/strata get the same etcdctl commands; outputs must match.
e2e: build e2e-bin
	cd e2e && go vet ./... && \
		STRATA_E2E_TARGET=../bin/strata go test -count=1 -timeout 15m -skip 'TestDiff|TestFullDisk' ./...
	$(FULLDISK_RUN)
	cd e2e && STRATA_E2E_TARGET=../bin/strata go test -count=1 -timeout 15m -run 'TestDiff/^($(E2E_SCENARIOS))$$' -v . | grep -E '^(=== RUN|--- |    --- |PASS|FAIL|ok)|steps,'; test $${PIPESTATUS[0]} -eq 0

# The full-disk tests (issue 17 items 3 and 5): bin/strata on small tmpfs
# file systems the test mounts, one for --wal-dir and one for the data dir;
# a ballast file fills each in turn and is deleted to give space back. They
# need root (they skip with the reason otherwise). `make e2e` (so `make
# test`) runs each case once (about a minute); `make fulldisk-long` runs
# more fill/free cycles and a minute of writers against the full data disk.
# Both print what the client saw, RSS before and after, and how many
# acknowledged writes were read back (FULL-DISK lines).
FULLDISK_RUN = cd e2e && STRATA_E2E_TARGET=../bin/strata go test -count=1 -timeout 30m -run 'TestFullDisk' -v . | \
	grep -E '^(--- |PASS|FAIL|ok)|FULL-DISK|SKIP|fulldisk_test'; test $${PIPESTATUS[0]} -eq 0

fulldisk: build
	$(FULLDISK_RUN)

fulldisk-long: build
	export STRATA_FULLDISK=long; $(FULLDISK_RUN)

# Long robustness runs, outside `make test`.
robustness: fulldisk-long

bench:
	$(GO) test -run '^$$' -bench 'BenchmarkAppendSync|BenchmarkRawFdatasync' -benchtime 2s ./wal/

# Side-by-side page store benchmark (pagestore vs bbolt); builds the 1 GB
# and 8 GB files once under STRATA_BENCH_CACHE.
bench-engine:
	STRATA_BENCH_CACHE=$${STRATA_BENCH_CACHE:-$$($(GO) env GOCACHE)/strata-bench-cache} \
	$(GO) test ./bench/engine -run '^$$' -bench BenchmarkEngine -benchtime 1x -timeout 120m

bench-compare: build e2e-bin
	bash bench/compare.sh

clean:
	rm -rf $(BIN)
