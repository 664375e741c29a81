package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Feature gate names: etcd 3.7's server gates (server/features), with the
// same defaults and maturity, so --feature-gates values written for etcd
// mean the same thing here.
const (
	FeatureStopGRPCServiceOnDefrag      = "StopGRPCServiceOnDefrag"
	FeatureTxnModeWriteWithSharedBuffer = "TxnModeWriteWithSharedBuffer"
	FeatureInitialCorruptCheck          = "InitialCorruptCheck"
	FeatureCompactHashCheck             = "CompactHashCheck"
	FeatureLeaseCheckpoint              = "LeaseCheckpoint"
	FeatureLeaseCheckpointPersist       = "LeaseCheckpointPersist"
	FeatureSetMemberLocalAddr           = "SetMemberLocalAddr"
	FeatureFastLeaseKeepAlive           = "FastLeaseKeepAlive"
	FeaturePriorityRequest              = "PriorityRequest"

	// AllAlpha and AllBeta flip every alpha or beta gate that is not named
	// on its own, as in etcd's featuregate package.
	featureAllAlpha = "AllAlpha"
	featureAllBeta  = "AllBeta"
)

type featureSpec struct {
	def  bool
	beta bool // false = alpha
}

var knownFeatures = map[string]featureSpec{
	FeatureStopGRPCServiceOnDefrag:      {def: false},
	FeatureInitialCorruptCheck:          {def: false},
	FeatureCompactHashCheck:             {def: false},
	FeatureTxnModeWriteWithSharedBuffer: {def: true, beta: true},
	FeatureLeaseCheckpoint:              {def: false},
	FeatureLeaseCheckpointPersist:       {def: false},
	FeatureSetMemberLocalAddr:           {def: false},
	FeatureFastLeaseKeepAlive:           {def: true, beta: true},
	FeaturePriorityRequest:              {def: false},
}

// experimentalFeatureFlags maps the 3.5 boolean --experimental-* flags to
// the gates that replaced them in 3.6 (etcd's ExperimentalFlagToFeatureMap).
var experimentalFeatureFlags = map[string]string{
	"experimental-stop-grpc-service-on-defrag":       FeatureStopGRPCServiceOnDefrag,
	"experimental-initial-corrupt-check":             FeatureInitialCorruptCheck,
	"experimental-compact-hash-check-enabled":        FeatureCompactHashCheck,
	"experimental-txn-mode-write-with-shared-buffer": FeatureTxnModeWriteWithSharedBuffer,
	"experimental-enable-lease-checkpoint":           FeatureLeaseCheckpoint,
	"experimental-enable-lease-checkpoint-persist":   FeatureLeaseCheckpointPersist,
}

// KnownFeatureGates lists the accepted gate names with their defaults, in
// the "Name=true|false (ALPHA - default=false)" form of etcd's help.
func KnownFeatureGates() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(knownFeatures)) {
		spec := knownFeatures[name]
		stage := "ALPHA"
		if spec.beta {
			stage = "BETA"
		}
		out = append(out, fmt.Sprintf("%s=true|false (%s - default=%t)", name, stage, spec.def))
	}
	return append([]string{
		featureAllAlpha + "=true|false (ALPHA - default=false)",
		featureAllBeta + "=true|false (BETA - default=false)",
	}, out...)
}

// FeatureGate is one gate as etcd's etcd_server_feature_enabled metric
// lists it: its name, its stage (ALPHA or BETA) and whether it is on.
type FeatureGate struct {
	Name, Stage string
	Enabled     bool
}

// FeatureGateList returns every known gate with its stage and effective
// value, and the AllAlpha and AllBeta pseudo-gates with the value
// --feature-gates gave them (false if none), as etcd lists them.
func (c *Config) FeatureGateList() []FeatureGate {
	var out []FeatureGate
	for _, name := range slices.Sorted(maps.Keys(knownFeatures)) {
		stage := "ALPHA"
		if knownFeatures[name].beta {
			stage = "BETA"
		}
		out = append(out, FeatureGate{Name: name, Stage: stage, Enabled: c.FeatureGates[name]})
	}
	return append(out, FeatureGate{featureAllAlpha, "ALPHA", c.allGates[featureAllAlpha]},
		FeatureGate{featureAllBeta, "BETA", c.allGates[featureAllBeta]})
}

