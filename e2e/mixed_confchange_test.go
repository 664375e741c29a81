package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// TestMixedConfChangeRefusals: conf changes that etcd's members refuse
// when they apply them (a peer URL already taken, the learner limit) are
// refused by the Strata member too, with raft's configuration left alike
// on both kinds. etcd checks neither before proposing, so the changes
// sent to its member are committed to the log, and each member decides
// at apply, from the membership the log left. Had the Strata member
// applied them, its member list and its leader's raft progress would
// hold members that etcd's do not. The same holds after the Strata
// member is killed and replays the refused entries from its WAL.
func TestMixedConfChangeRefusals(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	dir := t.TempDir()
	s1, scli := startMixedLead(t, strata, "s1", dir, clusterFlags)
	e1, _ := joinMixed(t, s1, scli, b.Etcd, "e1", dir, clusterFlags, false)
	ecli := memberClient(t, e1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*poll.Deadline)
	defer cancel()
	putN(t, scli, "cc", 5)

	// etcd derives a new member's id from its peer URLs and the time in
	// seconds, so each add names a different set of URLs: the same set
	// twice within a second is "member ID already exist" instead.
	const urlX, urlX2, urlX3, urlY = "http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:11", "http://127.0.0.1:12"
	// A learner on urlX and urlX2, through the etcd member (retried while
	// it has not yet been connected to the leader for etcd's health
	// interval).
	poll.UntilNil(t, "member add --learner "+urlX+" through e1", func() error {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		_, err := ecli.MemberAddAsLearner(actx, []string{urlX, urlX2})
		if err != nil && rpctypes.ErrorDesc(err) != rpctypes.ErrUnhealthy.Error() {
			t.Fatalf("member add --learner %s: %v", urlX, err)
		}
		return err
	})
	refused := []struct {
		what string
		add  func() error
		want error
	}{
		{"member add --learner " + urlX2 + " (a URL the learner has)", func() error { _, err := ecli.MemberAddAsLearner(ctx, []string{urlX2}); return err }, rpctypes.ErrPeerURLExist},
		{"member add " + urlX + "," + urlX3 + " (a voter sharing a URL with the learner)", func() error {
			_, err := ecli.MemberAdd(ctx, []string{urlX, urlX3})
			return err
		}, rpctypes.ErrPeerURLExist},
		{"member add --learner " + urlY + " (a second learner)", func() error { _, err := ecli.MemberAddAsLearner(ctx, []string{urlY}); return err }, rpctypes.ErrTooManyLearners},
	}
	for _, r := range refused {
		if err := r.add(); rpctypes.ErrorDesc(err) != r.want.Error() {
			t.Fatalf("%s through e1: got %v, want %q", r.what, err, r.want)
		}
	}
	// The refusals are decided at apply: the Strata member refused the
	// same three entries.
	poll.UntilNil(t, "s1 to refuse the three committed changes", func() error {
		if n := logCount(s1, "refused a committed conf change"); n != len(refused) {
			return fmt.Errorf("s1 refused %d", n)
		}
		return nil
	})
	// Through the Strata member, the same requests get the same errors
	// (checked before proposing).
	if _, err := scli.MemberAddAsLearner(ctx, []string{urlX}); rpctypes.ErrorDesc(err) != rpctypes.ErrPeerURLExist.Error() {
		t.Fatalf("member add --learner %s through s1: got %v, want %q", urlX, err, rpctypes.ErrPeerURLExist)
	}

	check := func(when string) {
		t.Helper()
		want := sameMemberList(t, ctx, scli, ecli, when)
		for _, m := range []struct {
			srv        *harness.Server
			cli, other *clientv3.Client
		}{{s1, scli, ecli}, {e1, ecli, scli}} {
			leadOn(t, ctx, m.srv, m.cli, m.other)
			got := raftProgressIDs(t, m.srv)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: raft's configuration on leader %s holds %v, the member list %v", when, m.srv.Name(), got, want)
			}
		}
		r, err := scli.Put(ctx, "cc/after", when)
		if err != nil {
			t.Fatal(err)
		}
		hashesEqual(t, ctx, r.Header.Revision, []*harness.Server{s1, e1}, []*clientv3.Client{scli, ecli})
	}
	check("after the refusals")

	// Killed, the Strata member replays the refused entries (its WAL's
	// snapshot is before them) and refuses them again.
	replays := logCount(s1, "refusing a committed conf change")
	if err := s1.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s1.Start(); err != nil {
		t.Fatal(err)
	}
	if n := logCount(s1, "refusing a committed conf change"); n < replays+len(refused) {
		t.Fatalf("s1 refused %d conf changes replaying its WAL, want %d", n-replays, len(refused))
	}
	check("after s1 was killed and restarted")
	t.Logf("MIXED: %d conf changes committed through etcd (a taken peer URL twice, the learner limit) were refused by both members; member lists, raft configurations on either leader and HashKV agree, also after the Strata member replayed them from its WAL", len(refused))
}

// sameMemberList checks that both clients' members list the same ids,
// peer URLs and learner flags, and returns the ids, sorted.
func sameMemberList(t *testing.T, ctx context.Context, a, b *clientv3.Client, when string) []string {
	t.Helper()
	list := func(cli *clientv3.Client) []string {
		r, err := cli.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range r.Members {
			urls := slices.Clone(m.PeerURLs)
			sort.Strings(urls)
			out = append(out, fmt.Sprintf("%x %s learner=%v", m.ID, strings.Join(urls, ","), m.IsLearner))
		}
		sort.Strings(out)
		return out
	}
	la, lb := list(a), list(b)
	if !slices.Equal(la, lb) {
		t.Fatalf("%s: member lists differ:\n%s\n%s", when, strings.Join(la, "\n"), strings.Join(lb, "\n"))
	}
	ids := make([]string, len(la))
	for i, l := range la {
		ids[i], _, _ = strings.Cut(l, " ")
	}
	return ids
}

