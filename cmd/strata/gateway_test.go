package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestGatewayFlagsBeforeStart: etcd's command line (cobra) finds the
// subcommand among the arguments with the flags taken out, so etcd's
// TestGateway runs `etcd gateway --endpoints=... start`. An endpoint
// without a port stops the gateway before it listens, with etcd's
// message, which shows the flags reached start's parser.
func TestGatewayFlagsBeforeStart(t *testing.T) {
	for _, args := range [][]string{
		{"start", "--endpoints=localhost"},
		{"--endpoints=localhost", "start"},
		{"--endpoints", "localhost", "start"},
		{"--listen-addr=127.0.0.1:0", "start", "--endpoints", "localhost"},
	} {
		var stdout, stderr bytes.Buffer
		code := runGateway(args, &stdout, &stderr)
		if code != 1 || stdout.String() != `error parsing endpoint "localhost"` {
			t.Errorf("gateway %q: exit %d, stdout %q, stderr %q; want exit 1 and the endpoint refused", args, code, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := runGateway([]string{"stop"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown gateway command "stop"`) {
		t.Errorf("gateway stop: exit %d, stderr %q", code, stderr.String())
	}
}

func TestWithoutSubcommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		rest []string
		ok   bool
	}{
		{[]string{"start"}, []string{}, true},
		{[]string{"start", "--a=1"}, []string{"--a=1"}, true},
		{[]string{"--a=1", "start", "--b", "2"}, []string{"--a=1", "--b", "2"}, true},
		{[]string{"--a", "1", "start"}, []string{"--a", "1"}, true},
		{[]string{"--a", "start"}, nil, false}, // start is --a's value
		{[]string{"--", "start"}, nil, false},
		{[]string{"other", "start"}, nil, false},
		{[]string{"--help"}, nil, false},
		{nil, nil, false},
	} {
		rest, ok := withoutSubcommand(c.args, "start")
		if ok != c.ok || (ok && !slices.Equal(rest, c.rest)) {
			t.Errorf("withoutSubcommand(%q) = %q, %v; want %q, %v", c.args, rest, ok, c.rest, c.ok)
		}
	}
}