func defaultFeatureGates() map[string]bool {
	m := make(map[string]bool, len(knownFeatures))
	for k, s := range knownFeatures {
		m[k] = s.def
	}
	return m
}

// featureGatesValue is --feature-gates: "A=true,B=false". It keeps the
// raw text (needed for etcd's both-spellings check) and recomputes the
// effective map on every Set, so repeated flags accumulate as in etcd.
type featureGatesValue struct {
	c   *Config
	raw *string
	set map[string]bool // every key ever given, across repeated flags (Config.FeatureGatesGiven)
}

func newFeatureGatesValue(c *Config, raw *string) *featureGatesValue {
	return &featureGatesValue{c: c, raw: raw, set: c.FeatureGatesGiven}
}

func (v *featureGatesValue) Set(s string) error {
	m, err := parseFeatureGates(s)
	if err != nil {
		return err
	}
	maps.Copy(v.set, m)
	v.c.setFeatureGates(v.set)
	if *v.raw != "" && s != "" {
		*v.raw += ","
	}
	*v.raw += s
	return nil
}

func (v *featureGatesValue) String() string {
	if v.raw == nil {
		return ""
	}
	return *v.raw
}

// parseFeatureGates parses "Name=bool,..." with etcd's messages.
func parseFeatureGates(s string) (map[string]bool, error) {
	m := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return nil, fmt.Errorf("missing bool value for %s", k)
		}
		val = strings.TrimSpace(val)
		b, err := strconv.ParseBool(val)
		if err != nil {
			return nil, fmt.Errorf("invalid value of %s=%s, err: %w", k, val, err)
		}
		if _, known := knownFeatures[k]; !known && k != featureAllAlpha && k != featureAllBeta {
			return nil, fmt.Errorf("unrecognized feature gate: %s", k)
		}
		m[k] = b
	}
	return m, nil
}

// setFeatureGates sets the effective gates from the explicit settings,
// and remembers the AllAlpha and AllBeta settings for FeatureGateList.
func (c *Config) setFeatureGates(set map[string]bool) {
	c.FeatureGates = effectiveFeatureGates(set)
	c.allGates = map[string]bool{featureAllAlpha: set[featureAllAlpha], featureAllBeta: set[featureAllBeta]}
}

// effectiveFeatureGates resolves explicit settings over AllAlpha/AllBeta
// over defaults.
func effectiveFeatureGates(set map[string]bool) map[string]bool {
	out := defaultFeatureGates()
	for name, spec := range knownFeatures {
		if all, ok := set[featureAllAlpha]; ok && !spec.beta {
			out[name] = all
		}
		if all, ok := set[featureAllBeta]; ok && spec.beta {
			out[name] = all
		}
		if v, ok := set[name]; ok {
			out[name] = v
		}
	}
	return out
}

// AuthTokenOptions is --auth-token decomposed: the type ("simple", "jwt"
// or "" for none) and, for jwt, its options. Key files are not read here;
// the auth package loads and checks them when it builds the provider.
type AuthTokenOptions struct {
	Type        string
	SignMethod  string        // sign-method, e.g. RS256, PS384, ES512, HS256, EdDSA
	PubKeyFile  string        // pub-key
	PrivKeyFile string        // priv-key
	TTL         time.Duration // ttl; 5m when not given, as in etcd
	// Unknown holds options etcd does not know; etcd warns and ignores them.
	Unknown map[string]string
}

// ErrInvalidAuthOpts is etcd's error for a malformed --auth-token.
var ErrInvalidAuthOpts = fmt.Errorf("auth: invalid auth options")

