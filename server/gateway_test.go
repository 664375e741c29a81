package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func gatewayPost(t *testing.T, url, body string) (int, string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// TestGatewayMaintenanceAnswers: the Maintenance answers etcd sends without
// a response header look the same through the JSON gateway: Defragment
// and MoveLeader are {}, and every Snapshot line starts with the blob
// ({"result":{"blob":...), which etcd's TestCurlV3MaintenanceSnapshot
// matches on.
func TestGatewayMaintenanceAnswers(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if code, body := gatewayPost(t, m.client+"/v3/maintenance/defragment", "{}"); code != 200 || body != "{}" {
		t.Errorf("defragment: %d %q, want 200 {}", code, body)
	}
	move := fmt.Sprintf(`{"targetID":"%d"}`, m.s.ID())
	if code, body := gatewayPost(t, m.client+"/v3/maintenance/transfer-leadership", move); code != 200 || body != "{}" {
		t.Errorf("move leader to itself: %d %q, want 200 {}", code, body)
	}

	res, err := http.Post(m.client+"/v3/maintenance/snapshot", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	var data []byte
	lines := 0
	for sc.Scan() {
		lines++
		line := sc.Text()
		if !strings.HasPrefix(line, `{"result":{"blob":"`) {
			t.Fatalf("snapshot line %d: %.120q", lines, line)
		}
		var msg struct {
			Result map[string]json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			t.Fatalf("snapshot line %d: %v", lines, err)
		}
		if _, ok := msg.Result["header"]; ok {
			t.Fatalf("snapshot line %d carries a header: %.200s", lines, line)
		}
		var blob string
		if err := json.Unmarshal(msg.Result["blob"], &blob); err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(blob)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines < 2 || len(data)%512 != 32 {
		t.Fatalf("snapshot: %d lines, %d bytes", lines, len(data))
	}
}
