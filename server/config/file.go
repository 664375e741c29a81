package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// fileExtras are the --config-file keys whose YAML form differs from the
// Config field (etcd's configJSON and securityConfig), plus the 3.5/3.6
// spellings Strata still reads.
type fileExtras struct {
	ListenPeerURLs       string `json:"listen-peer-urls"`
	ListenClientURLs     string `json:"listen-client-urls"`
	ListenClientHTTPURLs string `json:"listen-client-http-urls"`
	ListenMetricsURLs    string `json:"listen-metrics-urls"`
	AdvertisePeerURLs    string `json:"initial-advertise-peer-urls"`
	AdvertiseClientURLs  string `json:"advertise-client-urls"`
	CORS                 string `json:"cors"`
	HostWhitelist        string `json:"host-whitelist"`
	FeatureGates         string `json:"feature-gates"`

	ClientSecurity fileSecurity `json:"client-transport-security"`
	PeerSecurity   fileSecurity `json:"peer-transport-security"`

	Discovery *fileDiscovery `json:"discovery-config"`
	Socket    *struct {
		ReusePort    bool `json:"reuse-port"`
		ReuseAddress bool `json:"reuse-address"`
	} `json:"socket-options"`
}

// fileSecurity is one *-transport-security block.
type fileSecurity struct {
	CertFile            string   `json:"cert-file"`
	KeyFile             string   `json:"key-file"`
	ClientCertFile      string   `json:"client-cert-file"`
	ClientKeyFile       string   `json:"client-key-file"`
	ClientCertAuth      bool     `json:"client-cert-auth"`
	TrustedCAFile       string   `json:"trusted-ca-file"`
	CRLFile             string   `json:"crl-file"`
	AutoTLS             bool     `json:"auto-tls"`
	AllowedCNs          []string `json:"allowed-cn"`
	AllowedHostnames    []string `json:"allowed-hostname"`
	SkipClientSANVerify bool     `json:"skip-client-san-verification"`
}

func (s fileSecurity) info() TLSInfo {
	return TLSInfo{
		CertFile: s.CertFile, KeyFile: s.KeyFile,
		ClientCertFile: s.ClientCertFile, ClientKeyFile: s.ClientKeyFile,
		TrustedCAFile: s.TrustedCAFile, ClientCertAuth: s.ClientCertAuth,
		CRLFile: s.CRLFile, AutoTLS: s.AutoTLS,
		AllowedCNs: s.AllowedCNs, AllowedHostnames: s.AllowedHostnames,
		SkipClientSANVerify: s.SkipClientSANVerify,
	}
}

// fileDiscovery is etcd's discovery-config block (a clientv3 ConfigSpec
// under "client", plus the token).
type fileDiscovery struct {
	Token  string `json:"token"`
	Client struct {
		Endpoints        []string      `json:"endpoints"`
		RequestTimeout   time.Duration `json:"request-timeout"`
		DialTimeout      time.Duration `json:"dial-timeout"`
		KeepAliveTime    time.Duration `json:"keepalive-time"`
		KeepAliveTimeout time.Duration `json:"keepalive-timeout"`
		Secure           *struct {
			Cert               string `json:"cert"`
			Key                string `json:"key"`
			Cacert             string `json:"cacert"`
			InsecureTransport  bool   `json:"insecure-transport"`
			InsecureSkipVerify bool   `json:"insecure-skip-tls-verify"`
		} `json:"secure"`
		Auth *struct {
			Username string `json:"username"`
			Password string `json:"password"`
		} `json:"auth"`
	} `json:"client"`
}

// fileYAML is what a config file decodes into: the Config's own tagged
// fields and the extras side by side, as etcd's configYAML does.
type fileYAML struct {
	*Config
	fileExtras
}

