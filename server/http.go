package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves the HTTP endpoints of the client port (full) or of a
// --listen-metrics-urls listener (metrics and health only).
func (s *Server) httpHandler(full bool, gw http.Handler) http.Handler {
	mux := http.NewServeMux()
	if gw != nil {
		mux.Handle("/v3/", gw)
		mux.Handle("/v3beta/", gw)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/health", s.handleHealth)
	mux.HandleFunc("/livez", s.handleLivez)
	mux.HandleFunc("/readyz", s.handleReadyz)
	if full {
		mux.HandleFunc("/version", s.handleVersion)
		if s.cfg.EnablePprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
	}
	return mux
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]string{
		"etcdserver": EtcdVersion, "etcdcluster": ClusterVersion, "storage": ClusterVersion, "strata": Version,
	})
	w.Write(b)
}

// healthCheck reports whether the member can serve: it has a leader and
// answers a read (linearizable unless serializable is asked for).
func (s *Server) healthCheck(serializable bool) (bool, string) {
	if s.node.Status().Leader == 0 {
		return false, "RAFT NO LEADER"
	}
	if !serializable {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.linearizableRead(ctx); err != nil {
			return false, "QGET ERROR:" + err.Error()
		}
	}
	return true, ""
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ok, reason := s.healthCheck(r.URL.Query().Get("serializable") == "true")
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	health := "false"
	if ok {
		health = "true"
	}
	b, _ := json.Marshal(map[string]string{"health": health, "reason": reason})
	w.Write(b)
}

func (s *Server) handleLivez(w http.ResponseWriter, r *http.Request) {
	s.writeProbe(w, r, []probe{{"serializable_read", func() error { return nil }}})
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	s.writeProbe(w, r, []probe{
		{"data_corruption", func() error { return nil }},
		{"linearizable_read", func() error {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			return s.linearizableRead(ctx)
		}},
		{"non_learner", func() error {
			if m := s.members.Get(s.id); m != nil && m.IsLearner {
				return errLearner
			}
			return nil
		}},
		{"serializable_read", func() error { return nil }},
	})
}

var errLearner = errors.New("this member is a learner")

type probe struct {
	name  string
	check func() error
}

// writeProbe answers a livez/readyz request in the Kubernetes style etcd
// follows: "ok", or with ?verbose one "[+]name ok" line per check.
func (s *Server) writeProbe(w http.ResponseWriter, r *http.Request, probes []probe) {
	excluded := map[string]bool{}
	for _, e := range r.URL.Query()["exclude"] {
		excluded[e] = true
	}
	_, verbose := r.URL.Query()["verbose"]
	var out []byte
	failed := false
	for _, p := range probes {
		if excluded[p.name] {
			out = append(out, "[+]"+p.name+" excluded: ok\n"...)
			continue
		}
		if err := p.check(); err != nil {
			failed = true
			out = append(out, "[-]"+p.name+" failed: reason withheld\n"...)
		} else {
			out = append(out, "[+]"+p.name+" ok\n"...)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if failed {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(append(out, "failed\n"...))
		return
	}
	if verbose {
		w.Write(append(out, "ok\n"...))
		return
	}
	w.Write([]byte("ok\n"))
}
