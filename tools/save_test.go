package tools

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPruneBackupsKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var names []string
	for i := 0; i < 5; i++ {
		p := filepath.Join(dir, BackupName(base.Add(time.Duration(i)*time.Second)))
		if err := os.WriteFile(p, []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
	}
	part := filepath.Join(dir, BackupName(base.Add(time.Hour))+".part")
	other := filepath.Join(dir, "not-a-backup.db")
	for _, p := range []string{part, other} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kept, err := PruneBackups(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 2 || kept[0] != names[3] || kept[1] != names[4] {
		t.Fatalf("kept %v, want the newest two %v", kept, names[3:])
	}
	for _, p := range append(names[:3:3], part) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s survived the pruning: %v", p, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("a file that is not a backup was removed: %v", err)
	}
}
