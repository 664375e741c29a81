package e2e

// strata gateway start (etcd's L4 gateway) in front of a 3-member cluster:
// clientv3 clients that know only the gateway's address keep working while
// each member in turn is SIGKILLed, with the endpoints given by --endpoints
// and found by --discovery-srv (_etcd-client._tcp records from a DNS
// server this test runs on loopback, github.com/miekg/dns).

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

func TestGateway(t *testing.T) {
	bin := strataTarget(t)
	c := startCluster(t, bin, clusterFlags)
	const zone = "strata.test."
	srv := &srvServer{zone: zone, service: "_etcd-client._tcp."}
	var hostports []string
	for _, m := range c.Members {
		p, err := url2port(m.ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		srv.ports = append(srv.ports, p)
		hostports = append(hostports, strings.TrimPrefix(m.ClientURL, "http://"))
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ds := &dns.Server{PacketConn: pc, Handler: srv}
	go func() { _ = ds.ActivateAndServe() }()
	t.Cleanup(func() { _ = ds.Shutdown() })

	modes := []struct {
		name  string
		flags []string
	}{
		{"endpoints", []string{"--endpoints=" + strings.Join(hostports, ",")}},
		{"discovery-srv", []string{"--discovery-srv=" + strings.TrimSuffix(zone, "."),
			"--discovery-srv-server=" + pc.LocalAddr().String(), "--insecure-discovery"}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ports, err := harness.FreePorts(1)
			if err != nil {
				t.Fatal(err)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
			var out bytes.Buffer
			gw := exec.Command(bin, append([]string{"gateway", "start", "--listen-addr=" + addr, "--retry-delay=1s"}, mode.flags...)...)
			gw.Stdout, gw.Stderr = &out, &out
			if err := gw.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- gw.Wait() }()
			t.Cleanup(func() {
				_ = gw.Process.Kill()
				<-exited
				if t.Failed() {
					t.Logf("gateway output:\n%s", out.String())
				}
			})
			poll.UntilNil(t, "the gateway to listen on "+addr, func() error {
				select {
				case err := <-exited:
					t.Fatalf("the gateway exited: %v\n%s", err, out.String())
				default:
				}
				conn, err := net.Dial("tcp", addr)
				if err == nil {
					conn.Close()
				}
				return err
			})
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			puts, retried := 0, 0
			// put retries a failed attempt (the connection of a killed
			// member breaks under it) until it is acknowledged.
			put := func(k, v string) {
				t.Helper()
				poll.UntilNil(t, "put "+k+" through the gateway", func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					_, err := cli.Put(ctx, k, v)
					if err != nil {
						retried++
					}
					return err
				})
				puts++
			}
			for round, victim := range c.Members {
				if err := victim.Kill(); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 20; i++ {
					put(fmt.Sprintf("gw/%s/%d/%02d", mode.name, round, i), victim.Name())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := cli.Get(ctx, fmt.Sprintf("gw/%s/%d/", mode.name, round), clientv3.WithPrefix())
				cancel()
				if err != nil {
					t.Fatalf("%s down: get through the gateway: %v", victim.Name(), err)
				}
				if len(r.Kvs) != 20 {
					t.Fatalf("%s down: %d of 20 acknowledged puts read back through the gateway", victim.Name(), len(r.Kvs))
				}
				if err := victim.Restart(); err != nil {
					t.Fatal(err)
				}
			}
			srv.mu.Lock()
			q := srv.queries
			srv.mu.Unlock()
			if mode.name == "discovery-srv" && q == 0 {
				t.Fatal("the gateway never asked the DNS server")
			}
			t.Logf("GATEWAY %s: each of 3 members killed in turn; %d puts acknowledged through the gateway and read back, %d failed attempts retried",
				mode.name, puts, retried)
		})
	}
}
