package transport

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/strata-db/strata/version"
)

// Paths on the peer port (wire format, never change: etcd members dial
// exactly these).
const (
	pathRaft          = "/raft"
	pathProbing       = "/raft/probing"
	pathStream        = "/raft/stream/"
	pathStreamMsgApp  = "/raft/stream/msgapp"  // + "/<sender id>"
	pathStreamMessage = "/raft/stream/message" // + "/<sender id>"
	pathSnapshot      = "/raft/snapshot"
	pathMembers       = "/members"
	pathPromote       = "/members/promote/" // + "<decimal id>"
	pathVersion       = "/version"
)

// Headers (wire format, never change). Ids are lower-case hex without
// leading zeros, as etcd's types.ID prints them.
const (
	hdrClusterID         = "X-Etcd-Cluster-ID"     // requests and responses
	hdrFrom              = "X-Server-From"         // sender's member id
	hdrServerVersion     = "X-Server-Version"      // sender's (responder's) server version
	hdrMinClusterVersion = "X-Min-Cluster-Version" // lowest cluster version the sender runs in
	hdrRaftTo            = "X-Raft-To"             // stream requests: the member the stream is for
	hdrPeerURLs          = "X-PeerURLs"            // sender's advertised peer URLs, comma-separated

	// Strata's own headers. etcd ignores unknown headers, so these only
	// change anything between two Strata members.
	hdrStrataFeatures    = "X-Strata-Features"          // space-separated feature tokens
	hdrSnapshotEncoding  = "X-Strata-Snapshot-Encoding" // how the payload after a MsgSnap is encoded
	hdrSnapshotImageSize = "X-Strata-Snapshot-Size"     // decoded payload size, with an encoding
)

// Strata feature tokens, sent in X-Strata-Features on every request and
// stream response.
const (
	// featureSnapZstd: the member accepts snapshot payloads encoded as
	// encodingZstdXXH64.
	featureSnapZstd = "snapshot-zstd-xxh64"
)

// localFeatures is what this build announces.
var localFeatures = featureSnapZstd

// Refusal texts: the body of etcd's refusals (http.Error adds "\n").
// etcd matches the 412 texts exactly, so they are wire format.
const (
	textIncompatibleVersion = "incompatible version"
	textClusterIDMismatch   = "cluster ID mismatch"
	textRemovedMember       = "removed member"
	textSenderNotFound      = "error sender not found"
	textToMismatch          = "to field mismatch"
	textInvalidPath         = "invalid path"
	textInvalidFrom         = "invalid from"
)

// minClusterVersion is the oldest cluster version this member can join,
// sent as X-Min-Cluster-Version (etcd 3.7 sends 3.0.0).
const minClusterVersion = "3.0.0"

// Errors. Sentinels for errors.Is.
var (
	// ErrClusterIDMismatch: the peer belongs to another cluster.
	ErrClusterIDMismatch = errors.New("transport: " + textClusterIDMismatch)
	// ErrIncompatibleVersion: the peer's version check refused us.
	ErrIncompatibleVersion = errors.New("transport: " + textIncompatibleVersion)
	// ErrMemberRemoved: a peer says this member was removed from the
	// cluster; the server must stop (see Transport.Removed).
	ErrMemberRemoved = errors.New("transport: the member has been permanently removed from the cluster")
	// ErrUnsupportedStream: the peer's version has no such stream.
	ErrUnsupportedStream = errors.New("transport: unsupported stream type")
	// ErrStopped: the transport or the peer was stopped.
	ErrStopped = errors.New("transport: stopped")
	// ErrMessageTooLarge: a length prefix above the reader's limit.
	ErrMessageTooLarge = errors.New("transport: message exceeds the size limit")
	// ErrPeerNotFound: no peer with that id.
	ErrPeerNotFound = errors.New("transport: peer not found")
)

// FormatID prints a member or cluster id as etcd does on the wire.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// ParseID parses an id printed by FormatID.
func ParseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("transport: bad member id %q", s)
	}
	return id, nil
}

// semver is the major.minor.patch of a version header; pre-release and
// build suffixes are ignored, as only major.minor is ever compared.
type semver struct{ major, minor, patch int64 }

func parseSemver(s string) (semver, error) {
	core := s
	if i := strings.IndexAny(core, "-+"); i >= 0 {
		core = core[:i]
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return semver{}, fmt.Errorf("transport: bad version %q", s)
	}
	var v [3]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return semver{}, fmt.Errorf("transport: bad version %q", s)
		}
		v[i] = n
	}
	return semver{v[0], v[1], v[2]}, nil
}

