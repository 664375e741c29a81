package server

import (
	"context"
	"expvar"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// /debug/vars is etcd's expvar endpoint on the client port: one JSON
// object holding every published variable: Go's own "cmdline" and
// "memstats", and, as etcd publishes them, "file_descriptor_limit" (the
// soft RLIMIT_NOFILE) and "raft.status".
//
// raft.status carries the fields of etcd's (go.etcd.io/raft's Status
// JSON) that this member's raft loop exports: id, term, commit, lead (ids
// in hex), raftState (when a leader is known), applied, and progress (on
// the leader, each member of raft's configuration, learners included:
// match, next, state; empty on a follower, as etcd's). etcd's vote and
// leadtransferee are left out rather than guessed.
//
// expvar names are process-wide and cannot be published twice, so the
// variables are published once and read the member that served last
// (debugVarsServer); one process runs one member outside tests.

var (
	debugVarsOnce   sync.Once
	debugVarsServer atomic.Pointer[Server]
)

func publishDebugVars() {
	expvar.Publish("file_descriptor_limit", expvar.Func(func() any {
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return 0
		}
		return rl.Cur
	}))
	expvar.Publish("raft.status", expvar.Func(func() any {
		s := debugVarsServer.Load()
		if s == nil {
			return nil
		}
		return s.raftStatusVar()
	}))
}

// raftStatusVar is raft.status's value (see above).
func (s *Server) raftStatusVar() any {
	st := s.node.Status()
	state := "" // no leader known: a follower or a candidate, not told apart here
	switch {
	case st.Leader == st.ID:
		state = "StateLeader"
	case st.Leader != 0:
		state = "StateFollower"
	}
	type progress struct {
		Match uint64 `json:"match"`
		Next  uint64 `json:"next"`
		State string `json:"state"`
	}
	prs := map[string]progress{}
	if st.Leader == st.ID {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		full, _ := s.node.PeerProgress(ctx)
		cancel()
		for id, pr := range full {
			prs[fmt.Sprintf("%x", id)] = progress{pr.Match, pr.Next, pr.State}
		}
	}
	return struct {
		ID        string              `json:"id"`
		Term      uint64              `json:"term"`
		Commit    uint64              `json:"commit"`
		Lead      string              `json:"lead"`
		RaftState string              `json:"raftState,omitempty"`
		Applied   uint64              `json:"applied"`
		Progress  map[string]progress `json:"progress"`
	}{fmt.Sprintf("%x", st.ID), st.Term, st.Committed, fmt.Sprintf("%x", st.Leader), state, st.Applied, prs}
}

func (s *Server) handleDebugVars(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r, http.MethodGet) {
		return
	}
	debugVarsOnce.Do(publishDebugVars)
	debugVarsServer.Store(s)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	fmt.Fprint(w, "{\n")
	first := true
	expvar.Do(func(kv expvar.KeyValue) {
		if !first {
			fmt.Fprint(w, ",\n")
		}
		first = false
		fmt.Fprintf(w, "%q: %s", kv.Key, kv.Value)
	})
	fmt.Fprint(w, "\n}\n")
}

// allowMethod answers a request whose method is not m with etcd's 405.
func allowMethod(w http.ResponseWriter, r *http.Request, m string) bool {
	if r.Method == m {
		return true
	}
	w.Header().Set("Allow", m)
	http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	return false
}
