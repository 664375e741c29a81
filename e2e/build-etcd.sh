#!/usr/bin/env bash
# build-etcd.sh builds the reference binaries the end-to-end tests run
# against, from the Go module proxy, into a cache directory:
#
#   etcd       go.etcd.io/etcd/server/v3   v3.7.3
#   etcdctl    go.etcd.io/etcd/etcdctl/v3  v3.7.3
#   etcdutl    go.etcd.io/etcd/etcdutl/v3  v3.7.3
#   benchmark  go.etcd.io/etcd/v3/tools/benchmark (module go.etcd.io/etcd/v3 v3.6.8)
#   etcd-3.6, etcdutl-3.6   the last release before 3.7 (v3.6.16), for the
#              downgrade tests (etcd's etcd-last-release)
#
# `go install pkg@version` refuses modules whose go.mod has replace
# directives (etcd's do), so each group is built from a throwaway module in a
# temp dir that requires the pinned versions; its go.sum comes from
# `go mod tidy` against the proxy. Nothing from etcd is written into the
# repository.
#
# The script is idempotent: a binary is rebuilt only when it is missing or
# `go version -m` shows a different module version inside it.
#
# Usage: e2e/build-etcd.sh            build what is missing, print the dir
#        STRATA_E2E_BIN=DIR e2e/build-etcd.sh
#        e2e/build-etcd.sh -f         rebuild everything
#
# The output directory defaults to $(go env GOCACHE)/../strata-e2e-bin so that
# every worktree on a machine shares one build.
set -euo pipefail

ETCD_VERSION=v3.7.3
BENCH_MODULE_VERSION=v3.6.8
LAST_RELEASE=v3.6.16

force=0
if [[ "${1:-}" == "-f" ]]; then force=1; fi

GO=${GO:-go}
if [[ -z "${STRATA_E2E_BIN:-}" ]]; then
	STRATA_E2E_BIN="$(dirname "$($GO env GOCACHE)")/strata-e2e-bin"
fi
mkdir -p "$STRATA_E2E_BIN"
out=$(cd "$STRATA_E2E_BIN" && pwd)

# Throwaway build modules, removed on any exit.
cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT

# Serialize concurrent builds (several worktrees share the directory).
exec 9>"$out/.lock"
flock 9

# has_version BIN MODULE VERSION: true when BIN embeds MODULE at VERSION.
has_version() {
	[[ -x "$1" ]] || return 1
	$GO version -m "$1" 2>/dev/null | awk -v m="$2" -v v="$3" \
		'($1=="dep" || $1=="mod") && $2==m && $3==v {found=1} END {exit !found}'
}

# build_group NAME "module@version ..." "binary=module|subpath|version ..."
build_group() {
	local name=$1 requires=$2 targets=$3
	local need=0 t bin pkg mod ver
	for t in $targets; do
		bin=${t%%=*}
		pkg=${t#*=}
		mod=${pkg%%|*}
		ver=${pkg##*|}
		if ((force)) || ! has_version "$out/$bin" "$mod" "$ver"; then need=1; fi
	done
	if ((need == 0)); then
		echo "build-etcd: $name binaries up to date in $out" >&2
		return 0
	fi
	local tmp
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-e2e-build.XXXXXX")
	cleanup+=("$tmp")
	{
		echo "module strata.local/e2e-build/$name"
		echo
		echo "go 1.24"
		echo
		for r in $requires; do echo "require ${r%@*} ${r#*@}"; done
	} >"$tmp/go.mod"
	# tool directives keep `go mod tidy` from dropping the requirements.
	for t in $targets; do
		local path=${t#*=}
		path=${path%%|*}
		local rel=${t#*=}
		rel=${rel#*|}
		rel=${rel%|*}
		echo "tool $path$rel" >>"$tmp/go.mod"
	done
	echo "build-etcd: resolving $name ($requires)" >&2
	(cd "$tmp" && GOFLAGS=-mod=mod $GO mod tidy)
	for t in $targets; do
		bin=${t%%=*}
		local rest=${t#*=}
		path=${rest%%|*}
		rel=${rest#*|}
		rel=${rel%|*}
		echo "build-etcd: building $bin from $path$rel" >&2
		(cd "$tmp" && CGO_ENABLED=0 nice -n 10 $GO build -trimpath -o "$out/$bin.tmp" "$path$rel")
		mv "$out/$bin.tmp" "$out/$bin"
	done
}

# Each target is binary=module|subpackage|version. The etcd 3.7.3 binaries
# share one module graph; the benchmark tool lives in a different etcd release
# and gets its own graph so neither drags the other's versions up.
build_group etcd \
	"go.etcd.io/etcd/server/v3@$ETCD_VERSION go.etcd.io/etcd/etcdctl/v3@$ETCD_VERSION go.etcd.io/etcd/etcdutl/v3@$ETCD_VERSION" \
	"etcd=go.etcd.io/etcd/server/v3||$ETCD_VERSION etcdctl=go.etcd.io/etcd/etcdctl/v3||$ETCD_VERSION etcdutl=go.etcd.io/etcd/etcdutl/v3||$ETCD_VERSION"

build_group etcd-3.6 \
	"go.etcd.io/etcd/server/v3@$LAST_RELEASE go.etcd.io/etcd/etcdutl/v3@$LAST_RELEASE" \
	"etcd-3.6=go.etcd.io/etcd/server/v3||$LAST_RELEASE etcdutl-3.6=go.etcd.io/etcd/etcdutl/v3||$LAST_RELEASE"

build_group benchmark \
	"go.etcd.io/etcd/v3@$BENCH_MODULE_VERSION" \
	"benchmark=go.etcd.io/etcd/v3|/tools/benchmark|$BENCH_MODULE_VERSION"

echo "$out"
