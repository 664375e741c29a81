package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/status"
)

// httpHandler serves the HTTP endpoints of the client port (full) or of a
// --listen-metrics-urls listener (metrics and health only).
func (s *Server) httpHandler(full bool, gw http.Handler) http.Handler {
	mux := http.NewServeMux()
	if gw != nil {
		mux.Handle("/v3/", gw)
		mux.Handle("/v3beta/", gw)
	}
	mux.Handle("/metrics", s.metrics.handler)
	mux.HandleFunc("/health", s.handleHealth)
	for path, probes := range map[string]func(*http.Request) []probe{"/livez": s.livezProbes, "/readyz": s.readyzProbes} {
		kind := path[1:] // the type label of etcd_server_healthcheck
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			writeProbes(w, r, s.recordProbes(kind, probes(r)), r.URL.Query()["exclude"])
		})
		// etcd serves each check alone too, at /readyz/<name>.
		mux.HandleFunc(path+"/", func(w http.ResponseWriter, r *http.Request) {
			name := strings.TrimPrefix(r.URL.Path, path+"/")
			for _, p := range s.recordProbes(kind, probes(r)) {
				if p.name == name {
					writeProbes(w, r, []probe{p}, nil)
					return
				}
			}
			http.NotFound(w, r)
		})
	}
	if full {
		mux.HandleFunc("/version", s.handleVersion)
		mux.HandleFunc("/debug/vars", s.handleDebugVars)
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
	if !allowMethod(w, r, http.MethodGet) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]string{
		"etcdserver": EtcdVersion, "etcdcluster": s.versions.reported(), "storage": s.versions.Storage(), "strata": Version,
	})
	w.Write(b)
}

// healthCheck reports whether the member can serve: it has a leader and
// answers a read (linearizable unless serializable is asked for).
func (s *Server) healthCheck(serializable bool) (bool, string) {
	// A serializable check asks only whether this member serves local
	// reads, which it does without a leader (etcd's checkLeader).
	if !serializable && s.node.Status().Leader == 0 {
		return false, "RAFT NO LEADER"
	}
	// A local read, as etcd's: a linearizable one unless serializable is
	// asked for, bounded by the request timeout; a failure is reported
	// with etcd's text of the error.
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
	defer cancel()
	if _, err := s.rangeRead(ctx, healthRange(serializable)); err != nil {
		return false, "RANGE ERROR:" + status.Convert(toGRPCError(err)).Message()
	}
	return true, ""
}

// healthRange is the read etcd's health checks make: at most one key,
// keys only, of the empty key.
func healthRange(serializable bool) *pb.RangeRequest {
	return &pb.RangeRequest{KeysOnly: true, Limit: 1, Serializable: serializable}
}

// alarmHealth is /health's first check, as etcd's: an active alarm whose
// type is not named by an ?exclude= parameter makes the member unhealthy.
func (s *Server) alarmHealth(excluded []string) (bool, string) {
	for _, a := range s.alarms.list() {
		if slices.Contains(excluded, a.Alarm.String()) {
			continue
		}
		switch a.Alarm {
		case pb.AlarmType_NOSPACE:
			return false, "ALARM NOSPACE"
		case pb.AlarmType_CORRUPT:
			return false, "ALARM CORRUPT"
		}
		return false, "ALARM UNKNOWN"
	}
	return true, ""
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ok, reason := s.alarmHealth(r.URL.Query()["exclude"])
	if ok {
		ok, reason = s.healthCheck(r.URL.Query().Get("serializable") == "true")
	}
	health := "false"
	if ok {
		health = "true"
		s.metrics.healthSuccess.Inc()
	} else {
		s.metrics.healthFailed.Inc()
	}
	b, _ := json.Marshal(map[string]string{"health": health, "reason": reason})
	if !ok {
		// etcd answers a failure with http.Error: plain text, a newline.
		http.Error(w, string(b), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (s *Server) livezProbes(r *http.Request) []probe {
	return []probe{{"serializable_read", s.readProbe(r, true)}}
}

// readProbe is etcd's serializable_read and linearizable_read check.
func (s *Server) readProbe(r *http.Request, serializable bool) func() error {
	return func() error {
		// The request's own context, as etcd's: a linearizable read
		// without a leader fails when its read index times out.
		_, err := s.rangeRead(r.Context(), healthRange(serializable))
		return err
	}
}

// recordProbes wraps each check so that running it updates etcd's
// etcd_server_healthcheck and etcd_server_healthchecks_total.
func (s *Server) recordProbes(kind string, ps []probe) []probe {
	out := make([]probe, len(ps))
	for i, p := range ps {
		out[i] = probe{p.name, func() error {
			err := p.check()
			s.metrics.observeHealthCheck(kind, p.name, err)
			return err
		}}
	}
	return out
}

func (s *Server) readyzProbes(r *http.Request) []probe {
	return []probe{
		{"data_corruption", func() error {
			if s.alarms.active(pb.AlarmType_CORRUPT) {
				return errCorruptAlarm
			}
			return nil
		}},
		{"linearizable_read", s.readProbe(r, false)},
		{"non_learner", func() error {
			if m := s.members.Get(s.id); m != nil && m.IsLearner {
				return errLearner
			}
			return nil
		}},
		{"serializable_read", s.readProbe(r, true)},
	}
}

var (
	errLearner      = errors.New("not supported for learner") // etcd's text
	errCorruptAlarm = errors.New("alarm activated: CORRUPT")  // etcd's text
)

type probe struct {
	name  string
	check func() error
}

// writeProbes answers a livez/readyz request as etcd 3.7 does: "ok", or
// with ?verbose one "[+]name ok" line per check first; checks named in
// excluded are skipped and not listed. A failure is a 503 whose body
// (written as http.Error does) has one line per check, "[-]name failed:
// reason" for the failed ones.
func writeProbes(w http.ResponseWriter, r *http.Request, probes []probe, excluded []string) {
	_, verbose := r.URL.Query()["verbose"]
	var out []byte
	failed := false
	for _, p := range probes {
		if slices.Contains(excluded, p.name) {
			continue
		}
		if err := p.check(); err != nil {
			failed = true
			out = fmt.Appendf(out, "[-]%s failed: %s\n", p.name, status.Convert(toGRPCError(err)).Message())
		} else {
			out = append(out, "[+]"+p.name+" ok\n"...)
		}
	}
	if failed {
		http.Error(w, string(out), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if verbose {
		w.Write(append(out, "ok\n"...))
		return
	}
	w.Write([]byte("ok\n"))
}
