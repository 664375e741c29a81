package tools

import (
	"fmt"
	"strconv"
	"strings"
)

// semver is a semantic version as etcd stores and compares them
// (storageVersion "3.7.0", etcdutl migrate's --target-version).
type semver struct {
	Major, Minor, Patch int64
	Pre, Meta           string
}

func (v semver) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	if v.Meta != "" {
		s += "+" + v.Meta
	}
	return s
}

// less orders versions by major, minor and patch, as etcd's storage
// versions are compared.
func (v semver) less(o semver) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// minor is the version cut to major.minor, as storage versions are kept.
func (v semver) minor() semver { return semver{Major: v.Major, Minor: v.Minor} }

// majorMinor prints the version as etcdutl names storage versions: "3.6".
func (v semver) majorMinor() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// parseSemverErr parses "X.Y.Z[-pre][+meta]", the form etcd reads
// versions in, with an error that says what is wrong.
func parseSemverErr(s string) (semver, error) {
	var v semver
	rest := s
	if i := strings.IndexByte(rest, '+'); i >= 0 {
		rest, v.Meta = rest[:i], rest[i+1:]
	}
	if i := strings.IndexByte(rest, '-'); i >= 0 {
		rest, v.Pre = rest[:i], rest[i+1:]
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 {
		return semver{}, fmt.Errorf("%s is not in dotted-tri format", rest)
	}
	for _, id := range []string{v.Pre, v.Meta} {
		for _, part := range strings.Split(id, ".") {
			if id != "" && !validIdentifier(part) {
				return semver{}, fmt.Errorf("%q is not a valid pre-release or build identifier", part)
			}
		}
	}
	for i, dst := range []*int64{&v.Major, &v.Minor, &v.Patch} {
		n, err := strconv.ParseInt(parts[i], 10, 64)
		if err != nil {
			return semver{}, err
		}
		if n < 0 {
			return semver{}, fmt.Errorf("%s has a negative part", s)
		}
		*dst = n
	}
	return v, nil
}

func parseSemver(s string) (semver, bool) {
	v, err := parseSemverErr(s)
	return v, err == nil
}

func validIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}
