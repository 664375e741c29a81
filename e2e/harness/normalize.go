package harness

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Normalizer rewrites tool output so that two correct servers given the
// same commands produce byte-identical text. It masks only what legitimately
// differs between two runs (or between etcd and another correct
// implementation); everything a client can rely on is kept verbatim:
// keys, values, revisions (create/mod/header/compact), versions of keys,
// counts, more flags, granted TTLs, error messages and exit codes.
//
// The masks, and why each is there:
//
//   - Literal substitutions ([Normalizer.Literal]): the side's temp dir,
//     client/peer/metrics URLs and host:port. Each side listens on its own
//     free ports in its own temp dir.
//   - Ids -> <id1>, <id2>, ... numbered by first appearance: cluster_id,
//     member_id, member and leader ids, lease ids (hex in text, decimal in
//     JSON, strings in gateway JSON), alarm memberID, "Member <id> added
//     ... cluster <id>" messages, the lease suffix of lock and election keys. Member ids hash the peer URLs (which differ by
//     port) and lease ids mix in the member id and the clock. Numbering by
//     first appearance, instead of one blanket mask, still checks that the
//     same id shows up in the same places (the lease granted is the lease
//     attached and listed).
//   - raft_term -> <term>: counts elections, which depend on timing and on
//     the raft configuration (pre-vote, restarts), not on the API.
//   - raft_index, raft_applied_index, RAFT INDEX columns -> <index>: they
//     count internal log entries too (conf changes, cluster-version and
//     lease-checkpoint proposals), an implementation detail.
//   - DB SIZE / IN USE, dbSize, dbSizeInUse -> <size>: storage-engine page
//     layout, not data.
//   - HashKV hash -> <hash>: a checksum over the storage engine's encoded
//     bytes, which embed lease ids; its hash_revision and compact_revision
//     are kept.
//   - Server version 3.7.3 -> 3.7.x (status version, /version etcdserver,
//     VERSION column): a drop-in reports an etcd-compatible major.minor,
//     which is what clients gate on; the patch level is the vendor's.
//   - Remaining TTLs (timetolive's remaining(Ns), the ttl beside
//     granted-ttl in JSON) -> <ttl>: they tick with the wall clock.
//   - PERCENTAGE NOT IN USE -> <pct>: derived from the sizes above.
//   - Unordered collections are sorted: a lease's attached keys (the lessor
//     keeps them in a map), /readyz?verbose check lines (run from a map),
//     and members (etcd lists them in id order, and ids are random per
//     run): member list rows, JSON members, ETCD_INITIAL_CLUSTER.
//   - Keys in JSON are base64; when a caller's id rule (e.g. a lock key's
//     lease suffix) matches the decoded key it is shown as text:<masked>.
//   - Durations after "took" (and JSON "took"), RFC 3339 timestamps, Go pointers (0xc000...)
//     -> masks: wall clock and process memory.
//   - Client-side zap log lines ({"level":...}) are reduced to level, msg,
//     method and error: their ts, caller, target, peer, size and took fields
//     are diagnostics of the etcdctl process, not server behaviour.
//   - The same fields are masked in -w fields output ("RaftTerm" : 2).
//   - Tables are re-rendered without padding (| a | b |), since column
//     widths follow the masked cells' original lengths.
//   - A client-side deadline reported as "stream terminated by
//     RST_STREAM with error code: CANCEL" (code DeadlineExceeded) ->
//     "context deadline exceeded": which of the two gRPC's client prints
//     depends on whether its deadline timer or the stream reset it sent
//     is seen first, for the same request timing out.
//   - Any other loopback host:port -> <addr>: ephemeral client ports.
type Normalizer struct {
	literals []literal
	ids      map[uint64]string
	forms    map[string]string // textual forms of learned ids -> placeholder
	table    []string          // header of the table being read, nil outside one
	inLeases bool              // inside "found N leases" output
	extra    []IDRule          // the current Normalize call's extra rules
}

type literal struct{ old, new string }

// NewNormalizer returns an empty normalizer. Use one per side and feed it
// that side's outputs in order, so ids are numbered identically on both.
func NewNormalizer() *Normalizer {
	return &Normalizer{ids: map[uint64]string{}, forms: map[string]string{}}
}

