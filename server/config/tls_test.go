package config

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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA is a throwaway CA that issues certificates into a directory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	file string
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, dir: dir, file: filepath.Join(dir, name+".crt")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

var serial int64 = 100

// issue writes name.crt/name.key for CN name, valid for 127.0.0.1.
func (ca *testCA) issue(t *testing.T, name string, usage ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// handshake serves one TLS connection with srv and dials it with cli,
// returning the client-side handshake error (or the server's, if the
// client's succeeded but the server refused).
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		err = conn.(*tls.Conn).Handshake()
		if err == nil {
			_, err = conn.Write([]byte{1}) // tells the client it was accepted
		}
		serverErr <- err
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cli)
	if err == nil {
		// TLS 1.3 reports a refused client certificate only on first read.
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if serr := <-serverErr; err == nil && serr != nil {
		return serr
	}
	return err
}

func TestClientTLSWithClientCertAuth(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	other := newTestCA(t, t.TempDir(), "other")
	srvCert, srvKey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, "root", x509.ExtKeyUsageClientAuth)
	badCert, badKey := other.issue(t, "root", x509.ExtKeyUsageClientAuth)

	c, _ := mustParse(t, []string{
		"--name=n1", "--cert-file=" + srvCert, "--key-file=" + srvKey, "--trusted-ca-file=" + ca.file,
		"--client-cert-auth=true", "--listen-client-urls=https://127.0.0.1:2379", "--advertise-client-urls=https://127.0.0.1:2379",
	}, nil)
	srv, err := c.ClientTLS()
	if err != nil || srv == nil {
		t.Fatalf("ClientTLS = %v, %v", srv, err)
	}
	if srv.ClientAuth != tls.RequireAndVerifyClientCert || srv.MinVersion != tls.VersionTLS12 {
		t.Errorf("ClientAuth %v MinVersion %x", srv.ClientAuth, srv.MinVersion)
	}
	roots, _ := loadPool(ca.file)
	good, _ := tls.LoadX509KeyPair(cliCert, cliKey)
	bad, _ := tls.LoadX509KeyPair(badCert, badKey)
	if err := handshake(t, srv, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{good}, ServerName: "127.0.0.1"}); err != nil {
		t.Errorf("client with a CA-signed certificate refused: %v", err)
	}
	if err := handshake(t, srv, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}); err == nil {
		t.Error("client without a certificate accepted")
	}
	if err := handshake(t, srv, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{bad}, ServerName: "127.0.0.1"}); err == nil {
		t.Error("client with another CA's certificate accepted")
	}
}

// TestClientTLSDialsWithOwnCertificate: the client listeners' config also
// dials them, as etcd's server config does for the JSON gateway's loopback
// connection: it presents the server certificate, or --client-cert-file
// when given, so a member under --client-cert-auth accepts its own dial.
func TestClientTLSDialsWithOwnCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	srvCert, srvKey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	gwCert, gwKey := ca.issue(t, "gateway", x509.ExtKeyUsageClientAuth)
	args := []string{"--name=n1", "--cert-file=" + srvCert, "--key-file=" + srvKey, "--trusted-ca-file=" + ca.file,
		"--client-cert-auth=true", "--listen-client-urls=https://127.0.0.1:2379", "--advertise-client-urls=https://127.0.0.1:2379"}
	for _, tc := range []struct {
		extra  []string
		wantCN string
	}{
		{nil, "server"},
		{[]string{"--client-cert-file=" + gwCert, "--client-key-file=" + gwKey}, "gateway"},
	} {
		c, _ := mustParse(t, append(args[:len(args):len(args)], tc.extra...), nil)
		srv, err := c.ClientTLS()
		if err != nil {
			t.Fatal(err)
		}
		dial := srv.Clone()
		dial.InsecureSkipVerify = true
		if err := handshake(t, srv, dial); err != nil {
			t.Errorf("%q: the member's own dial was refused: %v", tc.extra, err)
		}
		if dial.GetClientCertificate == nil {
			t.Fatalf("%q: no client certificate to present", tc.extra)
		}
		cert, err := dial.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil || leaf.Subject.CommonName != tc.wantCN {
			t.Errorf("%q: presents %v (%v), want CN %q", tc.extra, leaf.Subject, err, tc.wantCN)
		}
	}
}