// ErrInvalidAuthMethod is etcd's error for an unknown jwt sign-method.
var ErrInvalidAuthMethod = fmt.Errorf("auth: invalid auth signature method")

var jwtSignMethods = []string{
	"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512", "HS256", "HS384", "HS512", "EdDSA",
}

// AuthTokenOptions parses AuthToken the way etcd's auth store does.
func (c *Config) AuthTokenOptions() (AuthTokenOptions, error) {
	parts := strings.Split(c.AuthToken, ",")
	o := AuthTokenOptions{Type: parts[0]}
	opts := map[string]string{}
	for _, p := range parts[1:] {
		kv := strings.Split(p, "=")
		if len(kv) != 2 {
			return o, fmt.Errorf("%w: %q", ErrInvalidAuthOpts, p)
		}
		if _, dup := opts[kv[0]]; dup {
			return o, fmt.Errorf("%w: duplicate option %q", ErrInvalidAuthOpts, kv[0])
		}
		opts[kv[0]] = kv[1]
	}
	switch o.Type {
	case "simple", "":
		return o, nil
	case "jwt":
	default:
		return o, fmt.Errorf("%w: unknown token type %q", ErrInvalidAuthOpts, o.Type)
	}
	o.TTL = 5 * time.Minute
	for k, v := range opts {
		switch k {
		case "sign-method":
			o.SignMethod = v
		case "pub-key":
			o.PubKeyFile = v
		case "priv-key":
			o.PrivKeyFile = v
		case "ttl":
			d, err := time.ParseDuration(v)
			if err != nil {
				return o, err
			}
			o.TTL = d
		default:
			if o.Unknown == nil {
				o.Unknown = map[string]string{}
			}
			o.Unknown[k] = v
		}
	}
	if !slices.Contains(jwtSignMethods, o.SignMethod) {
		return o, ErrInvalidAuthMethod
	}
	if o.PubKeyFile == "" && o.PrivKeyFile == "" {
		return o, fmt.Errorf("auth: missing key data (jwt needs pub-key and/or priv-key)")
	}
	return o, nil
}

// AutoCompaction is --auto-compaction-mode/-retention parsed: Period for
// periodic mode, Revisions for revision mode; both zero means disabled.
type AutoCompaction struct {
	Mode      string
	Period    time.Duration
	Revisions int64
}

// AutoCompaction parses the retention per mode as etcd does: periodic
// takes a duration ("1h", "30m") or a bare integer meaning hours; revision
// takes an integer revision count.
func (c *Config) AutoCompaction() (AutoCompaction, error) {
	ac := AutoCompaction{Mode: c.AutoCompactionMode}
	r := c.AutoCompactionRetention
	if r == "" {
		r = "0"
	}
	switch c.AutoCompactionMode {
	case CompactionModePeriodic:
		if h, err := strconv.Atoi(r); err == nil {
			if h < 0 {
				return ac, fmt.Errorf("invalid auto-compaction-retention %q: must not be negative", r)
			}
			ac.Period = time.Duration(h) * time.Hour
			return ac, nil
		}
		d, err := time.ParseDuration(r)
		if err != nil {
			return ac, fmt.Errorf("error parsing CompactionRetention: %w", err)
		}
		if d < 0 {
			return ac, fmt.Errorf("invalid auto-compaction-retention %q: must not be negative", r)
		}
		ac.Period = d
	case CompactionModeRevision:
		n, err := strconv.ParseInt(r, 10, 64)
		if err != nil || n < 0 {
			// etcd would fall back to ParseDuration and use the nanosecond
			// count as a revision count; refusing is kinder.
			return ac, fmt.Errorf("invalid auto-compaction-retention %q: revision mode needs a non-negative integer", r)
		}
		ac.Revisions = n
	case "":
		return ac, fmt.Errorf("undefined auto-compaction-mode")
	default:
		return ac, fmt.Errorf("unknown auto-compaction-mode %q", c.AutoCompactionMode)
	}
	return ac, nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