// Literal replaces every occurrence of old with placeholder (longest old
// strings first).
func (n *Normalizer) Literal(old, placeholder string) {
	if old == "" {
		return
	}
	n.literals = append(n.literals, literal{old, placeholder})
	sort.SliceStable(n.literals, func(i, j int) bool { return len(n.literals[i].old) > len(n.literals[j].old) })
}

// id returns the placeholder for v, allocating the next one on first sight.
func (n *Normalizer) id(v uint64) string {
	if p, ok := n.ids[v]; ok {
		return p
	}
	p := fmt.Sprintf("<id%d>", len(n.ids)+1)
	n.ids[v] = p
	// Remember the textual forms so stray occurrences (lease ids inside key
	// names, error messages) are caught by the final sweep. Short forms are
	// left alone: they would collide with revisions and counts.
	for _, f := range []string{strconv.FormatUint(v, 10), strconv.FormatUint(v, 16), fmt.Sprintf("%016x", v)} {
		if len(f) >= 8 {
			n.forms[f] = p
		}
	}
	return p
}

func (n *Normalizer) hexID(s string) string {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return s
	}
	return n.id(v)
}

// decID masks an id printed in decimal, or in hex when it has hex letters
// (etcdctl's --hex output).
func (n *Normalizer) decID(s string) string {
	if v, err := strconv.ParseUint(s, 10, 64); err == nil {
		return n.id(v)
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n.id(uint64(i))
	}
	return n.hexID(s)
}

// IDRule is an extra, caller-supplied pattern whose first group is a hex
// id, e.g. the lease suffix in a lock key: regexp `mylock/([0-9a-f]+)`.
type IDRule = *regexp.Regexp

// Normalize rewrites one output (stdout or stderr of one command).
func (n *Normalizer) Normalize(text string, extra ...IDRule) string {
	text = strings.ReplaceAll(text, "code = DeadlineExceeded desc = stream terminated by RST_STREAM with error code: CANCEL",
		"code = DeadlineExceeded desc = context deadline exceeded")
	for _, l := range n.literals {
		text = strings.ReplaceAll(text, l.old, l.new)
	}
	n.extra = extra
	for _, re := range extra {
		text = replaceGroup(re, text, n.hexID)
	}
	lines := strings.Split(text, "\n")
	n.table, n.inLeases = nil, false
	kept := lines[:0]
	for _, ln := range lines {
		// "snapshot save" prints the server's storage version only once
		// etcd has set it, a few seconds after start (see storageVersion).
		if strings.HasPrefix(ln, "Server version ") {
			continue
		}
		kept = append(kept, n.line(ln))
	}
	lines = kept
	sortRuns(lines, reCheckLine)
	sortRuns(lines, reMemberRow)
	sortRuns(lines, reMemberCell)
	text = strings.Join(lines, "\n")
	return n.sweep(text)
}

// Member rows (simple and table) once their ids are masked. etcd lists
// members in id order, and ids are random per run, so runs of them are
// sorted.
var (
	reMemberRow  = regexp.MustCompile(`^<id\d+>, (?:started|unstarted), `)
	reMemberCell = regexp.MustCompile(`^\| <id\d+> \| (?:started|unstarted) \|`)
	reInitial    = regexp.MustCompile(`^ETCD_INITIAL_CLUSTER="(.*)"$`)
)

// reCheckLine is a /readyz or /livez ?verbose check line. etcd runs its
// checks from a map, so their order is unspecified; runs of them are sorted.
var reCheckLine = regexp.MustCompile(`^\[[+-]\]\w+ `)

// sortRuns sorts each run of consecutive lines matching re, in place.
func sortRuns(lines []string, re *regexp.Regexp) {
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && re.MatchString(lines[j]) {
			j++
		}
		if j > i {
			sort.Strings(lines[i:j])
			i = j
		} else {
			i++
		}
	}
}

