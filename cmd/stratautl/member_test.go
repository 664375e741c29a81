package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-db/strata/internal/testport"
	"github.com/strata-db/strata/server"
	"github.com/strata-db/strata/server/config"
)

// member is a real server on loopback ports, for tests of the offline
// tools on data dirs a member wrote.
type member struct {
	s    *server.Server
	cfg  *config.Config
	conn *grpc.ClientConn
	kv   pb.KVClient
}

// freePort reserves a port for this test process (testport: outside the
// kernel's ephemeral range, never handed to another test process).
func freePort(t *testing.T) int {
	t.Helper()
	return testport.Port(t)
}

func startMember(t *testing.T, dataDir string) *member {
	t.Helper()
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cfg, err := config.Parse([]string{"--name", "m1", "--data-dir", dataDir, "--disk-probe=false",
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m1=" + peer}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		s.Stop()
		t.Fatal(err)
	}
	select {
	case <-s.Ready():
	case <-time.After(30 * time.Second):
		s.Stop()
		t.Fatal("member not ready")
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(client, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	m := &member{s: s, cfg: cfg, conn: conn, kv: pb.NewKVClient(conn)}
	t.Cleanup(func() { m.stop(t) })
	return m
}

// put writes n keys under prefix.
func (m *member) put(t *testing.T, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%s%04d", prefix, i)
		if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: []byte("value-" + k)}); err != nil {
			t.Fatal(err)
		}
	}
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	if m.s == nil {
		return
	}
	m.conn.Close()
	err := m.s.Stop()
	m.s = nil
	if err != nil {
		t.Fatal(err)
	}
}

func (m *member) dbPath() string  { return filepath.Join(m.cfg.DataDir, "member", "snap", "db") }
func (m *member) walDir() string  { return m.cfg.WALDir() }
func (m *member) dataDir() string { return m.cfg.DataDir }
