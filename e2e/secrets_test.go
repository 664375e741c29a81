package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
)

// TestNoPlaintextPasswords adds a user and changes a password with known
// passwords through etcdctl, stops the server, and searches every byte of
// the data dir (WAL, page store, everything): the passwords must appear 0
// times. The user name must appear, so the search would find a leak.
func TestNoPlaintextPasswords(t *testing.T) {
	b := needBins(t)
	srv, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	const user, pw1, pw2 = "leakcheck-user", "Plaintext-Secret-One-7f3a", "Plaintext-Secret-Two-91c2"
	if r := ctl.Run("", "user", "add", user+":"+pw1); r.Code != 0 {
		t.Fatalf("user add: %s", r)
	}
	if r := ctl.Run(pw2+"\n", "user", "passwd", user, "--interactive=false"); r.Code != 0 {
		t.Fatalf("user passwd: %s", r)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	files := 0
	err = filepath.WalkDir(srv.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, s := range []string{user, pw1, pw2} {
			counts[s] += bytes.Count(data, []byte(s))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("searched %d files: user name %d times, first password %d, second password %d", files, counts[user], counts[pw1], counts[pw2])
	if counts[user] == 0 {
		t.Fatal("the user name is nowhere in the data dir: the search cannot see the records")
	}
	if counts[pw1] != 0 || counts[pw2] != 0 {
		t.Fatalf("plaintext password found in the data dir")
	}
}
