package e2e

import (
	"regexp"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
)

// The differential auth sequence: users, roles and a prefix
// permission, auth enable, then what each identity may do, then auth
// disable.

// as runs an etcdctl command as user:password.
func as(name, userpass string, args ...string) step {
	return step{name: name, ctl: append([]string{"--user=" + userpass}, args...)}
}

func authScenario() scenario {
	return scenario{name: "auth", steps: []step{
		c("put before auth", "put", "/app/x", "1"),
		c("put outside before auth", "put", "/other/y", "2"),
		c("user add root", "user", "add", "root", "--new-user-password=rootpw"),
		c("user add alice", "user", "add", "alice", "--new-user-password=alicepw"),
		c("user add bob (no role)", "user", "add", "bob", "--new-user-password=bobpw"),
		c("user add duplicate", "user", "add", "alice", "--new-user-password=x"),
		c("role add reader", "role", "add", "reader"),
		c("role add writer", "role", "add", "writer"),
		c("role grant-permission --prefix read", "role", "grant-permission", "reader", "--prefix=true", "read", "/app/"),
		c("role grant-permission write", "role", "grant-permission", "writer", "write", "/app/w"),
		c("role grant-permission readwrite range", "role", "grant-permission", "writer", "readwrite", "key1", "key5"),
		c("role grant-permission then revoke", "role", "grant-permission", "writer", "read", "/scratch/"),
		c("role revoke-permission", "role", "revoke-permission", "writer", "/scratch/"),
		c("role revoke-permission not granted", "role", "revoke-permission", "writer", "/never/"),
		c("role get writer", "role", "get", "writer"),
		c("role grant-permission missing role", "role", "grant-permission", "nobody", "read", "/x"),
		c("user grant-role alice reader", "user", "grant-role", "alice", "reader"),
		c("user grant-role missing role", "user", "grant-role", "alice", "nobody"),
		c("user get alice", "user", "get", "alice"),
		c("user get --detail", "user", "get", "alice", "--detail"),
		c("user list", "user", "list"),
		c("role get reader", "role", "get", "reader"),
		c("role list", "role", "list"),
		c("auth status (off)", "auth", "status"),
		// root has no root role yet: the server refuses with "root user
		// does not have root role" and etcdctl grants it and retries.
		c("auth enable", "auth", "enable"),
		c("user get root", "--user=root:rootpw", "user", "get", "root"),
		c("auth status needs auth", "auth", "status"),
		c("anonymous get", "get", "/app/x"),
		c("anonymous put", "put", "/app/x", "2"),
		as("alice reads", "alice:alicepw", "get", "/app/x"),
		as("alice reads the prefix", "alice:alicepw", "get", "--prefix", "/app/", "-w", "json"),
		as("alice writes (denied)", "alice:alicepw", "put", "/app/x", "2"),
		as("alice outside her prefix (denied)", "alice:alicepw", "get", "/other/y"),
		as("alice deletes (denied)", "alice:alicepw", "del", "/app/x"),
		{name: "alice txn with a denied op", ctl: []string{"--user=alice:alicepw", "txn"}, stdin: "\nget /app/x\nput /app/x 9\n\n\n"},
		as("alice wrong password", "alice:wrong", "get", "/app/x"),
		as("unknown user", "mallory:pw", "get", "/app/x"),
		as("bob has no role", "bob:bobpw", "get", "/app/x"),
		as("alice lists users (denied)", "alice:alicepw", "user", "list"),
		as("root writes outside", "root:rootpw", "put", "/other/y", "3"),
		as("root reads everything", "root:rootpw", "get", "--prefix", "/", "-w", "json"),
		// RangeStream checks as Range does.
		as("alice streams the prefix", "alice:alicepw", "get", "--prefix", "/app/", "-w", "json", "--stream"),
		as("alice streams a key", "alice:alicepw", "get", "/app/x", "--stream", "--consistency", "s"),
		as("alice streams outside her prefix (denied)", "alice:alicepw", "get", "/other/y", "--stream"),
		as("alice streams a range past her prefix (denied)", "alice:alicepw", "get", "--from-key", "/app/", "--stream"),
		c("anonymous stream", "get", "/app/x", "--stream"),
		as("stream with a wrong password", "alice:wrong", "get", "/app/x", "--stream"),
		as("bob streams (no role)", "bob:bobpw", "get", "/app/x", "--stream"),
		as("root streams everything", "root:rootpw", "get", "--prefix", "/", "-w", "json", "--stream"),
		as("root auth status", "root:rootpw", "auth", "status"),
		// Leases are guarded by the keys attached to them. A
		// root lease on a key alice may read but not write...
		{name: "root grants a lease", ctl: []string{"--user=root:rootpw", "lease", "grant", "60"}, capture: map[string]*regexp.Regexp{"lapp": reLeaseID}},
		as("root attaches a key alice reads", "root:rootpw", "put", "--lease=${lapp}", "/app/leased", "v"),
		as("alice lists leases (keys she reads)", "alice:alicepw", "lease", "list"),
		as("alice timetolive --keys (keys she reads)", "alice:alicepw", "lease", "timetolive", "--keys", "${lapp}"),
		as("alice keep-alive --once (denied: no write)", "alice:alicepw", "lease", "keep-alive", "--once", "${lapp}"),
		as("alice revokes (denied: no write)", "alice:alicepw", "lease", "revoke", "${lapp}"),
		// ...and one on a key she may not even read.
		{name: "root grants another lease", ctl: []string{"--user=root:rootpw", "lease", "grant", "60"}, capture: map[string]*regexp.Regexp{"lroot": reLeaseID}},
		as("root attaches a key outside alice's prefix", "root:rootpw", "put", "--lease=${lroot}", "/other/leased", "v"),
		as("alice lists leases (denied)", "alice:alicepw", "lease", "list"),
		as("alice timetolive without --keys", "alice:alicepw", "lease", "timetolive", "${lroot}"),
		as("alice timetolive --keys (denied)", "alice:alicepw", "lease", "timetolive", "--keys", "${lroot}"),
		as("alice timetolive --keys -w json (denied)", "alice:alicepw", "lease", "timetolive", "--keys", "${lroot}", "-w", "json"),
		as("alice keep-alive --once (denied)", "alice:alicepw", "lease", "keep-alive", "--once", "${lroot}"),
		as("alice revokes (denied)", "alice:alicepw", "lease", "revoke", "${lroot}"),
		as("alice timetolive --keys of a missing lease", "alice:alicepw", "lease", "timetolive", "--keys", "1234abcd"),
		as("alice keep-alive --once of a missing lease", "alice:alicepw", "lease", "keep-alive", "--once", "1234abcd"),
		as("bob (no role) lists leases (denied)", "bob:bobpw", "lease", "list"),
		as("root lists leases", "root:rootpw", "lease", "list"),
		as("root timetolive --keys", "root:rootpw", "lease", "timetolive", "--keys", "${lroot}"),
		as("root keep-alive --once", "root:rootpw", "lease", "keep-alive", "--once", "${lroot}"),
		as("root revokes", "root:rootpw", "lease", "revoke", "${lroot}"),
		as("alice lists leases again", "alice:alicepw", "lease", "list"),
		as("root revokes alice's role", "root:rootpw", "user", "revoke-role", "alice", "reader"),
		as("alice after revoke (denied)", "alice:alicepw", "get", "/app/x"),
		{name: "root changes bob's password", ctl: []string{"--user=root:rootpw", "user", "passwd", "bob", "--interactive=false"}, stdin: "bobpw2\n"},
		as("bob's old password", "bob:bobpw", "get", "/app/x"),
		as("bob's new password, still no role", "bob:bobpw2", "get", "/app/x"),
		as("root deletes role writer", "root:rootpw", "role", "delete", "writer"),
		as("root deletes user bob", "root:rootpw", "user", "delete", "bob"),
		as("alice cannot disable auth", "alice:alicepw", "auth", "disable"),
		as("root auth disable", "root:rootpw", "auth", "disable"),
		c("anonymous get after disable", "get", "--prefix", "/", "-w", "json"),
		c("auth status after disable", "auth", "status"),
	}}
}

