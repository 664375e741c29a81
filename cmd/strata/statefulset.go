package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/strata-db/strata/server"
	"github.com/strata-db/strata/server/config"
	"github.com/strata-db/strata/server/statefulset"
)

const statefulsetUsage = `Usage:

  strata statefulset start [member flags]
    Start a member that is a pod of a Kubernetes StatefulSet (the Helm
    chart's entry point). Before the member starts, the running cluster
    decides how: a member it still lists restarts; a new pod (a scale-up)
    or one whose data was lost is added as a learner and promoted once it
    has caught up; a pod whose member was removed earlier starts afresh;
    when no other member answers, the cluster bootstraps from
    --initial-cluster. The pod's name (<statefulset>-<ordinal>) is --name.

  strata statefulset stop [kube flags] [member flags]
    The pod's preStop hook: when the StatefulSet's desired replicas no
    longer include this pod's ordinal, remove its member from the
    cluster; on a restart, change nothing.

Kube flags (default: the pod's service account and environment):
  --kube-apiserver URL   the Kubernetes API
  --kube-token-file F    a bearer token
  --kube-ca-file F       the API's CA bundle
  --kube-namespace NS    the StatefulSet's namespace
  --statefulset NAME     the StatefulSet (default: --name without its ordinal)

Member flags are etcd's, as for 'strata' itself.
`

// runStatefulSet is `strata statefulset start|stop`.
func runStatefulSet(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "start" && args[0] != "stop") {
		if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
			fmt.Fprintf(stderr, "unknown statefulset command %q\n", args[0])
			fmt.Fprint(stderr, statefulsetUsage)
			return 2
		}
		fmt.Fprint(stdout, statefulsetUsage)
		return 0
	}
	kube, rest, err := kubeFlags(args[1:])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if args[0] == "stop" {
		// The kubelet expands $(VAR) in a container's args but not in a
		// lifecycle hook's command, which repeats the member's flags.
		for i, a := range rest {
			rest[i] = expandKubeVars(a)
		}
		return statefulsetStop(kube, rest, stderr)
	}
	if kube != (statefulset.Kube{}) {
		fmt.Fprintln(stderr, "the --kube-* and --statefulset flags belong to 'strata statefulset stop'")
		return 2
	}
	return runMember(rest, statefulsetPrepare)
}

// statefulsetPrepare decides the bootstrap (statefulset.Prepare) and
// returns the promotion of a learner to run once the member serves.
func statefulsetPrepare(cfg *config.Config, lg *slog.Logger) (func(*server.Server), error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := statefulset.Prepare(ctx, cfg, server.MemberInitialized(cfg), lg)
	if err != nil {
		return nil, err
	}
	d.Apply(cfg)
	lg.Info("statefulset: "+d.Why, "initial-cluster-state", d.State, "initial-cluster", d.InitialCluster)
	return func(s *server.Server) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-s.Done()
			cancel()
		}()
		id, learner := d.ID, d.Learner
		if !learner {
			// A pod that restarted before its promotion finished.
			var err error
			if id, learner, err = statefulset.Learner(ctx, cfg); err != nil {
				lg.Warn("statefulset: cannot tell whether this member is a learner", "error", err)
				return
			}
		}
		if learner {
			if err := statefulset.PromoteWhenReady(ctx, cfg, id, time.Second, lg); err != nil && ctx.Err() == nil {
				lg.Warn("statefulset: promotion stopped", "error", err)
			}
		}
	}, nil
}

func statefulsetStop(kube statefulset.Kube, args []string, stderr io.Writer) int {
	cfg, err := config.Parse(args, os.Environ(), stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return config.ExitCode(err)
	}
	lg := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := statefulset.Leave(ctx, cfg, kube.InCluster(), lg); err != nil {
		lg.Error("statefulset stop", "error", err)
		return 1
	}
	return 0
}

// kubeFlags takes the --kube-* and --statefulset flags (--f=v or --f v)
// out of args.
func kubeFlags(args []string) (statefulset.Kube, []string, error) {
	var k statefulset.Kube
	fields := map[string]*string{
		"kube-apiserver": &k.Server, "kube-token-file": &k.TokenFile, "kube-ca-file": &k.CAFile,
		"kube-namespace": &k.Namespace, "statefulset": &k.StatefulSet,
	}
	var rest []string
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		dst, ok := fields[name]
		if !ok || !strings.HasPrefix(args[i], "-") {
			rest = append(rest, args[i])
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return k, nil, fmt.Errorf("flag needs an argument: --%s", name)
			}
			i++
			val = args[i]
		}
		*dst = val
	}
	return k, rest, nil
}

var kubeVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandKubeVars replaces $(NAME) with the environment variable NAME, as
// the kubelet does for a container's args; an unset variable stays as
// written.
func expandKubeVars(s string) string {
	return kubeVar.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := os.LookupEnv(m[2 : len(m)-1]); ok {
			return v
		}
		return m
	})
}
