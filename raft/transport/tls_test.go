package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/server/config"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
	next int64
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key, next: 100}
	ca.file = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue makes a peer certificate (server and client use) for cn with the
// given IP SANs and returns its files and serial.
func (ca *testCA) issue(t *testing.T, cn string, ips ...string) (certFile, keyFile string, serial *big.Int) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.next++
	serial = big.NewInt(ca.next)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	name := cn + "-" + serial.String()
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kd)
	return certFile, keyFile, serial
}

// crl writes a revocation list of serials.
func (ca *testCA) crl(t *testing.T, serials ...*big.Int) string {
	t.Helper()
	var entries []x509.RevocationListEntry
	for _, s := range serials {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(1), ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: entries,
	}, ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(ca.dir, "crl.pem")
	writePEM(t, path, "X509 CRL", der)
	return path
}

// peerTLS builds a member's listener and dialing configs the way the
// server does, through server/config (--peer-cert-file, --peer-key-file,
// --peer-trusted-ca-file, --peer-client-cert-auth, plus mod).
func peerTLS(t *testing.T, certFile, keyFile, caFile string, mod func(*config.TLSInfo)) (server, client *tls.Config) {
	t.Helper()
	c := &config.Config{DataDir: t.TempDir(), SelfSignedCertValidity: 1, PeerSecurity: config.TLSInfo{
		CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile, ClientCertAuth: true,
	}}
	if mod != nil {
		mod(&c.PeerSecurity)
	}
	srv, err := c.PeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := c.PeerClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	return ServerTLS(srv, c.PeerSecurity.SkipClientSANVerify), cli
}

// tlsMember is a member served over https with certificate cn from ca.
func tlsMember(t *testing.T, id uint64, ca *testCA, cn string, mod func(*config.TLSInfo)) *member {
	t.Helper()
	cert, key, _ := ca.issue(t, cn, "127.0.0.1")
	srv, cli := peerTLS(t, cert, key, ca.file, mod)
	return newMember(t, id, 100, srv, func(c *Config) { c.ClientTLS = cli })
}

// TestTLSExchange: members with certificates from one CA exchange
// messages over https streams, snapshots included.
func TestTLSExchange(t *testing.T) {
	ca := newTestCA(t, "ca")
	a, b := tlsMember(t, 1, ca, "a", nil), tlsMember(t, 2, ca, "b", nil)
	connect(t, a, b)
	waitStreams(t, a, b)
	waitStreams(t, b, a)
	app := msg(raftpb.MsgApp, 1, 2, 3, 9)
	app.Entries = entries(10, 3, 5000, 3)
	a.tr.Send([]*raftpb.Message{app, msg(raftpb.MsgHeartbeat, 1, 2, 3, 0)})
	b.tr.Send([]*raftpb.Message{msg(raftpb.MsgAppResp, 2, 1, 3, 12)})
	poll.Until(t, "messages over TLS", func() bool {
		return b.raft.count(raftpb.MsgApp) == 1 && b.raft.count(raftpb.MsgHeartbeat) == 1 && a.raft.count(raftpb.MsgAppResp) == 1
	})
	if !strings.HasPrefix(a.url, "https://") {
		t.Fatalf("member URL %s is not https", a.url)
	}
}