// tlsScenario is the TLS and CN-auth part of the auth scenarios, with kubeadm's client-side
// flags: https client URL, --client-cert-auth, a trusted CA; clients with
// a certificate from that CA get in, others do not; with auth enabled the
// certificate's common name is the user.
func tlsScenario() scenario {
	tls := []string{"--cacert=${ca}", "--cert=${rootcert}", "--key=${rootkey}"}
	withTLS := func(name string, args ...string) step {
		return step{name: name, ctl: append(append([]string{}, tls...), args...)}
	}
	fast := []string{"--dial-timeout=500ms", "--command-timeout=1s"}
	return scenario{
		name:   "tls",
		scheme: "https",
		flags: []string{
			"--cert-file=${servercert}", "--key-file=${serverkey}",
			"--trusted-ca-file=${ca}", "--client-cert-auth=true",
		},
		prepare: func(t *testing.T, dir string) map[string]string {
			ca, err := harness.NewCA(dir, "good")
			if err != nil {
				t.Fatal(err)
			}
			other, err := harness.NewCA(dir, "other")
			if err != nil {
				t.Fatal(err)
			}
			v := map[string]string{"ca": ca.CertPath, "otherca": other.CertPath}
			for _, c := range []struct {
				ca       *harness.CA
				file, cn string
			}{
				{ca, "server", "server"}, {ca, "root", "root"}, {ca, "alice", "alice"}, {other, "stranger", "root"}, {ca, "nocn", ""},
			} {
				cert, key, err := c.ca.Issue(c.file, c.cn)
				if err != nil {
					t.Fatal(err)
				}
				v[c.file+"cert"], v[c.file+"key"] = cert, key
			}
			return v
		},
		steps: []step{
			withTLS("put over mTLS", "put", "k", "v"),
			withTLS("get over mTLS", "get", "k", "-w", "json"),
			withTLS("endpoint health over mTLS", "endpoint", "health"),
			withTLS("member list over mTLS", "member", "list"),
			refused("no client certificate", append(fast, "--cacert=${ca}", "get", "k")...),
			refused("certificate from another CA", append(fast, "--cacert=${ca}", "--cert=${strangercert}", "--key=${strangerkey}", "get", "k")...),
			refused("server not trusted by the client", append(fast, "--cacert=${otherca}", "--cert=${rootcert}", "--key=${rootkey}", "get", "k")...),
			refused("plain http to the https port", append(fast, "--endpoints=${plainclient}", "get", "k")...),
			curlTLSStep("curl /health with a client certificate", "/health", "--cacert", "${ca}", "--cert", "${rootcert}", "--key", "${rootkey}"),
			func() step {
				st := curlTLSStep("curl /health without a client certificate", "/health", "--cacert", "${ca}")
				st.refusal = true
				return st
			}(),
			{name: "metrics port /livez", show: "curl ${metrics}/livez", run: func(t *testing.T, s *side) harness.Result {
				return curl(s.srv.MetricsURL+"/livez", "")
			}},
			// The gateway relays over its own connection, which presents
			// the server's certificate under --client-cert-auth.
			curlTLSPost("gateway put over mTLS", "/v3/kv/put", `{"key":"Z2s=","value":"dg=="}`, "--cacert", "${ca}", "--cert", "${rootcert}", "--key", "${rootkey}"),
			withTLS("user add root", "user", "add", "root", "--new-user-password=rootpw"),
			withTLS("user add alice", "user", "add", "alice", "--new-user-password=alicepw"),
			withTLS("auth enable", "auth", "enable"),
			withTLS("CN root: write without a password", "put", "k", "v2"),
			// With auth on, a gateway request with a CN certificate is
			// refused (the CN would not be the identity it runs as); one
			// without a CN runs as the gateway's connection's identity.
			curlTLSPost("gateway put with a CN certificate, auth enabled", "/v3/kv/put", `{"key":"Z2s=","value":"dg=="}`, "--cacert", "${ca}", "--cert", "${rootcert}", "--key", "${rootkey}"),
			curlTLSPost("gateway put without a CN, auth enabled", "/v3/kv/put", `{"key":"Z2s=","value":"dg=="}`, "--cacert", "${ca}", "--cert", "${nocncert}", "--key", "${nocnkey}"),
			curlTLSStep("curl /health with a CN certificate, auth enabled", "/health", "--cacert", "${ca}", "--cert", "${rootcert}", "--key", "${rootkey}"),
			c("CN alice (no role): denied", "--cacert=${ca}", "--cert=${alicecert}", "--key=${alicekey}", "put", "k", "v3"),
			c("password overrides CN", "--cacert=${ca}", "--cert=${alicecert}", "--key=${alicekey}", "--user=root:rootpw", "get", "k"),
			withTLS("auth disable", "auth", "disable"),
		},
	}
}

// refused is an etcdctl step expected to fail at the connection level.
func refused(name string, args ...string) step {
	return step{name: name, ctl: args, refusal: true}
}

// curlTLSStep is an HTTPS GET on the client port with extra curl flags.
func curlTLSStep(name, path string, flags ...string) step {
	return curlTLSPost(name, path, "", flags...)
}

// curlTLSPost is curlTLSStep with a body (a POST when not empty).
func curlTLSPost(name, path, body string, flags ...string) step {
	show := "curl " + strings.Join(flags, " ") + " " + path
	if body != "" {
		show += " -d " + body
	}
	return step{
		name: name,
		show: show,
		run: func(t *testing.T, s *side) harness.Result {
			args := make([]string, len(flags))
			for i, f := range flags {
				args[i] = s.expand(f)
			}
			return curlArgs(t, s.expand("${client}"+path), body, args...)
		},
	}
}
