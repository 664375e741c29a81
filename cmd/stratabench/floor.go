package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/strata-db/strata/server"
)

const floorUsage = `Usage: stratabench floor-server --listen HOST:PORT --data-dir DIR [flags]

Serves etcd's KV API (Range, Put, a Txn of one put) over the gRPC
configuration of a strata member with nothing behind it: ranges answer one
fixed key-value, puts are appended to DIR/floor.log and answered after a
group-committed fdatasync. No raft, index, page store, metrics or auth,
and the garbage collector runs only past a 64 MiB heap. It measures the
floor of a server on gRPC-go: bench/compare.sh runs etcd's benchmark
against it beside strata and etcd, so what a member spends beyond it is
strata's own. Not a key-value server: it keeps nothing.

Flags:
`

const floorExamples = `
Examples:
  stratabench floor-server --listen 127.0.0.1:23790 --data-dir /var/tmp/floor
`

func runFloor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stratabench floor-server", flag.ContinueOnError)
	listen := fs.String("listen", "", "`HOST:PORT` to serve on")
	dir := fs.String("data-dir", "", "`DIR` for the put log (on the disk to measure)")
	key := fs.String("range-key", "bench-range-key", "the key every range answers")
	valSize := fs.Int("range-val-size", 256, "the size of its value, in bytes")
	if code, ok := parseFlags(fs, args, floorUsage, floorExamples, stdout, stderr); !ok {
		return code
	}
	if *listen == "" || *dir == "" || fs.NArg() > 0 || *valSize < 0 {
		fmt.Fprintln(stderr, "stratabench floor-server: --listen and --data-dir are required, and no arguments")
		fmt.Fprintln(stderr, "Run 'stratabench floor-server -h' for usage.")
		return 2
	}
	// A floor: the collector, which a member pays for with its own
	// heap, is held off until 64 MiB, so that the floor's CPU per
	// request is gRPC's and the kernel's, not a collection's. Off
	// altogether, every allocation would touch fresh memory.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(64 << 20)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "stratabench floor-server: %v\n", err)
		return 1
	}
	f, err := server.NewFloor(*dir, []byte(*key), bytes.Repeat([]byte("v"), *valSize))
	if err != nil {
		l.Close()
		fmt.Fprintf(stderr, "stratabench floor-server: %v\n", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	served := make(chan error, 1)
	go func() { served <- f.GRPC.Serve(l) }()
	fmt.Fprintf(stdout, "floor serving on %s\n", l.Addr())
	select {
	case <-sig:
	case err = <-served:
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "stratabench floor-server: %v\n", err)
		return 1
	}
	return 0
}
