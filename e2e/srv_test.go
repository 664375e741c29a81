package e2e

// DNS SRV bootstrap (--discovery-srv): three strata processes find each
// other through _etcd-server._tcp records served by a DNS server this
// test runs on loopback (github.com/miekg/dns), which the members ask
// through Strata's --discovery-srv-server. Neither member is given
// --initial-cluster.

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/strata-db/strata/e2e/harness"
)

// srvServer answers SRV queries for <service><zone> with one record per
// port, each with target "localhost.", and nothing else.
type srvServer struct {
	zone string
	// service is the record set served ("_etcd-server._tcp." when
	// empty: peer bootstrap; the gateway asks for "_etcd-client._tcp.").
	service string
	ports   []int
	mu      sync.Mutex
	queries int
}

func (s *srvServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	for _, q := range r.Question {
		s.mu.Lock()
		s.queries++
		s.mu.Unlock()
		service := s.service
		if service == "" {
			service = "_etcd-server._tcp."
		}
		if q.Qtype != dns.TypeSRV || !strings.EqualFold(q.Name, service+s.zone) {
			continue
		}
		for _, p := range s.ports {
			m.Answer = append(m.Answer, &dns.SRV{
				Hdr:    dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 5},
				Target: "localhost.", Port: uint16(p), Priority: 0, Weight: 10,
			})
		}
	}
	if len(m.Answer) == 0 {
		m.Rcode = dns.RcodeNameError
	}
	_ = w.WriteMsg(m)
}

func TestDiscoverySRV(t *testing.T) {
	bin := strataTarget(t)
	const zone = "strata.test."
	dir := t.TempDir()
	var members []*harness.Server
	srv := &srvServer{zone: zone}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ds := &dns.Server{PacketConn: pc, Handler: srv}
	go func() { _ = ds.ActivateAndServe() }()
	t.Cleanup(func() { _ = ds.Shutdown() })

	for i := 1; i <= 3; i++ {
		m, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: "m" + strconv.Itoa(i), Dir: dir,
			Flags: []string{"--initial-cluster=", "--discovery-srv=" + strings.TrimSuffix(zone, "."),
				"--discovery-srv-server=" + pc.LocalAddr().String(),
				"--heartbeat-interval=50", "--election-timeout=500", "--log-level=info"}})
		if err != nil {
			t.Fatal(err)
		}
		u, err := url2port(m.PeerURL)
		if err != nil {
			t.Fatal(err)
		}
		srv.ports = append(srv.ports, u)
		members = append(members, m)
	}
	t.Cleanup(func() {
		for _, m := range members {
			_ = m.Stop()
			if t.Failed() {
				t.Logf("log of %s:\n%s", m.Name(), m.LogTail(40))
			}
		}
	})
	// No member is ready before a quorum runs: start them together.
	errc := make(chan error, len(members))
	for _, m := range members {
		go func() { errc <- m.Start() }()
	}
	for range members {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	var eps []string
	for _, m := range members {
		eps = append(eps, m.ClientURL)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 3 {
		t.Fatalf("the SRV-bootstrapped cluster has %d members, want 3: %v", len(ml.Members), ml.Members)
	}
	for _, pm := range ml.Members {
		if len(pm.PeerURLs) != 1 || !strings.HasPrefix(pm.PeerURLs[0], "http://localhost:") {
			t.Fatalf("member %x has peer URLs %v, want the SRV target http://localhost:<port>", pm.ID, pm.PeerURLs)
		}
	}
	if _, err := cli.Put(ctx, "srv", "ok"); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Get(ctx, "srv")
		c.Close()
		if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "ok" {
			t.Fatalf("%s: get srv: %v %v", m.Name(), r, err)
		}
	}
	srv.mu.Lock()
	q := srv.queries
	srv.mu.Unlock()
	if q < 3 {
		t.Fatalf("the DNS server answered %d queries; each member should have asked it", q)
	}
	t.Logf("SRV: 3 members bootstrapped from _etcd-server._tcp.%s (%d DNS queries), member list and a put agree", zone, q)
}

// url2port is the port of a URL like http://127.0.0.1:1234.
func url2port(u string) (int, error) {
	i := strings.LastIndex(u, ":")
	return strconv.Atoi(u[i+1:])
}