// TestTLSRefusals: a member whose certificate comes from another CA, has a
// CN outside --peer-cert-allowed-cn, or is revoked by --peer-crl-file
// cannot open streams or post to the member that refuses it (its dials
// fail in the TLS handshake and its posts are reported unreachable),
// while an allowed member in the same cluster works.
func TestTLSRefusals(t *testing.T) {
	ca := newTestCA(t, "ca")
	for _, c := range []struct {
		name  string
		guard func(*config.TLSInfo) // the refusing member's extra settings
		other func(t *testing.T) *member
		want  string // in the refused member's dial error
	}{
		{
			name:  "certificate from another CA",
			other: func(t *testing.T) *member { return tlsMember(t, 3, newTestCA(t, "other-ca"), "c", nil) },
			want:  "certificate",
		},
		{
			name:  "CN not allowed",
			guard: func(i *config.TLSInfo) { i.AllowedCNs = []string{"b"} },
			other: func(t *testing.T) *member { return tlsMember(t, 3, ca, "c", nil) },
			want:  "tls",
		},
		{
			name:  "hostname not allowed",
			guard: func(i *config.TLSInfo) { i.AllowedHostnames = []string{"b.example"} },
			other: func(t *testing.T) *member { return tlsMember(t, 3, ca, "c", nil) },
			want:  "tls",
		},
		{
			name: "revoked",
			other: func(t *testing.T) *member {
				return tlsMember(t, 3, ca, "c", nil)
			},
			want: "tls",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			// b is always allowed: CN b, and for the hostname case a SAN
			// that matches.
			bCert, bKey, _ := ca.issue(t, "b", "127.0.0.1")
			if c.name == "hostname not allowed" {
				bCert, bKey = issueWithDNS(t, ca, "b", "b.example")
			}
			other := c.other(t)
			guard := c.guard
			if c.name == "revoked" {
				serial := certSerial(t, other)
				crl := ca.crl(t, serial)
				guard = func(i *config.TLSInfo) { i.CRLFile = crl }
			}
			a := tlsMember(t, 1, ca, "a", guard)
			bSrv, bCli := peerTLS(t, bCert, bKey, ca.file, nil)
			b := newMember(t, 2, 100, bSrv, func(cfg *Config) { cfg.ClientTLS = bCli })
			connect(t, a, b)
			if err := other.tr.AddPeer(1, []string{a.url}); err != nil { // only other -> a: a has no business dialing it
				t.Fatal(err)
			}
			waitStreams(t, a, b)
			poll.Until(t, "the refused member's dial error", func() bool {
				st, _ := other.tr.PeerStatus(1)
				return st.LastError != "" && strings.Contains(st.LastError, c.want)
			})
			other.tr.Send([]*raftpb.Message{msg(raftpb.MsgVote, 3, 1, 5, 5)})
			poll.Until(t, "the refused post reported unreachable", func() bool { return other.raft.unreachableCount(1) > 0 })
			st, _ := other.tr.PeerStatus(1)
			if st.ReadingMessage || st.ReadingMsgApp || st.SentPipeline != 0 {
				t.Fatalf("refused member got through: %+v", st)
			}
			b.tr.Send([]*raftpb.Message{msg(raftpb.MsgVote, 2, 1, 5, 5)})
			poll.Until(t, "the allowed member's vote", func() bool { return a.raft.count(raftpb.MsgVote) == 1 })
			for _, m := range a.raft.messages() {
				if m.GetFrom() == 3 {
					t.Fatalf("a processed %v from the refused member", m)
				}
			}
		})
	}
}

func issueWithDNS(t *testing.T, ca *testCA, cn, dns string) (string, string) {
	t.Helper()
	certFile, keyFile, _ := ca.issue(t, cn, "127.0.0.1")
	// Re-issue with a DNS SAN as well: parse, add, sign again.
	b, _ := os.ReadFile(certFile)
	blk, _ := pem.Decode(b)
	cert, _ := x509.ParseCertificate(blk.Bytes)
	kb, _ := os.ReadFile(keyFile)
	kblk, _ := pem.Decode(kb)
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cert.DNSNames = []string{dns}
	der, err := x509.CreateCertificate(rand.Reader, cert, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	return certFile, keyFile
}

// certSerial is the serial of the certificate member m dials with.
func certSerial(t *testing.T, m *member) *big.Int {
	t.Helper()
	cert := m.tr.cfg.ClientTLS.Certificates[0]
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber
}

// TestClientSANVerification: as etcd does unless
// --peer-skip-client-san-verification, the listener refuses a client
// certificate whose IP SANs do not include the address it connects from.
func TestClientSANVerification(t *testing.T) {
	ca := newTestCA(t, "ca")
	cert, key, _ := ca.issue(t, "a", "127.0.0.1")
	elsewhere, elsewhereKey, _ := ca.issue(t, "c", "127.0.0.2") // not where it connects from
	for _, skip := range []bool{false, true} {
		srv, _ := peerTLS(t, cert, key, ca.file, func(i *config.TLSInfo) { i.SkipClientSANVerify = skip })
		a := newMember(t, 1, 100, srv, nil)
		for _, c := range []struct {
			cert, key string
			ok        bool
		}{{cert, key, true}, {elsewhere, elsewhereKey, skip}} {
			_, cli := peerTLS(t, c.cert, c.key, ca.file, nil)
			resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: cli}}).Get(a.url + "/raft/probing")
			if err == nil {
				resp.Body.Close()
			}
			if (err == nil) != c.ok {
				t.Fatalf("skip=%v, client cert %s: error %v, want ok=%v", skip, filepath.Base(c.cert), err, c.ok)
			}
		}
	}
}

