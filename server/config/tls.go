package config

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// ClientTLS is the *tls.Config for the client listeners, or nil when no
// certificate is configured and auto-tls is off (plain http/unix only).
// With --auto-tls and no --cert-file, a self-signed certificate for the
// listen hosts is created in <data-dir>/fixtures/client, or reused if one
// is already there, as etcd does. Like etcd's server config it also serves
// as the member's config for dialing its own client listeners (see
// serverTLS: GetClientCertificate).
func (c *Config) ClientTLS() (*tls.Config, error) {
	hosts := hostsOf(append(slices.Clone(c.ListenClientURLs), c.ListenClientHTTPURLs...))
	return c.serverTLS(c.ClientSecurity, "client", hosts)
}

// PeerTLS is the *tls.Config for the peer listeners, or nil without peer
// TLS. --peer-cert-allowed-cn/-hostname restrict which peer certificates
// are accepted. Auto-tls writes to <data-dir>/fixtures/peer.
func (c *Config) PeerTLS() (*tls.Config, error) {
	return c.serverTLS(c.PeerSecurity, "peer", hostsOf(c.ListenPeerURLs))
}

// PeerClientTLS is the *tls.Config for dialing other members: the peer
// client certificate (--peer-client-cert-file, else --peer-cert-file),
// --peer-trusted-ca-file as roots, and the allowed CN and hostname lists
// applied to the dialed member's certificate. nil without peer TLS.
func (c *Config) PeerClientTLS() (*tls.Config, error) {
	info, err := c.resolveAuto(c.PeerSecurity, "peer", hostsOf(c.ListenPeerURLs))
	if err != nil || info.Empty() {
		return nil, err
	}
	certFile, keyFile := info.CertFile, info.KeyFile
	if info.ClientCertFile != "" {
		certFile, keyFile = info.ClientCertFile, info.ClientKeyFile
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg, err := c.baseTLS()
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{cert}
	// As in etcd, where the peer listener and the peer dialer share one
	// TLS config, --peer-cert-allowed-cn and --peer-cert-allowed-hostname
	// also restrict the certificates of the members this one dials (the
	// CRL applies to the listener only).
	if len(info.AllowedCNs) > 0 || len(info.AllowedHostnames) > 0 {
		cfg.VerifyPeerCertificate = verifyCert(nil, info.AllowedCNs, info.AllowedHostnames)
	}
	if info.TrustedCAFile != "" {
		if cfg.RootCAs, err = loadPool(info.TrustedCAFile); err != nil {
			return nil, err
		}
	} else if info.AutoTLS {
		// Self-signed peers cannot be verified by a CA; etcd skips
		// verification for auto-tls too.
		cfg.InsecureSkipVerify = true
	}
	return cfg, nil
}

func (c *Config) baseTLS() (*tls.Config, error) {
	minV, err := tlsVersion(c.TLSMinVersion)
	if err != nil {
		return nil, err
	}
	maxV, err := tlsVersion(c.TLSMaxVersion)
	if err != nil {
		return nil, err
	}
	suites, err := cipherSuites(c.CipherSuites)
	if err != nil {
		return nil, err
	}
	if minV == 0 {
		minV = tls.VersionTLS12
	}
	return &tls.Config{MinVersion: minV, MaxVersion: maxV, CipherSuites: suites}, nil
}

// resolveAuto returns info, or for auto-tls without certificates, info
// pointing at a generated self-signed pair.
func (c *Config) resolveAuto(info TLSInfo, side string, hosts []string) (TLSInfo, error) {
	if !info.AutoTLS || !info.Empty() {
		return info, nil
	}
	dir := filepath.Join(c.DataDir, "fixtures", side)
	certFile, keyFile, err := selfCert(dir, hosts, c.SelfSignedCertValidity)
	if err != nil {
		return info, fmt.Errorf("auto-tls (%s): %w", side, err)
	}
	info.CertFile, info.KeyFile = certFile, keyFile
	return info, nil
}

func (c *Config) serverTLS(info TLSInfo, side string, hosts []string) (*tls.Config, error) {
	info, err := c.resolveAuto(info, side, hosts)
	if err != nil || info.Empty() {
		return nil, err
	}
	cfg, err := c.baseTLS()
	if err != nil {
		return nil, err
	}
	kp := &keyPair{certFile: info.CertFile, keyFile: info.KeyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() }
	// When this member dials its own listeners (the JSON gateway's
	// loopback connection to gRPC) it presents --client-cert-file, else
	// the server certificate, as etcd does with its server config: under
	// --client-cert-auth a dial without a certificate is refused.
	dial := kp
	if info.ClientCertFile != "" {
		dial = &keyPair{certFile: info.ClientCertFile, keyFile: info.ClientKeyFile}
		if _, err := dial.get(); err != nil {
			return nil, err
		}
	}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return dial.get() }
	if info.TrustedCAFile != "" {
		if cfg.ClientCAs, err = loadPool(info.TrustedCAFile); err != nil {
			return nil, err
		}
	}
	// As in etcd, a trusted CA alone already demands a verified client
	// certificate: --trusted-ca-file without --client-cert-auth is not
	// an optional check.
	if info.ClientCertAuth || info.TrustedCAFile != "" {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	var revoked map[string]bool
	if info.CRLFile != "" {
		if revoked, err = loadCRL(info.CRLFile); err != nil {
			return nil, err
		}
	}
	if len(revoked) > 0 || len(info.AllowedCNs) > 0 || len(info.AllowedHostnames) > 0 {
		cfg.VerifyPeerCertificate = verifyCert(revoked, info.AllowedCNs, info.AllowedHostnames)
	}
	return cfg, nil
}

// errCertAuth is etcd's error for a certificate outside the allowed CN or
// hostname lists, on either side of the handshake; the refused side's
// log shows it ("rejected connection on peer endpoint"), the other side
// sees "remote error: tls: bad certificate".
var errCertAuth = errors.New("client certificate authentication failed")

// verifyCert applies the CRL and the allowed CN/hostname lists after Go's
// chain verification. Checking every presented certificate against the
// CRL also catches a revoked intermediate.
func verifyCert(revoked map[string]bool, cns, hostnames []string) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return nil // no client certificate; ClientAuth decides
		}
		var leaf *x509.Certificate
		for i, r := range raw {
			cert, err := x509.ParseCertificate(r)
			if err != nil {
				return err
			}
			if i == 0 {
				leaf = cert
			}
			if revoked[cert.SerialNumber.String()] {
				return errors.New("tls: certificate was revoked")
			}
		}
		if len(cns) > 0 && !slices.Contains(cns, leaf.Subject.CommonName) {
			return errCertAuth
		}
		if len(hostnames) > 0 && !slices.ContainsFunc(hostnames, func(h string) bool { return leaf.VerifyHostname(h) == nil }) {
			return errCertAuth
		}
		return nil
	}
}

