package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestPprofHeapProfile: a member samples allocations for the heap
// profile only when it serves /debug/pprof (cmd/strata/memprofile.go), so
// with --enable-pprof the profile must still have samples after a load:
// 300 puts of 64 KiB values allocate well over 20 MiB, about 40 samples at
// the runtime's one per 512 KiB. Without the flag the endpoint is absent,
// as in etcd.
func TestPprofHeapProfile(t *testing.T) {
	target := os.Getenv("STRATA_E2E_TARGET")
	if target == "" {
		t.Fatal("set STRATA_E2E_TARGET to the strata binary (make build writes ../bin/strata)")
	}
	bin, err := filepath.Abs(target)
	if err != nil {
		t.Fatal(err)
	}
	for _, pprof := range []bool{true, false} {
		var flags []string
		if pprof {
			flags = []string{"--enable-pprof"}
		}
		s, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: filepath.Join(t.TempDir(), "pprof"), Flags: flags})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatalf("%v\n%s", err, s.LogTail(30))
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		val := strings.Repeat("v", 64<<10)
		for i := 0; i < 300; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cli.Put(ctx, fmt.Sprintf("k%03d", i), val)
			cancel()
			if err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
		}
		cli.Close()
		resp, err := http.Get(s.ClientURL + "/debug/pprof/heap?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !pprof {
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("without --enable-pprof: /debug/pprof/heap answered %s", resp.Status)
			}
		} else {
			// "heap profile: <in use objects>: <bytes> [<allocated objects>: <bytes>] @ heap/<2*rate>"
			m := regexp.MustCompile(`^heap profile: \d+: \d+ \[(\d+): (\d+)\] @ heap/(\d+)`).FindSubmatch(body)
			if resp.StatusCode != http.StatusOK || m == nil {
				t.Fatalf("with --enable-pprof: /debug/pprof/heap answered %s:\n%.300s", resp.Status, body)
			}
			objs, _ := strconv.Atoi(string(m[1]))
			if objs == 0 || string(m[3]) != "1048576" {
				t.Errorf("with --enable-pprof, after 300 puts of 64 KiB: %q; want sampled allocations at the runtime's default rate (heap/1048576)", m[0])
			}
			t.Logf("PPROF: %s", m[0])
		}
		s.Stop()
	}
}
