package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// flag.Value implementations bound to Config fields. The flag package's own
// values cannot be created detached from a FlagSet, and etcd's list flags
// have their own split/dedupe/sort rules, so each kind is written out here.
// Errors mirror the flag package's ("parse error"), which it wraps as
// `invalid value "x" for flag -name: parse error`.

var errParse = errors.New("parse error")

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errParse
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

type uintValue uint

func (v *uintValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, strconv.IntSize)
	if err != nil {
		return errParse
	}
	*v = uintValue(n)
	return nil
}
func (v *uintValue) String() string { return strconv.FormatUint(uint64(*v), 10) }

type uint64Value uint64

func (v *uint64Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return errParse
	}
	*v = uint64Value(n)
	return nil
}
func (v *uint64Value) String() string { return strconv.FormatUint(uint64(*v), 10) }

type uint32Value uint32

func (v *uint32Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return errParse
	}
	*v = uint32Value(n)
	return nil
}
func (v *uint32Value) String() string { return strconv.FormatUint(uint64(*v), 10) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return errParse
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type int64Value int64

func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return errParse
	}
	*v = int64Value(n)
	return nil
}
func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errParse
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }

// urlsValue is a comma-separated URL list with etcd's rules: each URL is
// http, https, unix or unixs; http(s) need host:port and no path;
// duplicates are dropped and the result is sorted (etcd's UniqueURLs).
// An empty value leaves the list as it was: etcd registers "" as an allowed
// exception that changes nothing (though the flag still counts as set).
type urlsValue struct{ dst *[]url.URL }

func (v *urlsValue) Set(s string) error {
	if s == "" {
		return nil
	}
	u, err := parseURLs(s)
	if err != nil {
		return err
	}
	*v.dst = u
	return nil
}

func (v *urlsValue) String() string {
	if v.dst == nil {
		return ""
	}
	return urlsString(*v.dst)
}

func urlsString(us []url.URL) string {
	s := make([]string, len(us))
	for i := range us {
		s[i] = us[i].String()
	}
	return strings.Join(s, ",")
}

// parseURLs applies etcd's URL rules (client/pkg types.NewURLs) to a
// comma-separated list, then dedupes and sorts like flags.UniqueURLs.
func parseURLs(s string) ([]url.URL, error) {
	var out []url.URL
	seen := map[string]bool{}
	for _, in := range strings.Split(s, ",") {
		in = strings.TrimSpace(in)
		u, err := url.Parse(in)
		if err != nil {
			return nil, err
		}
		switch u.Scheme {
		case "http", "https":
			if _, _, err := net.SplitHostPort(u.Host); err != nil {
				return nil, fmt.Errorf(`URL address does not have the form "host:port": %s`, in)
			}
			if u.Path != "" {
				return nil, fmt.Errorf("URL must not contain a path: %s", in)
			}
		case "unix", "unixs":
		default:
			return nil, fmt.Errorf("URL scheme must be http, https, unix, or unixs: %s", in)
		}
		if seen[u.String()] {
			continue
		}
		seen[u.String()] = true
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b url.URL) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// stringsValue is a comma-separated list kept in order with duplicates
// (etcd's StringsValue: cipher suites, allowed CNs and hostnames).
type stringsValue struct{ dst *[]string }

func (v *stringsValue) Set(s string) error {
	if s == "" {
		*v.dst = nil
		return nil
	}
	*v.dst = strings.Split(s, ",")
	return nil
}
func (v *stringsValue) String() string {
	if v.dst == nil {
		return ""
	}
	return strings.Join(*v.dst, ",")
}

// uniqueStringsValue is a comma-separated set, deduplicated and sorted
// (etcd's UniqueStringsValue: log outputs, host whitelist, discovery
// endpoints).
type uniqueStringsValue struct{ dst *[]string }

func (v *uniqueStringsValue) Set(s string) error {
	*v.dst = uniqueSorted(strings.Split(s, ","))
	return nil
}
func (v *uniqueStringsValue) String() string {
	if v.dst == nil {
		return ""
	}
	return strings.Join(*v.dst, ",")
}

func uniqueSorted(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// choiceValue accepts one of a fixed set, failing with etcd's bare
// "invalid value" (flags.SelectiveStringValue).
type choiceValue struct {
	dst    *string
	valids []string
}

func (v *choiceValue) Set(s string) error {
	if !slices.Contains(v.valids, s) {
		return errors.New("invalid value")
	}
	*v.dst = s
	return nil
}
func (v *choiceValue) String() string {
	if v.dst == nil {
		return ""
	}
	return *v.dst
}

// choicesValue is a comma-separated subset of a fixed set (v2-deprecation).
type choicesValue struct {
	dst    *string
	valids []string
}

func (v *choicesValue) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if !slices.Contains(v.valids, p) {
			return fmt.Errorf("invalid value %q", p)
		}
	}
	*v.dst = s
	return nil
}
func (v *choicesValue) String() string {
	if v.dst == nil {
		return ""
	}
	return *v.dst
}

// ignoredValue is a flag etcd still accepts but no longer uses. Like
// etcd's IgnoredFlag it is a bool flag, so "--force" alone parses; a
// "--force=x" value is discarded too.
type ignoredValue struct{ set *bool }

func (v *ignoredValue) Set(string) error {
	if v.set != nil {
		*v.set = true
	}
	return nil
}
func (v *ignoredValue) String() string   { return "" }
func (v *ignoredValue) IsBoolFlag() bool { return true }

// corsValue is --cors: "*" or a list of origin URLs (etcd validates them
// as URLs and keeps "*" as a literal).
type corsValue struct{ dst *[]string }

func (v *corsValue) Set(s string) error {
	if s == "*" || s == "" {
		*v.dst = []string{"*"}
		return nil
	}
	u, err := parseURLs(s)
	if err != nil {
		return err
	}
	out := make([]string, len(u))
	for i := range u {
		out[i] = u[i].String()
	}
	*v.dst = out
	return nil
}
func (v *corsValue) String() string {
	if v.dst == nil {
		return ""
	}
	return strings.Join(*v.dst, ",")
}