// TestAllowedNamesBothWays: as in etcd, where one TLS config serves the
// peer listener and the peer dialer, --peer-cert-allowed-cn and
// --peer-cert-allowed-hostname also apply to the certificate of a member
// this one dials, with etcd's error text. The member outside the list
// is refused in both directions.
func TestAllowedNamesBothWays(t *testing.T) {
	ca := newTestCA(t, "ca")
	for _, c := range []struct {
		name  string
		guard func(*config.TLSInfo)
	}{
		{"CN", func(i *config.TLSInfo) { i.AllowedCNs = []string{"b"} }},
		{"hostname", func(i *config.TLSInfo) { i.AllowedHostnames = []string{"b.example"} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := tlsMember(t, 1, ca, "a", c.guard)
			cCert, cKey, _ := ca.issue(t, "c", "127.0.0.1") // CN c, no DNS SAN
			cSrv, cCli := peerTLS(t, cCert, cKey, ca.file, nil)
			other := newMember(t, 3, 100, cSrv, func(cfg *Config) { cfg.ClientTLS = cCli })
			// Only a dials: other's listener accepts anyone from ca.
			if err := a.tr.AddPeer(3, []string{other.url}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "a's dial error naming the refused certificate", func() bool {
				st, _ := a.tr.PeerStatus(3)
				return strings.Contains(st.LastError, "client certificate authentication failed")
			})
			if st, _ := a.tr.PeerStatus(3); st.ReadingMessage || st.ReadingMsgApp {
				t.Fatalf("a reads from a member outside its allowed %s list: %+v", c.name, st)
			}
			// The other way round, a's listener refuses with the same text.
			resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: cCli}}).Get(a.url + "/raft/probing")
			if err == nil {
				resp.Body.Close()
				t.Fatal("a's listener accepted a certificate outside its allowed list")
			}
		})
	}
}

// TestLocalAddr: with Config.LocalAddr (etcd's SetMemberLocalAddr gate)
// a member connects from that address, so a peer that checks the client
// certificate's IP SANs against the connection's source accepts a
// certificate issued for the member's host IP only, even over loopback
// (etcd's TestEtcdPeerLocalAddr). 127.0.0.2 stands in for the host IP:
// it is on lo, like the rest of 127/8.
func TestLocalAddr(t *testing.T) {
	ca := newTestCA(t, "ca")
	aCert, aKey, _ := ca.issue(t, "a", "127.0.0.1")
	aSrv, aCli := peerTLS(t, aCert, aKey, ca.file, nil)
	a := newMember(t, 1, 100, aSrv, func(c *Config) { c.ClientTLS = aCli })
	hostCert, hostKey, _ := ca.issue(t, "b", "127.0.0.2")
	_, hostCli := peerTLS(t, hostCert, hostKey, ca.file, nil)

	without := newMember(t, 2, 100, nil, func(c *Config) { c.ClientTLS = hostCli })
	if err := without.tr.AddPeer(1, []string{a.url}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the dial from 127.0.0.1 refused by a's SAN check", func() bool {
		st, _ := without.tr.PeerStatus(1)
		return st.LastError != ""
	})

	with := newMember(t, 3, 100, nil, func(c *Config) { c.ClientTLS = hostCli; c.LocalAddr = net.ParseIP("127.0.0.2") })
	if err := with.tr.AddPeer(1, []string{a.url}); err != nil {
		t.Fatal(err)
	}
	// a serves streams to the members it knows only.
	for _, m := range []*member{without, with} {
		if err := a.tr.AddPeer(m.id, []string{m.url}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "streams from 127.0.0.2", func() bool {
		st, _ := with.tr.PeerStatus(1)
		return st.ReadingMsgApp && st.ReadingMessage
	})
	with.tr.Send([]*raftpb.Message{msg(raftpb.MsgVote, 3, 1, 5, 5)})
	poll.Until(t, "the vote from the member with a local address", func() bool { return a.raft.count(raftpb.MsgVote) == 1 })
	if st, _ := without.tr.PeerStatus(1); st.ReadingMsgApp || st.ReadingMessage {
		t.Fatalf("the member without a local address got through: %+v", st)
	}
}
