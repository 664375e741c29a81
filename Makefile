# Strata build, test and benchmark targets. Everything a fresh machine needs
# (Go modules, etcd/etcdctl for differential tests, fio) is fetched by the
# targets that need it, from the Go module proxy or Debian's packages.

GO       ?= go
BIN      := bin
DATA_DIR ?= default.strata
# Fuzz time per target inside `make test`; `make fuzz-long` runs longer.
FUZZTIME ?= 30s

.PHONY: all build run test unit fuzz fuzz-long bench vet fmt-check clean

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
FUZZ_TARGETS := wal:FuzzDecodeRecord

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		bash .ci/fuzz $$pkg $$fn $(FUZZTIME) || exit 1; \
	done

fuzz-long:
	$(MAKE) fuzz FUZZTIME=10m

test: fmt-check vet build unit fuzz

bench:
	$(GO) test -run '^$$' -bench 'BenchmarkAppendSync|BenchmarkRawFdatasync' -benchtime 2s ./wal/

clean:
	rm -rf $(BIN)