// leadOn moves the leadership to m (through other, its only peer, when
// that leads) until m's Status says it leads.
func leadOn(t *testing.T, ctx context.Context, m *harness.Server, mcli, other *clientv3.Client) {
	t.Helper()
	poll.UntilNil(t, m.Name()+" to lead", func() error {
		st, err := mcli.Status(ctx, m.ClientURL)
		if err != nil {
			return err
		}
		if st.Leader != st.Header.MemberId {
			mctx, mcancel := context.WithTimeout(ctx, 5*time.Second)
			defer mcancel()
			if _, err := other.MoveLeader(mctx, st.Header.MemberId); err != nil {
				return err
			}
			return fmt.Errorf("moving the leadership to %s", m.Name())
		}
		return nil
	})
}

// raftProgressIDs reads the leader m's raft.status from /debug/vars and
// returns the ids raft tracks progress for (its configuration, learners
// included), sorted.
func raftProgressIDs(t *testing.T, m *harness.Server) []string {
	t.Helper()
	var ids []string
	poll.UntilNil(t, "raft.status of "+m.Name(), func() error {
		resp, err := http.Get(m.ClientURL + "/debug/vars")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var vars struct {
			Raft struct {
				Progress map[string]json.RawMessage `json:"progress"`
			} `json:"raft.status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&vars); err != nil {
			return err
		}
		if len(vars.Raft.Progress) == 0 {
			return fmt.Errorf("no progress (not the leader?)")
		}
		ids = ids[:0]
		for id := range vars.Raft.Progress {
			if _, err := strconv.ParseUint(id, 16, 64); err != nil {
				return fmt.Errorf("progress id %q", id)
			}
			ids = append(ids, id)
		}
		return nil
	})
	sort.Strings(ids)
	return ids
}

// hashesEqual waits for every member to reach rev and checks that
// HashKV at rev is the same on all.
func hashesEqual(t *testing.T, ctx context.Context, rev int64, ms []*harness.Server, clis []*clientv3.Client) {
	t.Helper()
	var first uint32
	for i, m := range ms {
		var h uint32
		poll.UntilNil(t, "HashKV at "+strconv.FormatInt(rev, 10)+" on "+m.Name(), func() error {
			r, err := clis[i].HashKV(ctx, m.ClientURL, rev)
			if err != nil {
				return err
			}
			h = r.Hash
			return nil
		})
		if i == 0 {
			first = h
		} else if h != first {
			t.Fatalf("HashKV at %d: %08x on %s, %08x on %s", rev, first, ms[0].Name(), h, m.Name())
		}
	}
}

// TestMixedJoinVersionCheck: a member that joins checks the running
// cluster's version as etcd's does (GET /version and /downgrade/enabled
// on the peers). With a downgrade to 3.6 enabled, a 3.7 member of either
// kind refuses to join a leader of either kind ("incompatible with
// current running cluster"), and exits before it touches raft; once the
// downgrade is cancelled, a Strata member joins.
func TestMixedJoinVersionCheck(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	for _, lead := range []struct{ kind, bin string }{{"strata", strata}, {"etcd", b.Etcd}} {
		t.Run("leader="+lead.kind, func(t *testing.T) {
			dir := t.TempDir()
			l, lcli := startMixedLead(t, lead.bin, "l1", dir, clusterFlags)
			ctx, cancel := context.WithTimeout(context.Background(), 2*poll.Deadline)
			defer cancel()
			poll.UntilNil(t, "downgrade enable 3.6", func() error {
				_, err := lcli.Downgrade(ctx, clientv3.DowngradeEnable, "3.6")
				return err
			})
			for _, j := range []struct{ kind, bin string }{{"strata", strata}, {"etcd", b.Etcd}} {
				name := "j-" + j.kind
				join, err := harness.NewServer(harness.ServerConfig{Bin: j.bin, Name: name, Dir: dir, InitialCluster: "pending",
					Flags: append(slices.Clone(clusterFlags), "--initial-cluster-state=existing")})
				if err != nil {
					t.Fatal(err)
				}
				added, err := lcli.MemberAddAsLearner(ctx, []string{join.AdvertisePeerURL})
				if err != nil {
					t.Fatal(err)
				}
				harness.WithInitialCluster(join, l.Name()+"="+l.AdvertisePeerURL+","+name+"="+join.AdvertisePeerURL)
				if err := join.Start(); err == nil {
					join.Stop()
					t.Fatalf("%s joined a cluster with a downgrade to 3.6 enabled", name)
				}
				if !harnessLogHas(join, "incompatible with current running cluster") {
					t.Fatalf("%s did not join, but not for its version; its log:\n%s", name, join.LogTail(30))
				}
				if _, err := lcli.MemberRemove(ctx, added.Member.ID); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := lcli.Downgrade(ctx, clientv3.DowngradeCancel, ""); err != nil {
				t.Fatal(err)
			}
			joinMixed(t, l, lcli, strata, "s-after", dir, clusterFlags, true)
			poll.UntilNil(t, "the Strata learner to serve after the cancel", func() error {
				r, err := lcli.MemberList(ctx)
				if err != nil {
					return err
				}
				for _, m := range r.Members {
					if m.Name == "s-after" {
						return nil
					}
				}
				return fmt.Errorf("s-after has not published its name")
			})
		})
	}
	if t.Failed() {
		return
	}
	t.Logf("MIXED: with a downgrade to 3.6 enabled, Strata and etcd 3.7 members both refused to join a Strata and an etcd leader; after the cancel a Strata member joined")
}
