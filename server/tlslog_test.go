package server

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-db/strata/internal/poll"
)

// TestTrustedCAFileDemandsClientCert: --trusted-ca-file alone (no
// --client-cert-auth) makes the client endpoint demand a certificate from
// that CA, as etcd's; a refused handshake is logged with etcd's message
// and the client's address, and a client with a certificate is served.
func TestTrustedCAFileDemandsClientCert(t *testing.T) {
	pki := newTestPKI(t)
	cert, key := pki.issue(t, "server", "")
	anonCert, anonKey := pki.issue(t, "anon", "")
	var buf jsonLog
	lg := buf.logger()
	cp, pp := freePort(t), freePort(t)
	client, peer := fmt.Sprintf("https://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	m := startHooked(t, []string{"--name", "m1", "--data-dir", filepath.Join(t.TempDir(), "d"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m1=" + peer,
		"--cert-file", cert, "--key-file", key, "--trusted-ca-file", pki.caFile}, client, lg, storageHooks{})
	defer m.stop(t)

	noCert := pki.clientConfig(t, "", "")
	if _, _, _, err := httpDo(tlsClient(noCert), "GET", client+"/version", "", nil); err == nil {
		t.Fatal("a client without a certificate was served under --trusted-ca-file")
	}
	poll.Until(t, "the rejected handshake's log line", func() bool {
		for _, r := range buf.records(t, "rejected connection on client endpoint") {
			if r["level"] == "WARN" && strings.HasPrefix(r["remote-addr"].(string), "127.0.0.1:") && r["error"] != "" {
				return true
			}
		}
		return false
	})
	code, body, _, err := httpDo(tlsClient(pki.clientConfig(t, anonCert, anonKey)), "GET", client+"/version", "", nil)
	if err != nil || code != 200 || !strings.Contains(body, `"etcdserver"`) {
		t.Fatalf("client with a certificate: %d %q %v", code, body, err)
	}
}

// TestPeerHandshakeRejectedLogged: the peer port over TLS with a trusted
// CA refuses a client without a certificate, and the refusal is logged
// as etcd logs it ("rejected connection on peer endpoint", with the
// client's address).
func TestPeerHandshakeRejectedLogged(t *testing.T) {
	pki := newTestPKI(t)
	cert, key := pki.issue(t, "server", "")
	var buf jsonLog
	lg := buf.logger()
	cp, pp := freePort(t), freePort(t)
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("https://127.0.0.1:%d", pp)
	m := startHooked(t, []string{"--name", "m1", "--data-dir", filepath.Join(t.TempDir(), "d"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m1=" + peer,
		"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", pki.caFile}, client, lg, storageHooks{})
	defer m.stop(t)
	if _, _, _, err := httpDo(tlsClient(pki.clientConfig(t, "", "")), "GET", peer+"/members", "", nil); err == nil {
		t.Fatal("the peer port served a client without a certificate")
	}
	poll.Until(t, "the rejected peer handshake's log line", func() bool {
		for _, r := range buf.records(t, "rejected connection on peer endpoint") {
			if r["level"] == "WARN" && strings.HasPrefix(r["remote-addr"].(string), "127.0.0.1:") && r["error"] != "" {
				return true
			}
		}
		return false
	})
}
