package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// kubeadmPKI issues the certificates kubeadm puts in /etc/kubernetes/pki/etcd.
func kubeadmPKI(t *testing.T) (ca *testCA, files map[string]string) {
	dir := t.TempDir()
	ca = newTestCA(t, dir, "ca")
	files = map[string]string{"ca": ca.file}
	files["server.crt"], files["server.key"] = ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	files["peer.crt"], files["peer.key"] = ca.issue(t, "peer", x509.ExtKeyUsageServerAuth)
	files["client.crt"], files["client.key"] = ca.issue(t, "kube-apiserver-etcd-client", x509.ExtKeyUsageClientAuth)
	return ca, files
}

// kubeadmArgs is the command line kubeadm's etcd static pod manifest
// uses, in its order. newer selects the etcd 3.6+ spellings kubeadm
// emits for newer versions.
func kubeadmArgs(f map[string]string, newer bool) []string {
	args := []string{
		"--advertise-client-urls=https://10.0.0.1:2379",
		"--cert-file=" + f["server.crt"],
		"--client-cert-auth=true",
		"--data-dir=/var/lib/etcd",
	}
	if newer {
		args = append(args, "--feature-gates=InitialCorruptCheck=true")
	} else {
		args = append(args, "--experimental-initial-corrupt-check=true")
	}
	if !newer {
		args = append(args, "--experimental-watch-progress-notify-interval=5s")
	}
	args = append(args,
		"--initial-advertise-peer-urls=https://10.0.0.1:2380",
		"--initial-cluster=node1=https://10.0.0.1:2380",
		"--key-file="+f["server.key"],
		"--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.1:2379",
		"--listen-metrics-urls=http://127.0.0.1:2381",
		"--listen-peer-urls=https://10.0.0.1:2380",
		"--name=node1",
		"--peer-cert-file="+f["peer.crt"],
		"--peer-client-cert-auth=true",
		"--peer-key-file="+f["peer.key"],
		"--peer-trusted-ca-file="+f["ca"],
		"--snapshot-count=10000",
		"--trusted-ca-file="+f["ca"],
	)
	if newer {
		args = append(args, "--watch-progress-notify-interval=5s")
	}
	return args
}

func checkKubeadm(t *testing.T, c *Config, f map[string]string) {
	t.Helper()
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", c.Name, "node1"},
		{"data-dir", c.DataDir, "/var/lib/etcd"},
		{"WALDir", c.WALDir(), "/var/lib/etcd/member/wal"},
		{"listen-client-urls", urlsString(c.ListenClientURLs), "https://10.0.0.1:2379,https://127.0.0.1:2379"},
		{"advertise-client-urls", urlsString(c.AdvertiseClientURLs), "https://10.0.0.1:2379"},
		{"listen-peer-urls", urlsString(c.ListenPeerURLs), "https://10.0.0.1:2380"},
		{"listen-metrics-urls", urlsString(c.ListenMetricsURLs), "http://127.0.0.1:2381"},
		{"initial-cluster", c.InitialCluster, "node1=https://10.0.0.1:2380"},
		{"snapshot-count", c.SnapshotCount, uint64(10000)},
		{"watch-progress-notify-interval", c.WatchProgressNotifyInterval, 5 * time.Second},
		{"InitialCorruptCheck", c.FeatureEnabled(FeatureInitialCorruptCheck), true},
		{"client security", c.ClientSecurity, TLSInfo{CertFile: f["server.crt"], KeyFile: f["server.key"], TrustedCAFile: f["ca"], ClientCertAuth: true}},
		{"peer security", c.PeerSecurity, TLSInfo{CertFile: f["peer.crt"], KeyFile: f["peer.key"], TrustedCAFile: f["ca"], ClientCertAuth: true}},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}
	srv, err := c.ClientTLS()
	if err != nil || srv == nil || srv.ClientAuth != tls.RequireAndVerifyClientCert || srv.ClientCAs == nil {
		t.Fatalf("ClientTLS = %+v, %v", srv, err)
	}
	roots, _ := loadPool(f["ca"])
	cert, _ := tls.LoadX509KeyPair(f["client.crt"], f["client.key"])
	if err := handshake(t, srv, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"}); err != nil {
		t.Errorf("apiserver client certificate refused: %v", err)
	}
	if p, err := c.PeerTLS(); err != nil || p == nil || p.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("PeerTLS = %+v, %v", p, err)
	}
}

func TestKubeadmFlags(t *testing.T) {
	_, f := kubeadmPKI(t)
	for _, newer := range []bool{false, true} {
		t.Run(fmt.Sprintf("newer=%v", newer), func(t *testing.T) {
			c, _ := mustParse(t, kubeadmArgs(f, newer), nil)
			checkKubeadm(t, c, f)
		})
	}
}

// The same member from ETCD_* variables only.
func TestKubeadmEnvironment(t *testing.T) {
	_, f := kubeadmPKI(t)
	var env []string
	for _, a := range kubeadmArgs(f, true) {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		env = append(env, EnvName(name)+"="+val)
	}
	c, _ := mustParse(t, nil, env)
	checkKubeadm(t, c, f)
}

// The same member from a --config-file with etcd's keys.
func TestKubeadmConfigFile(t *testing.T) {
	_, f := kubeadmPKI(t)
	yml := fmt.Sprintf(`name: node1
data-dir: /var/lib/etcd
advertise-client-urls: https://10.0.0.1:2379
initial-advertise-peer-urls: https://10.0.0.1:2380
initial-cluster: node1=https://10.0.0.1:2380
listen-client-urls: https://127.0.0.1:2379,https://10.0.0.1:2379
listen-metrics-urls: http://127.0.0.1:2381
listen-peer-urls: https://10.0.0.1:2380
snapshot-count: 10000
feature-gates: InitialCorruptCheck=true
watch-progress-notify-interval: 5000000000
client-transport-security:
  cert-file: %s
  key-file: %s
  client-cert-auth: true
  trusted-ca-file: %s
peer-transport-security:
  cert-file: %s
  key-file: %s
  client-cert-auth: true
  trusted-ca-file: %s
`, f["server.crt"], f["server.key"], f["ca"], f["peer.crt"], f["peer.key"], f["ca"])
	c, _ := mustParse(t, []string{"--config-file=" + writeFile(t, yml)}, nil)
	checkKubeadm(t, c, f)
}
