package load

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestBadFlagsExit2(t *testing.T) {
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"frob"}, `unknown workload "frob"`},
		{[]string{"put", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"put", "--clients", "0"}, "--clients must be at least 1"},
		{[]string{"put", "--conns=0"}, "--conns must be at least 1"},
		{[]string{"put", "--total", "0"}, "--total must be at least 1"},
		{[]string{"put", "--total", "x"}, `invalid value "x" for flag -total`},
		{[]string{"put", "--rate=-1"}, "--rate must not be negative"},
		{[]string{"put", "--key-space-size", "0"}, "expected positive --key-space-size"},
		{[]string{"put", "--key-size", "1", "--key-space-size", "100"}, "--key-size 1 is too small"},
		{[]string{"put", "--val-size=-1"}, "--val-size must not be negative"},
		{[]string{"put", "extra"}, "unexpected arguments"},
		{[]string{"put", "-w", "yaml"}, "-w must be simple or json"},
		{[]string{"put", "--cert", "c.pem"}, "--cert and --key go together"},
		{[]string{"put", "--endpoints", "ftp://x:1"}, "scheme must be http or https"},
		{[]string{"put", "--endpoints", "nohost"}, "want host:port"},
		{[]string{"range"}, "want KEY [END]"},
		{[]string{"range", "a", "b", "c"}, "want KEY [END]"},
		{[]string{"range", "foo", "--consistency", "x"}, "--consistency must be l"},
		{[]string{"range", "foo", "--count-only", "--keys-only"}, "exclusive"},
		{[]string{"range", "foo", "z", "--prefix"}, "END and --prefix are exclusive"},
		{[]string{"txn-put", "--txn-ops", "3"}, "--txn-ops 3 is larger than --key-space-size 1"},
		{[]string{"txn-mixed", "--rw-ratio=-1"}, "--rw-ratio must not be negative"},
		{[]string{"watch", "--streams", "0"}, "--streams and the watches per stream"},
		{[]string{"watch", "--watched-key-total", "0"}, "--watched-key-total must be at least 1"},
		{[]string{"watch-latency", "--put-total", "0"}, "--put-total must be at least 1"},
		{[]string{"watch-latency", "--key-size", "0"}, "--key-size must be at least 1"},
		{[]string{"lease-keepalive", "--key-size", "8"}, "flag provided but not defined: -key-size"},
		{[]string{"--conns", "0", "put"}, "--conns must be at least 1"},
		{[]string{"--bogus", "put"}, "flag provided but not defined"},
		{[]string{"--clients=2"}, "no workload given"},
	}
	for _, c := range cases {
		var out, errw bytes.Buffer
		code := Main(c.args[0], c.args[1:], strings.NewReader(""), &out, &errw)
		if code != ExitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, ExitUsage, errw.String())
			continue
		}
		if !strings.Contains(errw.String(), c.msg) {
			t.Errorf("%q: stderr %q lacks %q", c.args, errw.String(), c.msg)
		}
		if out.Len() != 0 {
			t.Errorf("%q: wrote to stdout: %q", c.args, out.String())
		}
	}
}

func TestHelpExit0(t *testing.T) {
	for _, args := range [][]string{{"put", "-h"}, {"range", "--help"}, {"--help"}} {
		var out, errw bytes.Buffer
		if code := Main(args[0], args[1:], nil, &out, &errw); code != ExitOK {
			t.Errorf("%q: exit %d", args, code)
		}
		if !strings.Contains(out.String(), "-clients") {
			t.Errorf("%q: help lacks the global flags:\n%s", args, out.String())
		}
	}
}

