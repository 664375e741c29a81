package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/strata-db/strata/bench/load"
	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/tools"
)

func init() {
	register(command{name: "snapshot save", example: "stratautl snapshot save --dir /backups --every 1h --keep 24", summary: "save a running member's snapshot (etcd's snapshot.db), once or on a schedule keeping the last N, each verified", run: snapshotSave})
}

// saveMetrics are the figures of scheduled saves, served on
// --metrics-addr for alerting on a backup that stopped working.
type saveMetrics struct {
	lastSuccess prometheus.Gauge
	lastSize    prometheus.Gauge
	lastRev     prometheus.Gauge
	kept        prometheus.Gauge
	saves       *prometheus.CounterVec
}

func newSaveMetrics(reg prometheus.Registerer) *saveMetrics {
	m := &saveMetrics{
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_snapshot_save_last_success_timestamp_seconds",
			Help: "Unix time of the last snapshot saved and verified."}),
		lastSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_snapshot_save_last_size_bytes",
			Help: "Size of the database in the last snapshot saved."}),
		lastRev: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_snapshot_save_last_revision",
			Help: "Revision of the last snapshot saved."}),
		kept: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_snapshot_save_kept",
			Help: "Snapshots kept in the directory after the last save."}),
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_snapshot_save_total",
			Help: "Snapshot saves by result (success: saved and verified)."}, []string{"result"}),
	}
	reg.MustRegister(m.lastSuccess, m.lastSize, m.lastRev, m.kept, m.saves)
	m.saves.WithLabelValues("success")
	m.saves.WithLabelValues("failure")
	return m
}

func snapshotSave(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("snapshot save", "[FILE] [--endpoints E] [--dir DIR --every D --keep N --metrics-addr A]", []string{
		"stratautl snapshot save backup.db --endpoints 10.0.0.1:2379",
		"stratautl snapshot save --dir /var/backups/strata --every 1h --keep 24 --metrics-addr :9479",
		"",
		"Writes what 'etcdctl snapshot save' writes (etcd's snapshot.db with its SHA-256 trailer),",
		"durably (a .part file, fsync'd and renamed), then verifies it as 'snapshot status' does and",
		"removes it if it fails. With --dir it names each file " + tools.BackupPrefix + "<UTC time>" + tools.BackupSuffix + ",",
		"keeps the newest --keep, and with --every repeats until stopped (SIGINT, SIGTERM); a failed",
		"save is logged and counted, and the next one is tried on schedule. Restore one with",
		"'stratautl snapshot restore'.",
	}, stderr)
	var g load.Global
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated member client URLs; the first that answers is used")
	fs.StringVar(&g.CACert, "cacert", "", "verify the members' certificates with this CA bundle")
	fs.StringVar(&g.Cert, "cert", "", "client certificate for TLS")
	fs.StringVar(&g.Key, "key", "", "client key for TLS")
	fs.BoolVar(&g.InsecureSkipVerify, "insecure-skip-tls-verify", false, "do not verify the members' certificates")
	fs.StringVar(&g.User, "user", "", "username[:password] for authentication (prompted if no password)")
	fs.DurationVar(&g.DialTimeout, "dial-timeout", 5*time.Second, "bound on connecting to an endpoint")
	dir := fs.String("dir", "", "save into this directory under time-stamped names (instead of FILE)")
	every := fs.Duration("every", 0, "with --dir: save again at this interval until stopped (0: once)")
	keep := fs.Int("keep", 0, "with --dir: keep only the newest N snapshots (0: keep all)")
	metricsAddr := fs.String("metrics-addr", "", "with --every: serve the saves' metrics on this address (/metrics)")
	noProgress := fs.Bool("no-progress", false, "do not draw a progress bar")
	want := 1
	for _, a := range args {
		if a == "--dir" || a == "-dir" || strings.HasPrefix(a, "--dir=") || strings.HasPrefix(a, "-dir=") {
			want = 0
		}
	}
	pos, err := parse(fs, args, want)
	if err != nil {
		return err
	}
	g.Endpoints = strings.Split(*endpoints, ",")
	if *dir == "" && (*every > 0 || *keep > 0) {
		return fmt.Errorf("--every and --keep need --dir")
	}
	if *dir != "" {
		if err := os.MkdirAll(*dir, 0o700); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The connection goes to the first endpoint that answers; after a
	// failed save the next one connects again, to whichever answers then.
	cc, err := load.Connect(ctx, g, os.Stdin, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if cc != nil {
			cc.Close()
		}
	}()

	lg := slog.New(slog.NewTextHandler(stderr, nil))
	reg := prometheus.NewRegistry()
	m := newSaveMetrics(reg)
	if *metricsAddr != "" {
		l, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(l)
		defer srv.Close()
		lg.Info("serving snapshot save metrics", "address", l.Addr().String())
	}
	saveOnce := func() error {
		path := ""
		if *dir == "" {
			path = pos[0]
		} else {
			path = filepath.Join(*dir, tools.BackupName(time.Now()))
		}
		var bar *progress.Bar
		var cb func(done, total int64)
		if !*noProgress && *every == 0 {
			cb = func(done, total int64) {
				if bar == nil {
					bar = progress.NewTo(stderr, "snapshot", total, "bytes")
				}
				bar.Set(done)
			}
		}
		start := time.Now()
		if cc == nil {
			if cc, err = load.Connect(ctx, g, os.Stdin, stderr); err != nil {
				m.saves.WithLabelValues("failure").Inc()
				return err
			}
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		st, err := tools.SaveSnapshot(sctx, cc, path, cb)
		cancel()
		if bar != nil {
			bar.Finish()
		}
		if err != nil {
			m.saves.WithLabelValues("failure").Inc()
			cc.Close()
			cc = nil
			return err
		}
		kept := 0
		if *dir != "" {
			left, err := tools.PruneBackups(*dir, *keep)
			if err != nil {
				m.saves.WithLabelValues("failure").Inc()
				return fmt.Errorf("saved %s, but pruning %s failed: %w", path, *dir, err)
			}
			kept = len(left)
		}
		m.saves.WithLabelValues("success").Inc()
		m.lastSuccess.Set(float64(time.Now().Unix()))
		m.lastSize.Set(float64(st.TotalSize))
		m.lastRev.Set(float64(st.Revision))
		m.kept.Set(float64(kept))
		line := fmt.Sprintf("saved %s: revision %d, %d keys, %s, SHA-256 and pages verified, took %v", path, st.Revision, st.TotalKey,
			progress.Bytes(st.TotalSize), time.Since(start).Round(time.Millisecond))
		if *dir != "" {
			line += fmt.Sprintf("; %d kept in %s", kept, *dir)
		}
		fmt.Fprintln(stdout, line)
		return nil
	}
	if *every <= 0 {
		return saveOnce()
	}
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		if err := saveOnce(); err != nil {
			lg.Error("snapshot save failed; trying again at the next interval", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