func TestPeerTLSAllowedCN(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	peerCert, peerKey := ca.issue(t, "node1", x509.ExtKeyUsageServerAuth)
	okCert, okKey := ca.issue(t, "node2", x509.ExtKeyUsageClientAuth)
	noCert, noKey := ca.issue(t, "intruder", x509.ExtKeyUsageClientAuth)
	c, _ := mustParse(t, []string{"--name=n1", "--peer-cert-file=" + peerCert, "--peer-key-file=" + peerKey,
		"--peer-trusted-ca-file=" + ca.file, "--peer-client-cert-auth", "--peer-cert-allowed-cn=node2"}, nil)
	srv, err := c.PeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	roots, _ := loadPool(ca.file)
	ok, _ := tls.LoadX509KeyPair(okCert, okKey)
	no, _ := tls.LoadX509KeyPair(noCert, noKey)
	if err := handshake(t, srv, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{ok}, ServerName: "127.0.0.1"}); err != nil {
		t.Errorf("allowed CN refused: %v", err)
	}
	if err := handshake(t, srv, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{no}, ServerName: "127.0.0.1"}); err == nil {
		t.Error("CN outside --peer-cert-allowed-cn accepted")
	}
	cli, err := c.PeerClientTLS()
	if err != nil || cli == nil || len(cli.Certificates) != 1 || cli.RootCAs == nil {
		t.Errorf("PeerClientTLS = %+v, %v", cli, err)
	}
}

func TestAutoTLS(t *testing.T) {
	dir := t.TempDir()
	c, _ := mustParse(t, []string{"--name=n1", "--data-dir=" + dir, "--auto-tls",
		"--listen-client-urls=https://127.0.0.1:2379", "--advertise-client-urls=https://127.0.0.1:2379"}, nil)
	srv, err := c.ClientTLS()
	if err != nil || srv == nil {
		t.Fatalf("ClientTLS = %v, %v", srv, err)
	}
	keyFile := filepath.Join(dir, "fixtures", "client", "key.pem")
	st, err := os.Stat(keyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("auto-tls key: %v %v", st, err)
	}
	first, _ := os.ReadFile(keyFile)
	if _, err := c.ClientTLS(); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(keyFile); string(again) != string(first) {
		t.Error("auto-tls regenerated an existing key")
	}
	if err := handshake(t, srv, &tls.Config{InsecureSkipVerify: true}); err != nil {
		t.Errorf("handshake with auto-tls certificate: %v", err)
	}
	if none, err := Default().ClientTLS(); none != nil || err != nil {
		t.Errorf("no TLS configured: ClientTLS = %v, %v", none, err)
	}
}

func TestCipherSuitesAndVersions(t *testing.T) {
	c, _ := mustParse(t, []string{"--name=n1", "--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
		"--tls-max-version=TLS1.2", "--auto-tls", "--data-dir=" + t.TempDir()}, nil)
	srv, err := c.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	if len(srv.CipherSuites) != 2 || srv.CipherSuites[1] != tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 || srv.MaxVersion != tls.VersionTLS12 {
		t.Errorf("suites %v max %x", srv.CipherSuites, srv.MaxVersion)
	}
}

func TestClientCRL(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	srvCert, srvKey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	okCert, okKey := ca.issue(t, "alice", x509.ExtKeyUsageClientAuth)
	revCert, revKey := ca.issue(t, "mallory", x509.ExtKeyUsageClientAuth)
	rev, _ := tls.LoadX509KeyPair(revCert, revKey)
	leaf, _ := x509.ParseCertificate(rev.Certificate[0])
	crlDER, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    big.NewInt(1),
		ThisUpdate:                time.Now().Add(-time.Minute),
		NextUpdate:                time.Now().Add(time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: leaf.SerialNumber, RevocationTime: time.Now()}},
	}, ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	crlFile := filepath.Join(dir, "crl.pem")
	writePEM(t, crlFile, "X509 CRL", crlDER)
	c, _ := mustParse(t, []string{"--name=n1", "--cert-file=" + srvCert, "--key-file=" + srvKey, "--trusted-ca-file=" + ca.file,
		"--client-cert-auth", "--client-crl-file=" + crlFile}, nil)
	srv, err := c.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	roots, _ := loadPool(ca.file)
	ok, _ := tls.LoadX509KeyPair(okCert, okKey)
	if err := handshake(t, srv, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{ok}, ServerName: "127.0.0.1"}); err != nil {
		t.Errorf("unrevoked certificate refused: %v", err)
	}
	if err := handshake(t, srv, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{rev}, ServerName: "127.0.0.1"}); err == nil {
		t.Error("revoked certificate accepted")
	}
}