func TestParseDefaultsAndOrder(t *testing.T) {
	o, err := Parse("put", DefaultGlobal(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// etcd benchmark's defaults.
	if o.Total != 10000 || o.KeySize != 8 || o.ValSize != 8 || o.KeySpaceSize != 1 || o.Conns != 1 || o.Clients != 1 ||
		len(o.Endpoints) != 1 || o.Endpoints[0] != "127.0.0.1:2379" || o.WriteOut != "simple" || o.CompactIndexDelta != 1000 {
		t.Errorf("put defaults: %+v", o)
	}

	// Flags and positional arguments mixed; global flags among the
	// workload's; repeated and comma-separated endpoints.
	o, err = Parse("range", DefaultGlobal(), []string{"--clients=16", "foo", "--consistency", "s", "zoo",
		"--endpoints", "a:1,b:2", "--endpoints=https://c:3", "--dial-timeout=3s", "-w", "json"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Clients != 16 || o.RangeKey != "foo" || o.RangeEnd != "zoo" || o.Consistency != "s" ||
		strings.Join(o.Endpoints, " ") != "a:1 b:2 https://c:3" || o.DialTimeout != 3*time.Second || o.WriteOut != "json" {
		t.Errorf("range: %+v", o)
	}
	r := o.rangeRequest()
	if string(r.Key) != "foo" || string(r.RangeEnd) != "zoo" || !r.Serializable {
		t.Errorf("range request %+v", r)
	}

	// etcd's order: global flags before the workload.
	g, w, rest, err := ParseGlobal([]string{"--endpoints=x:1", "--conns", "4", "txn-mixed", "--rw-ratio", "3"}, nil)
	if err != nil || w != "txn-mixed" || g.Conns != 4 || g.Endpoints[0] != "x:1" {
		t.Fatalf("ParseGlobal: %v %q %+v", err, w, g)
	}
	o, err = Parse(w, g, rest, nil)
	if err != nil || o.Conns != 4 || o.RWRatio != 3 || o.Limit != 1000 || o.Consistency != "l" {
		t.Errorf("txn-mixed after global flags: %v %+v", err, o)
	}

	o, err = Parse("range", DefaultGlobal(), []string{"--prefix", "ab"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := o.rangeRequest(); string(r.Key) != "ab" || string(r.RangeEnd) != "ac" {
		t.Errorf("prefix range %q..%q", r.Key, r.RangeEnd)
	}
	o, _ = Parse("range", DefaultGlobal(), []string{"--prefix"}, nil)
	if r := o.rangeRequest(); string(r.Key) != "\x00" || string(r.RangeEnd) != "\x00" {
		t.Errorf("prefix of everything %q..%q", r.Key, r.RangeEnd)
	}
}

func TestKeysAndPrefixEnd(t *testing.T) {
	g := newKeyGen("p/", 8)
	k1, k300 := g.key(1), g.key(300)
	if len(k1) != 10 || string(k1[:2]) != "p/" || k1[2] != 2 || k1[3] != 0 {
		t.Errorf("key(1) = %q", k1)
	}
	if string(k300) == string(k1) || len(k300) != 10 {
		t.Errorf("key(300) = %q", k300)
	}
	// key returns fresh slices: earlier keys stay intact.
	if k1[2] != 2 {
		t.Errorf("key(1) changed after key(300): %q", k1)
	}
	for in, want := range map[string]string{"a": "b", "a\xff": "b", "\xff\xff": "\x00", "": "\x00"} {
		if got := string(prefixEnd([]byte(in))); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
	if varintLen(0) != 1 || varintLen(63) != 1 || varintLen(64) != 2 {
		t.Errorf("varintLen")
	}
}

func TestLimiter(t *testing.T) {
	if newLimiter(0, 1) != nil {
		t.Fatal("rate 0 must not limit")
	}
	l := newLimiter(200, 1)
	start := time.Now()
	for range 21 {
		if err := l.wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// 21 requests at 200/s with a burst of 1 take at least 100 ms.
	if el := time.Since(start); el < 95*time.Millisecond || el > 2*time.Second {
		t.Errorf("21 requests at 200/s took %v", el)
	}
	l = newLimiter(10, 5)
	start = time.Now()
	for range 5 {
		_ = l.wait(t.Context())
	}
	if el := time.Since(start); el > 50*time.Millisecond {
		t.Errorf("a burst of 5 waited %v", el)
	}
}
