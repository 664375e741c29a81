package e2e

// Scheduled backups: stratautl snapshot save --dir
// --every 1s --keep 3 against a member under a writer keeps exactly the
// newest 3 snapshots, each verified by 'stratautl snapshot status'; the
// newest, restored with 'stratautl snapshot restore', gives a member whose
// HashKV at the snapshot's revision equals the original member's.

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/tools"
)

func TestScheduledBackups(t *testing.T) {
	bin := strataTarget(t)
	stratautl, err := harness.Stratautl(bin)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: "b1", Dir: work})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cli := memberClient(t, srv)

	// A writer runs the whole time the saves do.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	puts := 0
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := cli.Put(ctx, fmt.Sprintf("backup/%04d", i%2000), strings.Repeat("v", 100+i%400))
			cancel()
			if err == nil {
				puts++
			}
		}
	}()

	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", ports[0])
	dir := filepath.Join(work, "backups")
	var out strings.Builder
	saver := exec.Command(stratautl, "snapshot", "save", "--endpoints", srv.ClientURL, "--dir", dir,
		"--every", "1s", "--keep", "3", "--metrics-addr", metrics)
	saver.Stdout, saver.Stderr = &out, &out
	if err := saver.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- saver.Wait() }()
	defer func() {
		_ = saver.Process.Kill()
		if t.Failed() {
			t.Logf("stratautl snapshot save output:\n%s", out.String())
		}
	}()
	const wantSaves = 6
	poll.UntilNil(t, fmt.Sprintf("%d scheduled saves", wantSaves), func() error {
		select {
		case err := <-exited:
			t.Fatalf("stratautl snapshot save exited: %v\n%s", err, out.String())
		default:
		}
		m, err := harness.ScrapeMetrics("http://" + metrics + "/metrics")
		if err != nil {
			return err
		}
		ok, _ := m["strata_snapshot_save_total"].Find("strata_snapshot_save_total", map[string]string{"result": "success"})
		if ok < wantSaves {
			return fmt.Errorf("%v saves so far", ok)
		}
		if failed, _ := m["strata_snapshot_save_total"].Find("strata_snapshot_save_total", map[string]string{"result": "failure"}); failed > 0 {
			t.Fatalf("%v saves failed:\n%s", failed, out.String())
		}
		return nil
	})
	close(stop)
	wg.Wait()
	_ = saver.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Fatalf("stratautl snapshot save after SIGTERM: %v\n%s", err, out.String())
	}
	saved, err := tools.Backups(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(saved) != 3 {
		t.Fatalf("%d snapshots in %s after the saves, want the newest 3: %v", len(saved), dir, saved)
	}
	var rev int64
	for _, p := range saved {
		cmd := exec.Command(stratautl, "snapshot", "status", p, "-w", "strata-json")
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("stratautl snapshot status %s: %v", p, err)
		}
		var st tools.SnapshotStatus
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		if !st.HashChecked || st.Format != "etcd" {
			t.Fatalf("%s: %+v", p, st)
		}
		rev = st.Revision // the newest last
	}

	restored, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: "r1", Dir: work})
	if err != nil {
		t.Fatal(err)
	}
	newest := saved[len(saved)-1]
	rc := exec.Command(stratautl, "snapshot", "restore", newest, "--data-dir", restored.DataDir, "--name", restored.Name(),
		"--initial-cluster", restored.Name()+"="+restored.PeerURL, "--initial-cluster-token", harness.ClusterToken,
		"--initial-advertise-peer-urls", restored.PeerURL, "--no-progress")
	if b, err := rc.CombinedOutput(); err != nil {
		t.Fatalf("stratautl snapshot restore: %v\n%s", err, b)
	}
	if err := restored.Start(); err != nil {
		t.Fatalf("strata on the restored data dir: %v\n%s", err, restored.LogTail(30))
	}
	defer restored.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want, err := cli.HashKV(ctx, srv.ClientURL, rev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cli.HashKV(ctx, restored.ClientURL, rev)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash != want.Hash {
		t.Fatalf("HashKV at revision %d: restored member %08x, original %08x", rev, got.Hash, want.Hash)
	}
	t.Logf("BACKUP: %d scheduled saves every 1s under %d puts; 3 kept, each verified; the newest (revision %d) restored: HashKV %08x on both",
		wantSaves, puts, rev, got.Hash)
}
