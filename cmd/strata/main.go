// Command strata is Strata's server: an etcd-compatible key-value member
// that accepts etcd's flags, ETCD_* environment variables and
// --config-file, and serves etcd's v3 API.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/strata-db/strata/internal/procs"
	"github.com/strata-db/strata/internal/stacks"
	"github.com/strata-db/strata/server"
	"github.com/strata-db/strata/server/config"
)

func main() { os.Exit(run()) }

func run() int {
	// Re-executes the binary with stack shrinking off (see package
	// stacks); returns only if that was not needed or failed, and then
	// the process runs on as it started.
	if err := stacks.Keep(); err != nil {
		fmt.Fprintf(os.Stderr, "strata: running with goroutine stack shrinking on: re-executing with GODEBUG=%s failed: %v\n", stacks.Setting, err)
	}
	if len(os.Args) > 1 && os.Args[1] == "gateway" {
		return runGateway(os.Args[2:], os.Stdout, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "grpc-proxy" {
		return runGRPCProxy(os.Args[2:], os.Stdout, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "statefulset" {
		return runStatefulSet(os.Args[2:], os.Stdout, os.Stderr)
	}
	return runMember(os.Args[1:], nil)
}

// runMember parses the member's flags and serves until a signal or a
// fatal error. prepare, when given, runs between parsing and starting
// (the StatefulSet mode decides the bootstrap there) and may return a
// function to run once the member serves.
func runMember(args []string, prepare func(*config.Config, *slog.Logger) (func(*server.Server), error)) int {
	cfg, err := config.Parse(args, os.Environ(), os.Stderr)
	if err != nil {
		if errors.Is(err, config.ErrHelp) {
			fmt.Print(config.Help())
			return 0
		}
		fmt.Fprintln(os.Stderr, err)
		return config.ExitCode(err)
	}
	profileMemory(cfg.EnablePprof)
	if cfg.PrintVersion {
		fmt.Printf("etcd Version: %s\nStrata Version: %s\nGo Version: %s\nGo OS/Arch: %s/%s\n",
			server.EtcdVersion, server.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	lg, closeLog, err := cfg.NewLogger()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer closeLog()
	var serving func(*server.Server)
	if prepare != nil {
		if serving, err = prepare(cfg, lg); err != nil {
			lg.Error("failed to prepare the member", "error", err)
			return 1
		}
	}
	// etcd's start-up line with the whole effective configuration, which
	// operators and tools grep for; Strata's own version at its end.
	cfg.LogStart(lg, server.MemberInitialized(cfg), "strata-version", server.Version)
	s, err := server.New(cfg, lg)
	if err != nil {
		lg.Error("failed to start strata", "error", err)
		return 1
	}
	if err := s.Serve(); err != nil {
		lg.Error("failed to serve clients", "error", err)
		s.Stop()
		return 1
	}
	if serving != nil {
		go serving(s)
	}
	if cfg.AdaptiveProcs {
		gov := procs.Start(lg, procs.Options{})
		defer gov.Stop()
	}
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	select {
	case sig := <-sigc:
		lg.Info("received signal; shutting down", "signal", sig.String())
	case <-s.Done():
	}
	err = s.Stop()
	if server.IsRemoved(s.Err()) {
		// Removed from the cluster (logged): restarting cannot help, so
		// the exit is clean, as etcd's.
		return 0
	}
	if s.Err() != nil {
		// The member stopped by itself on a fatal error, which it logged
		// (one fatal line naming the cause, the file and what to do). A
		// non-zero exit lets systemd or the kubelet restart it; the WAL
		// holds every acknowledged write.
		return 1
	}
	if err != nil {
		lg.Error("error during shutdown", "error", err)
		return 1
	}
	lg.Info("stopped strata", "name", cfg.Name)
	return 0
}