// cmpMajorMinor compares a and b by major.minor only.
func cmpMajorMinor(a, b semver) int {
	switch {
	case a.major != b.major:
		return cmp(a.major, b.major)
	default:
		return cmp(a.minor, b.minor)
	}
}

func cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// headerVersion reads a version header; etcd 2.0 sent none, so a missing
// one means 2.0.0.
func headerVersion(h http.Header, key string) (semver, error) {
	s := h.Get(key)
	if s == "" {
		s = "2.0.0"
	}
	return parseSemver(s)
}

var (
	localServerVersion     = mustSemver(version.Etcd)
	localMinClusterVersion = mustSemver(minClusterVersion)
)

func mustSemver(s string) semver {
	v, err := parseSemver(s)
	if err != nil {
		panic(err) // compile-time constants
	}
	return v
}

// checkVersions applies etcd's compatibility rule to a peer's headers: its
// server version must not be below our minimum cluster version, and its
// minimum cluster version must not be above our server version (both by
// major.minor). An unparsable header is incompatible (etcd would panic).
func checkVersions(h http.Header) error {
	server, err := headerVersion(h, hdrServerVersion)
	if err != nil {
		return err
	}
	minCluster, err := headerVersion(h, hdrMinClusterVersion)
	if err != nil {
		return err
	}
	if cmpMajorMinor(server, localMinClusterVersion) < 0 {
		return fmt.Errorf("remote version is too low: remote[%s]=%s, local=%s", h.Get(hdrFrom), h.Get(hdrServerVersion), version.Etcd)
	}
	if cmpMajorMinor(minCluster, localServerVersion) > 0 {
		return fmt.Errorf("local version is too low: remote[%s]=%s, local=%s", h.Get(hdrFrom), h.Get(hdrServerVersion), version.Etcd)
	}
	return nil
}

// streamSupported reports whether a peer of version v serves stream typ:
// etcd 2.0 had neither stream; every later release has both.
func streamSupported(v semver) bool {
	return !(v.major == 2 && v.minor == 0) && v.major >= 2
}

// setCommonHeaders sets what every request to a peer carries.
func (t *Transport) setCommonHeaders(h http.Header) {
	h.Set(hdrFrom, t.idStr)
	h.Set(hdrServerVersion, version.Etcd)
	h.Set(hdrMinClusterVersion, minClusterVersion)
	h.Set(hdrClusterID, t.cidStr)
	if t.urlsHeader != "" {
		h.Set(hdrPeerURLs, t.urlsHeader)
	}
	h.Set(hdrStrataFeatures, localFeatures)
}

// newPost builds a POST to u's path, as etcd's pipeline and snapshot
// sender do.
func (t *Transport) newPost(u url.URL, path string, body io.Reader, contentType string) (*http.Request, error) {
	u.Path = path
	req, err := http.NewRequest(http.MethodPost, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("transport: request to %s: %w", u.String(), err)
	}
	req.Header.Set("Content-Type", contentType)
	t.setCommonHeaders(req.Header)
	return req, nil
}

// checkPostResponse turns a pipeline or snapshot response into an error,
// with etcd's meaning of each status: 204 is success, 403 means this
// member was removed, 412 carries a refusal text.
func checkPostResponse(resp *http.Response, body []byte, req *http.Request) error {
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusForbidden:
		return ErrMemberRemoved
	case http.StatusPreconditionFailed:
		switch strings.TrimSuffix(string(body), "\n") {
		case textIncompatibleVersion:
			return ErrIncompatibleVersion
		case textClusterIDMismatch:
			return fmt.Errorf("%w (peer cluster %s, local %s)", ErrClusterIDMismatch, resp.Header.Get(hdrClusterID), req.Header.Get(hdrClusterID))
		default:
			return fmt.Errorf("transport: unhandled error %q when precondition failed", string(body))
		}
	default:
		return fmt.Errorf("transport: unexpected http status %s while posting to %q: %s", http.StatusText(resp.StatusCode), req.URL.String(), strings.TrimSpace(string(body)))
	}
}

// checkCluster is the handlers' gate: etcd's version rule, then the
// cluster id. It returns the refusal text to answer with 412, or "".
func (t *Transport) checkCluster(h http.Header) (string, error) {
	if err := checkVersions(h); err != nil {
		return textIncompatibleVersion, err
	}
	if got := h.Get(hdrClusterID); got != t.cidStr {
		return textClusterIDMismatch, fmt.Errorf("%w: peer %s sent cluster %q, local cluster %s", ErrClusterIDMismatch, h.Get(hdrFrom), got, t.cidStr)
	}
	return "", nil
}

// hasFeature reports whether a space-separated feature list has f.
func hasFeature(list, f string) bool {
	for _, x := range strings.Fields(list) {
		if x == f {
			return true
		}
	}
	return false
}
