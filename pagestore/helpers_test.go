package pagestore

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
)

func openT(t testing.TB, path string, o *Options) *DB {
	t.Helper()
	if o == nil {
		o = &Options{}
	}
	o.StrictMode = true
	db, err := Open(path, o)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return db
}

func tmpDB(t testing.TB) string { return filepath.Join(t.TempDir(), "db") }

// dump returns every bucket's contents as the DB sees it.
func dump(t testing.TB, db *DB) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	err := db.View(func(tx *Tx) error {
		return tx.ForEach(func(name []byte, b *Bucket) error {
			m := map[string]string{}
			out[string(name)] = m
			var prev []byte
			err := b.ForEach(func(k, v []byte) error {
				if prev != nil && bytes.Compare(prev, k) >= 0 {
					return fmt.Errorf("keys out of order: %x then %x", prev, k)
				}
				prev = append(prev[:0], k...)
				m[string(k)] = string(v)
				return nil
			})
			return err
		})
	})
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return out
}

func sameContents(t testing.TB, got, want map[string]map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("bucket count %d, want %d (%v vs %v)", len(got), len(want), keys(got), keys(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Fatalf("bucket %q missing", name)
		}
		if len(g) != len(w) {
			t.Fatalf("bucket %q: %d keys, want %d", name, len(g), len(w))
		}
		for k, v := range w {
			if gv, ok := g[k]; !ok || gv != v {
				t.Fatalf("bucket %q key %x: got %d bytes (present %v), want %d bytes", name, k, len(gv), ok, len(v))
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func checkDB(t testing.TB, db *DB) {
	t.Helper()
	if err := db.View(func(tx *Tx) error { return tx.Check() }); err != nil {
		t.Fatalf("check: %v", err)
	}
}
