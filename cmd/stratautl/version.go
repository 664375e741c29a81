package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/strata-db/strata/version"
)

func init() {
	register(command{name: "version", example: "stratautl version", summary: "print stratautl's version, the etcdutl release it stands in for and the API version", run: versionCommand})
}

// apiVersion is etcd's API version, major.minor of the etcd release.
func apiVersion() string {
	parts := strings.SplitN(version.Etcd, ".", 3)
	if len(parts) < 2 {
		return version.Etcd
	}
	return parts[0] + "." + parts[1]
}

func versionCommand(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "", []string{
		"stratautl version",
		"",
		"Prints, one a line: stratautl's own version (Strata's release), the etcdutl release whose",
		"commands, flags and output stratautl matches, and the etcd API version, as 'etcdutl version'",
		"prints its last two lines.",
	}, stderr)
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "stratautl version:", version.Strata)
	fmt.Fprintln(stdout, "etcdutl version:", version.Etcd)
	fmt.Fprintln(stdout, "API version:", apiVersion())
	return nil
}