// fromFile builds a Config from defaults and the YAML file only (etcd's
// embed.ConfigFromFile). Unknown keys are ignored, as in etcd, but warned
// about here so typos do not go unnoticed.
func fromFile(path string, p *parseState) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := Default()
	defaultIC := c.InitialCluster
	fy := fileYAML{Config: c}
	if err := yaml.Unmarshal(b, &fy); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var keys map[string]any
	if err := yaml.Unmarshal(b, &keys); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	known := fileKeys()
	for k := range keys {
		c.ExplicitlySet[k] = true
		switch {
		case known[k]:
		case slices.Contains(removedFlags, k) || k == "discovery-fallback":
			// 3.5 sample files carry these (v2 proxy, v2 discovery); etcd
			// 3.7 ignores them silently, so only debug here.
			p.log(slog.LevelDebug, "configuration file key was removed in etcd v3.6 - ignoring", "path", path, "key", k)
		default:
			p.log(slog.LevelWarn, "unrecognized configuration file key - ignoring", "path", path, "key", k)
		}
	}
	if pts, ok := keys["peer-transport-security"]; ok {
		m, isMap := pts.(map[string]any)
		if !isMap {
			return nil, fmt.Errorf("invalid peer-transport-security")
		}
		for k := range m {
			c.ExplicitlySet["peer-"+k] = true
		}
	}
	x := fy.fileExtras
	c.ClientSecurity = x.ClientSecurity.info()
	c.PeerSecurity = x.PeerSecurity.info()

	if x.FeatureGates != "" {
		m, err := parseFeatureGates(x.FeatureGates)
		if err != nil {
			return nil, err
		}
		c.setFeatureGates(m)
		c.FeatureGatesGiven = m
	}
	if err := fileLegacy(c, keys, x.FeatureGates, p); err != nil {
		return nil, err
	}

	for _, u := range []struct {
		key string
		raw string
		dst *[]url.URL
	}{
		{"listen-peer-urls", x.ListenPeerURLs, &c.ListenPeerURLs},
		{"listen-client-urls", x.ListenClientURLs, &c.ListenClientURLs},
		{"listen-client-http-urls", x.ListenClientHTTPURLs, &c.ListenClientHTTPURLs},
		{"listen-metrics-urls", x.ListenMetricsURLs, &c.ListenMetricsURLs},
		{"initial-advertise-peer-urls", x.AdvertisePeerURLs, &c.AdvertisePeerURLs},
		{"advertise-client-urls", x.AdvertiseClientURLs, &c.AdvertiseClientURLs},
	} {
		if u.raw == "" {
			continue
		}
		urls, err := parseURLs(u.raw)
		if err != nil {
			// etcd prints this and exits 1; returning it has the same effect.
			return nil, fmt.Errorf("unexpected error setting up %s: %w", u.key, err)
		}
		*u.dst = urls
	}
	if x.CORS != "" {
		if err := (&corsValue{dst: &c.CORS}).Set(x.CORS); err != nil {
			return nil, fmt.Errorf("cors: %w", err)
		}
	}
	if x.HostWhitelist != "" {
		c.HostWhitelist = uniqueSorted(strings.Split(x.HostWhitelist, ","))
	}
	if d := x.Discovery; d != nil {
		c.Discovery.Token = d.Token
		c.Discovery.Endpoints = d.Client.Endpoints
		setIfNonZero(&c.Discovery.DialTimeout, d.Client.DialTimeout)
		setIfNonZero(&c.Discovery.RequestTimeout, d.Client.RequestTimeout)
		setIfNonZero(&c.Discovery.KeepAliveTime, d.Client.KeepAliveTime)
		setIfNonZero(&c.Discovery.KeepAliveTimeout, d.Client.KeepAliveTimeout)
		if s := d.Client.Secure; s != nil {
			c.Discovery.Cert, c.Discovery.Key, c.Discovery.CACert = s.Cert, s.Key, s.Cacert
			c.Discovery.InsecureTransport, c.Discovery.InsecureSkipVerify = s.InsecureTransport, s.InsecureSkipVerify
		}
		if a := d.Client.Auth; a != nil {
			c.Discovery.User, c.Discovery.Password = a.Username, a.Password
		}
	}
	if s := x.Socket; s != nil {
		c.SocketReusePort, c.SocketReuseAddress = s.ReusePort, s.ReuseAddress
	}
	// In a file, discovery replaces the default initial cluster only when
	// the file left initial-cluster at its default (etcd's rule; the
	// command line's rule is "unless --initial-cluster was given").
	if (c.DiscoverySRV != "" || len(c.Discovery.Endpoints) > 0) && c.InitialCluster == defaultIC {
		c.InitialCluster = ""
	}
	if c.InitialClusterState == "" {
		c.InitialClusterState = ClusterStateNew
	}
	c.ConfigFile = path
	return c, nil
}

func setIfNonZero(dst *time.Duration, v time.Duration) {
	if v != 0 {
		*dst = v
	}
}

// fileLegacy reads the 3.6 experimental-* keys: a value moves to its new
// key unless the file has both (an error in 3.6), and boolean ones set
// their feature gates.
func fileLegacy(c *Config, keys map[string]any, gatesRaw string, p *parseState) error {
	// 3.6 accepted both spellings of this key; it is the same setting.
	if v, ok := keys["experimental-snapshot-catch-up-entries"]; ok {
		keys["experimental-snapshot-catchup-entries"] = v
	}
	for _, d := range flagDefs {
		for _, old := range d.legacy {
			v, ok := keys[old]
			if !ok {
				continue
			}
			if _, both := keys[d.name]; both {
				return fmt.Errorf("cannot set --%s and --%s at the same time, please use --%s only", old, d.name, d.name)
			}
			if old == "experimental-peer-skip-client-san-verification" {
				b, _ := v.(bool)
				c.PeerSecurity.SkipClientSANVerify = b
				continue
			}
			raw, err := json.Marshal(map[string]any{d.name: v})
			if err != nil {
				return err
			}
			if err := json.Unmarshal(raw, c); err != nil {
				return fmt.Errorf("%s: %w", old, err)
			}
			c.ExplicitlySet[d.name] = true
			p.log(slog.LevelWarn, fmt.Sprintf("%s is deprecated in v3.6 and removed in v3.7; use %s instead", old, d.name))
		}
	}
	for _, old := range slices.Sorted(maps.Keys(experimentalFeatureFlags)) {
		v, ok := keys[old]
		if !ok {
			continue
		}
		b, isBool := v.(bool)
		if !isBool {
			return fmt.Errorf("%s: expected true or false, got %v", old, v)
		}
		if err := applyExperimentalGate(c, old, b, gatesRaw); err != nil {
			return err
		}
	}
	return nil
}

// fileKeys is every top-level key fromFile understands.
func fileKeys() map[string]bool {
	m := map[string]bool{}
	addJSONKeys(m, Config{})
	addJSONKeys(m, fileExtras{})
	for _, d := range flagDefs {
		for _, old := range d.legacy {
			m[old] = true
		}
	}
	for old := range experimentalFeatureFlags {
		m[old] = true
	}
	m["experimental-snapshot-catch-up-entries"] = true
	return m
}

// addJSONKeys adds the json names of t's fields, descending into embedded
// structs as encoding/json does.
func addJSONKeys(m map[string]bool, v any) {
	t := reflect.TypeOf(v)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && tag == "" {
			addJSONKeys(m, reflect.Zero(f.Type).Interface())
			continue
		}
		if tag != "" && tag != "-" {
			m[tag] = true
		}
	}
}
