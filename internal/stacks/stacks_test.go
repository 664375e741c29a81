package stacks

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// childEnv makes the test binary run child instead of the tests.
const childEnv = "STRATA_STACKS_CHILD"

const (
	goroutines = 200
	grownTo    = 64 << 10 // each child goroutine's stack, before the collections
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

// child calls Keep, then grows goroutines' stacks, parks them near the
// top of their stacks (where a collection may shrink them), collects,
// and prints its pid, its GODEBUG and the bytes of stack in use.
func child() {
	if err := Keep(); err != nil {
		fmt.Println("keep:", err)
		os.Exit(1)
	}
	park := make(chan struct{})
	grown := make(chan struct{})
	for range goroutines {
		go func() {
			deep(40 << 10 / 256) // about 40 KiB of frames: the stack grows to 64 KiB
			grown <- struct{}{}
			<-park
		}()
	}
	for range goroutines {
		<-grown
	}
	for range 4 {
		runtime.GC() // each may halve a parked goroutine's stack
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	fmt.Printf("pid=%d godebug=%q stacks=%d\n", os.Getpid(), os.Getenv("GODEBUG"), s[0].Value.Uint64())
	close(park)
}

//go:noinline
func deep(n int) byte {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return deep(n-1) + pad[n%256]
}

type childOut struct {
	pid     int
	godebug string
	stacks  uint64
}

func runChild(t *testing.T, godebug *string) (childOut, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") })
	cmd.Env = append(cmd.Env, childEnv+"=1")
	if godebug != nil {
		cmd.Env = append(cmd.Env, "GODEBUG="+*godebug)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var c childOut
	var q string
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "pid=%d godebug=%s stacks=%d", &c.pid, &q, &c.stacks); err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	if c.godebug, err = strconv.Unquote(q); err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	t.Logf("GODEBUG %s: %+v", label(godebug), c)
	return c, cmd.Process.Pid
}

func ptr(s string) *string { return &s }

// label names a child's GODEBUG in messages.
func label(godebug *string) string {
	if godebug == nil {
		return "unset"
	}
	return strconv.Quote(*godebug)
}

// TestKeep runs the test binary as a child that calls Keep and checks
// that the runtime it ends up in keeps grown stacks through collections,
// and that it is the same process.
func TestKeep(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("stacks is tested on Linux only (GOOS %s)", runtime.GOOS)
	}
	// Turned off: the same collections shrink the stacks, so the
	// measurement below tells the two apart.
	off, _ := runChild(t, ptr("gcshrinkstackoff=0"))
	if off.godebug != "gcshrinkstackoff=0" {
		t.Fatalf("GODEBUG=gcshrinkstackoff=0 became %q: a setting already there must be left alone", off.godebug)
	}
	if off.stacks >= goroutines*grownTo/2 {
		t.Fatalf("with shrinking on, %d bytes of stack are still in use for %d goroutines that grew to %d: the test cannot tell kept stacks apart", off.stacks, goroutines, grownTo)
	}

	for _, gd := range []*string{nil, ptr(""), ptr("madvdontneed=1")} {
		c, pid := runChild(t, gd)
		want := Setting
		if gd != nil && *gd != "" {
			want = *gd + "," + Setting
		}
		if c.godebug != want {
			t.Errorf("GODEBUG %s: the re-executed process has GODEBUG %q, want %q", label(gd), c.godebug, want)
		}
		if c.pid != pid {
			t.Errorf("GODEBUG %s: the re-executed process has pid %d, the started one %d", label(gd), c.pid, pid)
		}
		if c.stacks < goroutines*grownTo {
			t.Errorf("GODEBUG %s: %d bytes of stack in use after the collections, want at least %d (%d goroutines at %d): stacks were shrunk", label(gd), c.stacks, goroutines*grownTo, goroutines, grownTo)
		}
	}
}

func TestWithSetting(t *testing.T) {
	for _, tc := range []struct {
		env     []string
		want    []string
		changed bool
	}{
		{[]string{"A=1"}, []string{"A=1", "GODEBUG=" + Setting}, true},
		{[]string{"GODEBUG=", "A=1"}, []string{"GODEBUG=" + Setting, "A=1"}, true},
		{[]string{"GODEBUG=x=1,y=2"}, []string{"GODEBUG=x=1,y=2," + Setting}, true},
		{[]string{"GODEBUG=x=1, gcshrinkstackoff=0"}, []string{"GODEBUG=x=1, gcshrinkstackoff=0"}, false},
		{[]string{"GODEBUG=gcshrinkstackoff=1"}, []string{"GODEBUG=gcshrinkstackoff=1"}, false},
		// Only the first GODEBUG counts, as for the runtime.
		{[]string{"GODEBUG=x=1", "GODEBUG=gcshrinkstackoff=0"}, []string{"GODEBUG=x=1," + Setting, "GODEBUG=gcshrinkstackoff=0"}, true},
	} {
		got, changed := withSetting(tc.env)
		if changed != tc.changed || !slices.Equal(got, tc.want) {
			t.Errorf("withSetting(%q) = %q, %v; want %q, %v", tc.env, got, changed, tc.want, tc.changed)
		}
	}
}