// keyPair reloads the certificate when either file changes, so renewed
// certificates (kubeadm renews yearly) take effect without a restart, as
// etcd's per-handshake loading allows.
type keyPair struct {
	certFile, keyFile string

	mu      sync.Mutex // guards the fields below
	cert    *tls.Certificate
	modTime [2]time.Time
}

func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var mt [2]time.Time
	for i, f := range []string{k.certFile, k.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			if k.cert != nil {
				return k.cert, nil // keep serving the last good pair
			}
			return nil, err
		}
		mt[i] = st.ModTime()
	}
	if k.cert != nil && mt == k.modTime {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil // a half-written renewal; retry next handshake
		}
		return nil, err
	}
	k.cert, k.modTime = &cert, mt
	return k.cert, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificates found in %s", file)
	}
	return pool, nil
}

// loadCRL reads a PEM or DER revocation list into a set of serials.
func loadCRL(file string) (map[string]bool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	crl, err := x509.ParseRevocationList(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	out := map[string]bool{}
	for _, e := range crl.RevokedCertificateEntries {
		out[e.SerialNumber.String()] = true
	}
	return out, nil
}

func hostsOf(urls []url.URL) []string {
	var hs []string
	for _, u := range urls {
		if h := u.Hostname(); h != "" && !slices.Contains(hs, h) {
			hs = append(hs, h)
		}
	}
	return hs
}

// selfCert returns dir/cert.pem and dir/key.pem, creating a self-signed
// ECDSA pair for hosts if either is missing. The key is written 0600 in a
// 0700 directory because it is a server secret.
func selfCert(dir string, hosts []string, years uint) (certFile, keyFile string, err error) {
	if years == 0 {
		return "", "", errors.New("self-signed-cert-validity must be greater than 0")
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_, cerr := os.Stat(certFile)
	_, kerr := os.Stat(keyFile)
	if cerr == nil && kerr == nil {
		return certFile, keyFile, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"strata"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Duration(years) * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	var cb, kb bytes.Buffer
	_ = pem.Encode(&cb, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = pem.Encode(&kb, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(keyFile, kb.Bytes(), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(certFile, cb.Bytes(), 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
