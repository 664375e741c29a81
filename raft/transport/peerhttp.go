package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/version"
)

// The refusals of /members/promote/, with etcd's texts: an etcd member
// forwarding a promote matches them in the body.
var (
	ErrIDNotFound       = errors.New("membership: ID not found")
	ErrMemberNotLearner = errors.New("membership: can only promote a learner member")
	ErrLearnerNotReady  = errors.New("etcdserver: can only promote a learner member which is in sync with leader")
)

// PeerHandlerConfig is what the peer port serves besides raft.
type PeerHandlerConfig struct {
	// Transport serves /raft and below. Required.
	Transport *Transport
	// Members lists the cluster's members for /members. Required.
	Members func() []*membership.Member
	// Versions gives the cluster and storage versions for /version;
	// empty strings print as etcd's "not_decided" and "unknown".
	Versions func() (cluster, storage string)
	// Promote promotes learner id (POST /members/promote/<id>, which a
	// follower sends to the leader) and returns the new membership.
	// authToken is the request's Authorization header. Errors wrapping
	// ErrIDNotFound answer 404, ErrMemberNotLearner and
	// ErrLearnerNotReady 412, anything else 500. Nil answers 500.
	Promote func(ctx context.Context, id uint64, authToken string) ([]*membership.Member, error)
	// Extra are more handlers by pattern: the server's lease forwarding
	// (/leases, /leases/internal), /members/hashkv, /downgrade/enabled.
	Extra map[string]http.Handler
}

// NewPeerHandler is the whole peer port, as etcd lays it out: the raft
// endpoints, /members, /members/promote/, /version, the extras, and 404
// for anything else.
func NewPeerHandler(cfg PeerHandlerConfig) http.Handler {
	t := cfg.Transport
	mux := http.NewServeMux()
	mux.HandleFunc("/", http.NotFound)
	mux.Handle(pathRaft, t.Handler())
	mux.Handle(pathRaft+"/", t.Handler())
	mux.HandleFunc(pathMembers, func(w http.ResponseWriter, r *http.Request) { serveMembers(w, r, t, cfg.Members) })
	mux.HandleFunc(pathPromote, func(w http.ResponseWriter, r *http.Request) { servePromote(w, r, t, cfg.Promote) })
	mux.HandleFunc(pathVersion, func(w http.ResponseWriter, r *http.Request) { serveVersion(w, r, cfg.Versions) })
	for pattern, h := range cfg.Extra {
		mux.Handle(pattern, h)
	}
	return mux
}

// memberJSON is etcd's membership.Member as JSON (wire format: field
// names and order as etcd encodes them; etcd decodes /members into it).
type memberJSON struct {
	ID         uint64   `json:"id"`
	PeerURLs   []string `json:"peerURLs"`
	IsLearner  bool     `json:"isLearner,omitempty"`
	Name       string   `json:"name,omitempty"`
	ClientURLs []string `json:"clientURLs,omitempty"`
}

func membersJSON(ms []*membership.Member) []memberJSON {
	out := make([]memberJSON, 0, len(ms))
	for _, m := range ms {
		out = append(out, memberJSON{ID: m.ID, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner, Name: m.Name, ClientURLs: m.ClientURLs})
	}
	slices.SortFunc(out, func(a, b memberJSON) int { return cmpU64(a.ID, b.ID) })
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func serveMembers(w http.ResponseWriter, r *http.Request, t *Transport, members func() []*membership.Member) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	w.Header().Set(hdrClusterID, t.cidStr)
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(membersJSON(members())); err != nil {
		t.log.Warn("failed to encode membership members", "error", err)
	}
}

func servePromote(w http.ResponseWriter, r *http.Request, t *Transport, promote func(context.Context, uint64, string) ([]*membership.Member, error)) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	w.Header().Set(hdrClusterID, t.cidStr)
	idStr := strings.TrimPrefix(r.URL.Path, pathPromote)
	id, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("member %s not found in cluster", idStr), http.StatusNotFound)
		return
	}
	var ms []*membership.Member
	if promote == nil {
		err = errors.New("transport: promote is not served by this member")
	} else {
		ms, err = promote(r.Context(), id, r.Header.Get("Authorization"))
	}
	if err != nil {
		t.log.Warn("failed to promote a member", "member-id", FormatID(id), "error", err)
		switch {
		case errors.Is(err, ErrIDNotFound):
			http.Error(w, ErrIDNotFound.Error(), http.StatusNotFound)
		case errors.Is(err, ErrMemberNotLearner):
			http.Error(w, ErrMemberNotLearner.Error(), http.StatusPreconditionFailed)
		case errors.Is(err, ErrLearnerNotReady):
			http.Error(w, ErrLearnerNotReady.Error(), http.StatusPreconditionFailed)
		default:
			// etcd's v2 error body for an unexpected failure.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"message":"Internal Server Error"}`))
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if err := json.NewEncoder(w).Encode(membersJSON(ms)); err != nil {
		t.log.Warn("failed to encode members response", "error", err)
	}
}

// versionsJSON is etcd's version.Versions, plus Strata's own release
// (etcd ignores the extra field).
type versionsJSON struct {
	Server  string `json:"etcdserver"`
	Cluster string `json:"etcdcluster"`
	Storage string `json:"storage"`
	Strata  string `json:"strata"`
}

func serveVersion(w http.ResponseWriter, r *http.Request, versions func() (string, string)) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	cluster, storage := "", ""
	if versions != nil {
		cluster, storage = versions()
	}
	if cluster == "" {
		cluster = "not_decided"
	}
	if storage == "" {
		storage = "unknown"
	}
	b, _ := json.Marshal(versionsJSON{Server: version.Etcd, Cluster: cluster, Storage: storage, Strata: version.Strata})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