var (
	reZapLine   = regexp.MustCompile(`^\{"level":`)
	reBorder    = regexp.MustCompile(`^\+[-+]+\+$`)
	reLeaseLine = regexp.MustCompile(`^lease ([0-9a-f]+) `)
	reFound     = regexp.MustCompile(`^found \d+ leases$`)
	reHexOnly   = regexp.MustCompile(`^[0-9a-f]+$`)
	reMember    = regexp.MustCompile(`^([0-9a-f]+), (?:started|unstarted), `)
	reAlarm     = regexp.MustCompile(`memberID:(\d+)`)
	reMemberMsg = regexp.MustCompile(`^Member +[0-9a-f]+ `)
	reClusterID = regexp.MustCompile(`cluster +[0-9a-f]+$`)
	reRemaining = regexp.MustCompile(`remaining\(-?\d+s\)`)
	reTook      = regexp.MustCompile(`took( =)? [0-9.]+[a-zµ]+`)
	reTime      = regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?`)
	rePtr       = regexp.MustCompile(`0x[0-9a-f]{6,}`)
	reAddr      = regexp.MustCompile(`(127\.0\.0\.1|localhost|\[::1\]):\d{2,5}\b`)
	reSemver    = regexp.MustCompile(`^(\d+)\.(\d+)\.\d+$`)
	reField     = regexp.MustCompile(`^"(\w+)" : (.*)$`)
)

// fieldMask masks etcdctl's -w fields lines ("Key" : value) by name, with
// the same reasons as the JSON keys.
var fieldMask = map[string]string{
	"ClusterID": "id", "MemberID": "id", "ID": "id", "Lease": "id", "Leader": "id",
	"RaftTerm": "<term>", "RaftIndex": "<index>", "RaftAppliedIndex": "<index>",
	"DBSize": "<size>", "DBSizeInUse": "<size>", "Version": "semver",
}

func (n *Normalizer) fieldLine(name, val string) string {
	switch m := fieldMask[name]; m {
	case "id":
		if val != "0" {
			val = n.decID(val)
		}
	case "semver":
		if uq, err := strconv.Unquote(val); err == nil {
			val = strconv.Quote(majorMinor(uq))
		}
	default:
		val = m
	}
	return scrubText(fmt.Sprintf("%q : %s", name, val))
}

func (n *Normalizer) line(ln string) string {
	if reZapLine.MatchString(ln) {
		return n.zapLine(ln)
	}
	trimmed := strings.TrimSpace(ln)
	if (strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, "[")) && json.Valid([]byte(trimmed)) {
		return n.jsonText(trimmed)
	}
	if isBorder(trimmed) {
		return "+"
	}
	if cells, ok := tableCells(trimmed); ok {
		if n.table == nil {
			n.table = cells
			return "| " + strings.Join(cells, " | ") + " |"
		}
		return "| " + strings.Join(n.row(n.table, cells), " | ") + " |"
	}
	n.table = nil
	if m := reField.FindStringSubmatch(ln); m != nil {
		if _, ok := fieldMask[m[1]]; ok {
			return n.fieldLine(m[1], m[2])
		}
		return scrubText(ln)
	}
	if reFound.MatchString(ln) {
		n.inLeases = true
		return ln
	}
	if n.inLeases && reHexOnly.MatchString(ln) {
		return n.hexID(ln)
	}
	n.inLeases = false
	if header := simpleHeader(ln); header != nil {
		return strings.Join(n.row(header, strings.Split(ln, ", ")), ", ")
	}
	ln = replaceGroup(reInitial, ln, func(list string) string {
		f := strings.Split(list, ",")
		sort.Strings(f)
		return strings.Join(f, ",")
	})
	ln = replaceGroup(reLeaseLine, ln, n.hexID)
	ln = replaceGroup(reMember, ln, n.hexID)
	ln = replaceGroup(reAlarm, ln, n.decID)
	if reMemberMsg.MatchString(ln) {
		// Both ids are printed with "%16x": space-padded, so the padding
		// varies with the id.
		ln = reMemberMsg.ReplaceAllStringFunc(ln, func(m string) string {
			return "Member " + n.hexID(strings.TrimSpace(strings.TrimPrefix(m, "Member"))) + " "
		})
		ln = reClusterID.ReplaceAllStringFunc(ln, func(m string) string {
			return "cluster " + n.hexID(strings.TrimSpace(strings.TrimPrefix(m, "cluster")))
		})
	}
	ln = reRemaining.ReplaceAllString(ln, "remaining(<ttl>)")
	ln = sortAttached(ln)
	return scrubText(ln)
}

var reAttached = regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)

// sortAttached sorts timetolive's attached keys: the lessor keeps them in a
// map, so their order is unspecified.
func sortAttached(ln string) string {
	return replaceGroup(reAttached, ln, func(keys string) string {
		f := strings.Fields(keys)
		sort.Strings(f)
		return strings.Join(f, " ")
	})
}

// isBorder matches table rules in both of etcdctl's styles: ASCII
// (+---+---+) and box drawing (┌───┬───┐, ├, └).
func isBorder(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("+-─┌┐└┘├┤┬┴┼", r) {
			return false
		}
	}
	return true
}

// tableCells splits a table row (| a | b | or │ a │ b │) into trimmed cells.
func tableCells(s string) ([]string, bool) {
	sep := ""
	switch {
	case strings.HasPrefix(s, "|") && strings.HasSuffix(s, "|") && len(s) > 1:
		sep = "|"
	case strings.HasPrefix(s, "│") && strings.HasSuffix(s, "│") && len(s) > len("│"):
		sep = "│"
	default:
		return nil, false
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(s, sep), sep)
	cells := strings.Split(inner, sep)
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells, true
}

// Columns of etcdctl's simple (comma-separated) output for commands that
// print one row per endpoint. The simple format has no header line, so the
// row is recognized by its endpoint placeholder and its width.
var (
	statusHeader = []string{"ENDPOINT", "ID", "VERSION", "STORAGE VERSION", "DB SIZE", "IN USE",
		"PERCENTAGE NOT IN USE", "QUOTA", "IS LEADER", "IS LEARNER", "RAFT TERM", "RAFT INDEX",
		"RAFT APPLIED INDEX", "ERRORS", "DOWNGRADE TARGET VERSION", "DOWNGRADE ENABLED"}
	hashKVHeader = []string{"ENDPOINT", "HASH", "HASH REVISION"}
)

func simpleHeader(ln string) []string {
	if !strings.HasPrefix(ln, "<client") {
		return nil
	}
	switch strings.Count(ln, ", ") + 1 {
	case len(statusHeader):
		return statusHeader
	case len(hashKVHeader):
		return hashKVHeader
	}
	return nil
}

// scrubText applies the masks that hold anywhere in free text.
func scrubText(s string) string {
	s = reTook.ReplaceAllString(s, "took <dur>")
	s = reTime.ReplaceAllString(s, "<time>")
	s = rePtr.ReplaceAllString(s, "<ptr>")
	return reAddr.ReplaceAllString(s, "<addr>")
}

// replaceGroup replaces the first capture group of every match of re in s
// with f(group).
func replaceGroup(re *regexp.Regexp, s string, f func(string) string) string {
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		if len(m) < 4 || m[2] < 0 {
			continue
		}
		b.WriteString(s[last:m[2]])
		b.WriteString(f(s[m[2]:m[3]]))
		last = m[3]
	}
	b.WriteString(s[last:])
	return b.String()
}

// zapLine keeps level, msg and error of a client-side structured log line.
func (n *Normalizer) zapLine(ln string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(ln), &m); err != nil {
		return scrubText(ln)
	}
	keep := map[string]any{}
	for _, k := range []string{"level", "msg", "method", "error"} {
		if v, ok := m[k]; ok {
			keep[k] = v
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(keep)
	return scrubText(strings.TrimRight(buf.String(), "\n"))
}

// jsonText masks a JSON document by key and re-renders it compactly with
// sorted keys.
func (n *Normalizer) jsonText(s string) string {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return scrubText(s)
	}
	v = n.jsonValue("", v)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return scrubText(strings.TrimRight(buf.String(), "\n"))
}

// jsonIDKeys hold member, cluster and lease ids (numbers, or strings in the
// gateway's proto3 JSON).
var jsonIDKeys = map[string]bool{
	"cluster_id": true, "member_id": true, "ID": true, "id": true,
	"leader": true, "memberID": true, "lease": true,
}

var jsonMask = map[string]string{
	"raft_term": "<term>", "raftTerm": "<term>",
	"raft_index": "<index>", "raftIndex": "<index>",
	"raft_applied_index": "<index>", "raftAppliedIndex": "<index>",
	"dbSize": "<size>", "dbSizeInUse": "<size>",
	"db_size": "<size>", "db_size_in_use": "<size>",
	"hash": "<hash>",
	// etcd moves its storage version from 3.5.0 to the cluster version a
	// few seconds after start, so two etcd runs differ by timing alone
	// ("storage" is /version's name for it).
	"storageVersion": "<storage-version>", "storage_version": "<storage-version>",
	"storage": "<storage-version>",
}

func (n *Normalizer) jsonValue(key string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["etcdserver"]; ok {
			// /version: Strata adds its own version under "strata" (a
			// documented addition; clients read the etcd keys).
			delete(x, "strata")
		}
		_, hasGranted := x["grantedTTL"]
		_, hasGranted2 := x["granted-ttl"]
		// Sorted, so ids are numbered in the same order on both sides.
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if (k == "TTL" && hasGranted) || (k == "ttl" && hasGranted2) {
				x[k] = "<ttl>"
				continue
			}
			x[k] = n.jsonValue(k, x[k])
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = n.jsonValue(key, e)
		}
		if key == "keys" || key == "members" {
			// Attached keys of a lease: unordered (see sortAttached).
			// Members: in id order, and ids are random.
			sort.Slice(x, func(i, j int) bool { return fmt.Sprint(x[i]) < fmt.Sprint(x[j]) })
		}
		return x
	case json.Number:
		if jsonIDKeys[key] && x.String() != "0" {
			return n.decID(x.String())
		}
		if m, ok := jsonMask[key]; ok {
			return m
		}
		return x
	case string:
		if jsonIDKeys[key] && x != "0" && x != "" && reHexOnly.MatchString(x) {
			return n.decID(x)
		}
		if m, ok := jsonMask[key]; ok {
			return m
		}
		if key == "version" || key == "etcdserver" {
			return majorMinor(x)
		}
		if key == "took" {
			return "<dur>"
		}
		if key == "key" && len(n.extra) > 0 {
			return n.base64Key(x)
		}
		return x
	}
	return v
}

// base64Key applies the caller's id rules inside a base64 key (JSON output
// encodes keys), rendering a masked key as "text:" plus the masked text.
func (n *Normalizer) base64Key(k string) string {
	raw, err := base64.StdEncoding.DecodeString(k)
	if err != nil {
		return k
	}
	text := string(raw)
	masked := text
	for _, re := range n.extra {
		masked = replaceGroup(re, masked, n.hexID)
	}
	if masked == text {
		return k
	}
	return "text:" + masked
}

func majorMinor(v string) string {
	if m := reSemver.FindStringSubmatch(v); m != nil {
		return m[1] + "." + m[2] + ".x"
	}
	return v
}

// columnMask says how to mask a table column, by header.
var columnMask = map[string]string{
	"ID": "id", "MEMBER ID": "id", "LEADER": "id", "CLUSTER ID": "id",
	"RAFT TERM": "<term>", "RAFT INDEX": "<index>", "RAFT APPLIED INDEX": "<index>",
	"DB SIZE": "<size>", "IN USE": "<size>", "PERCENTAGE NOT IN USE": "<pct>",
	"HASH":    "<hash>",
	"VERSION": "semver",
	// See storageVersion in jsonMask.
	"STORAGE VERSION": "<storage-version>",
}

// row masks the cells of one table or simple-format row by the header of
// their column.
func (n *Normalizer) row(header, cells []string) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = c
		if i < len(header) {
			switch m := columnMask[header[i]]; m {
			case "":
			case "id":
				if reHexOnly.MatchString(c) {
					out[i] = n.hexID(c)
				}
			case "semver":
				out[i] = majorMinor(c)
			default:
				out[i] = m
			}
		}
		out[i] = scrubText(out[i])
	}
	return out
}

// sweep replaces any remaining textual form of a learned id.
func (n *Normalizer) sweep(text string) string {
	if len(n.forms) == 0 {
		return text
	}
	forms := make([]string, 0, len(n.forms))
	for f := range n.forms {
		forms = append(forms, regexp.QuoteMeta(f))
	}
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	re := regexp.MustCompile(`\b(?:` + strings.Join(forms, "|") + `)\b`)
	return re.ReplaceAllStringFunc(text, func(f string) string { return n.forms[f] })
}

// AssignIDs gives ids their placeholders in the order given (<idN>,
// <idN+1>, ...), before any output is normalized. A cluster's member ids
// hash its peer URLs, so which member's id comes first in an id-ordered
// listing differs per run; assigning them in member-name order makes
// "<id1>" mean the member named m1 on both sides.
func (n *Normalizer) AssignIDs(ids ...uint64) {
	for _, v := range ids {
		n.id(v)
	}
}
