package e2e

import (
	"strings"
	"testing"
)

// TestDiffDetectsHTTPDifferences is the negative control of the HTTP and
// TLS steps: both sides serve https with the same certificate, but only B
// requires client certificates (--trusted-ca-file turns that on in etcd)
// and serves pprof, so exactly two HTTP steps must differ. It needs
// nothing outside Go and the reference binaries; with the curl-based
// steps on a machine without curl, every step recorded "curl not
// installed" on both sides and no difference was found.
func TestDiffDetectsHTTPDifferences(t *testing.T) {
	b := needBins(t)
	sc := tlsScenario()
	sc.name = "http-negative-control"
	sc.flags = []string{"--cert-file=${servercert}", "--key-file=${serverkey}"}
	byName := map[string]step{}
	for _, st := range sc.steps {
		byName[st.name] = st
	}
	clientCert := []string{"--cacert", "${ca}", "--cert", "${rootcert}", "--key", "${rootkey}"}
	sc.steps = nil
	for _, name := range []string{
		"curl /health with a client certificate",    // the same: both serve TLS
		"curl /health without a client certificate", // A answers, B refuses
		"metrics port /livez",                       // the same: plain http
	} {
		st, ok := byName[name]
		if !ok {
			t.Fatalf("tls scenario has no step %q", name)
		}
		sc.steps = append(sc.steps, st)
	}
	sc.steps = append(sc.steps, curlTLSStep("pprof", "/debug/pprof/cmdline", clientCert...)) // A: 404, B: the command line

	res := diffScenario(t, b, sc, b.Etcd, []string{"--trusted-ca-file=${ca}", "--client-cert-auth=true", "--enable-pprof"})
	var got []string
	for _, d := range res.diffs {
		got = append(got, d.step)
	}
	want := []string{"curl /health without a client certificate", "pprof"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("differing steps = %q, want %q\nA:\n%s\nB:\n%s", got, want, res.a.out.String(), res.b.out.String())
	}
	// The steps that agree must have compared real answers.
	for _, s := range []*side{res.a, res.b} {
		want := map[string]int{"A": 2, "B": 1}[s.label]
		if n := strings.Count(s.out.String(), `{"health":"true","reason":""}`); n != want {
			t.Errorf("side %s: /health answered %d times, want %d:\n%s", s.label, n, want, s.out.String())
		}
		if !strings.Contains(s.out.String(), "HTTP 200") {
			t.Errorf("side %s: no HTTP 200 recorded:\n%s", s.label, s.out.String())
		}
	}
	for _, d := range res.diffs {
		t.Logf("detected as expected: %s\n%s", d.step, d.diff)
	}
}
