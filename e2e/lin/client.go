package lin

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Client sends operations through one clientv3 client (pinned to one
// member) and records each in a History.
type Client struct {
	KV      clientv3.KV
	H       *History
	Member  string
	Timeout time.Duration // per operation

	id int
}

// NewClient is a client recording into h under a fresh client id.
func NewClient(kv clientv3.KV, h *History, member string, timeout time.Duration) *Client {
	return &Client{KV: kv, H: h, Member: member, Timeout: timeout, id: h.NewClient()}
}

// Do sends in, records it, and returns the recorded operation. After an
// error the client continues under a new porcupine client id: the
// in-doubt operation stays open until the end of the history.
func (c *Client) Do(in Input) Op {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	op := Op{Client: c.id, Member: c.Member, In: in, Call: c.H.Now()}
	out, err := c.send(ctx, in)
	op.Return = c.H.Now()
	if err != nil {
		op.Err = err.Error()
		if in.Kind.Writes() {
			c.id = c.H.NewClient()
		}
	} else {
		op.Out = out
	}
	c.H.Add(op)
	return op
}

func (c *Client) send(ctx context.Context, in Input) (Output, error) {
	var out Output
	key := KeyName(in.Key)
	switch in.Kind {
	case Get:
		resp, err := c.KV.Get(ctx, key)
		if err != nil {
			return out, err
		}
		out.Rev = resp.Header.Revision
		fillKVs(&out, resp.Kvs, in.Key)
	case Range:
		resp, err := c.KV.Get(ctx, Prefix, clientv3.WithPrefix())
		if err != nil {
			return out, err
		}
		out.Rev = resp.Header.Revision
		fillKVs(&out, resp.Kvs, -1)
	case Put:
		resp, err := c.KV.Put(ctx, key, in.Value)
		if err != nil {
			return out, err
		}
		out.Rev = resp.Header.Revision
	case Delete:
		resp, err := c.KV.Delete(ctx, key)
		if err != nil {
			return out, err
		}
		out.Rev, out.Deleted = resp.Header.Revision, resp.Deleted
	case TxnMod, TxnValue, TxnMulti:
		cmp := clientv3.Compare(clientv3.ModRevision(key), "=", in.CmpMod)
		then := []clientv3.Op{clientv3.OpPut(key, in.Value)}
		els := clientv3.OpGet(key)
		switch in.Kind {
		case TxnValue:
			cmp = clientv3.Compare(clientv3.Value(key), "=", in.CmpValue)
		case TxnMulti:
			then = append(then, clientv3.OpPut(KeyName(in.Key2), in.Value2), clientv3.OpDelete(KeyName(in.Del)))
			els = clientv3.OpGet(Prefix, clientv3.WithPrefix())
		}
		resp, err := c.KV.Txn(ctx).If(cmp).Then(then...).Else(els).Commit()
		if err != nil {
			return out, err
		}
		out.Rev, out.Succeeded = resp.Header.Revision, resp.Succeeded
		if !resp.Succeeded {
			if len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
				out.Bad = fmt.Sprintf("failed txn returned %d responses", len(resp.Responses))
				break
			}
			only := in.Key
			if in.Kind == TxnMulti {
				only = -1
			}
			fillKVs(&out, resp.Responses[0].GetResponseRange().Kvs, only)
		}
	default:
		return out, fmt.Errorf("lin: cannot send %v", in.Kind)
	}
	return out, nil
}

// fillKVs puts kvs into out.KV by key index; only >= 0 is the one key a
// single-key read may return.
func fillKVs(out *Output, kvs []*mvccpb.KeyValue, only int) {
	for _, kv := range kvs {
		k := string(kv.Key)
		i, err := strconv.Atoi(strings.TrimPrefix(k, Prefix))
		if !strings.HasPrefix(k, Prefix) || err != nil || i < 0 || i >= MaxKeys || (only >= 0 && i != only) || out.KV[i].Mod != 0 {
			out.Bad += fmt.Sprintf(" unexpected kv %q", k)
			continue
		}
		out.KV[i] = KV{Value: string(kv.Value), Create: kv.CreateRevision, Mod: kv.ModRevision, Ver: kv.Version}
	}
}

// Mix is the share of each operation kind in a workload, in percent
// (the rest, up to 100, are gets).
type Mix struct {
	Range, Put, Delete, TxnMod, TxnValue, TxnMulti int
}

// DefaultMix conflicts often on few keys: a third reads, the rest write,
// a third of the writes conditionally.
var DefaultMix = Mix{Range: 8, Put: 24, Delete: 8, TxnMod: 14, TxnValue: 6, TxnMulti: 6}

// Gen generates one client's operations from its own rand: random keys
// out of Keys, unique values (name-seq), and compares against what this
// client last saw of the key, so they succeed unless another client wrote
// in between.
type Gen struct {
	Name string // unique among the history's generators
	Keys int
	Mix  Mix
	Rand *rand.Rand

	seq  int
	seen [MaxKeys]KV
}

// Next is the next operation.
func (g *Gen) Next() Input {
	k := g.Rand.Intn(g.Keys)
	n := g.Rand.Intn(100)
	m := g.Mix
	value := func() string { g.seq++; return fmt.Sprintf("%s-%d", g.Name, g.seq) }
	switch {
	case n < m.Range:
		return Input{Kind: Range}
	case n < m.Range+m.Put:
		return Input{Kind: Put, Key: k, Value: value()}
	case n < m.Range+m.Put+m.Delete:
		return Input{Kind: Delete, Key: k}
	case n < m.Range+m.Put+m.Delete+m.TxnMod:
		cmp := g.seen[k].Mod
		if g.Rand.Intn(4) == 0 {
			cmp = 0 // succeeds only on a missing key
		}
		return Input{Kind: TxnMod, Key: k, Value: value(), CmpMod: cmp}
	case n < m.Range+m.Put+m.Delete+m.TxnMod+m.TxnValue:
		return Input{Kind: TxnValue, Key: k, Value: value(), CmpValue: g.seen[k].Value}
	case n < m.Range+m.Put+m.Delete+m.TxnMod+m.TxnValue+m.TxnMulti && g.Keys >= 3:
		perm := g.Rand.Perm(g.Keys)
		v := value()
		return Input{Kind: TxnMulti, Key: perm[0], Value: v, Key2: perm[1], Value2: v + "/2", Del: perm[2], CmpMod: g.seen[perm[0]].Mod}
	}
	return Input{Kind: Get, Key: k}
}

// Saw updates what the generator knows from a completed operation.
func (g *Gen) Saw(op Op) {
	if op.Failed() {
		return
	}
	switch op.In.Kind {
	case Get, TxnMod, TxnValue:
		if op.In.Kind == Get || !op.Out.Succeeded {
			g.seen[op.In.Key] = op.Out.KV[op.In.Key]
			return
		}
		g.seen[op.In.Key] = KV{Value: op.In.Value, Mod: op.Out.Rev}
	case Range:
		g.seen = op.Out.KV
	case Put:
		g.seen[op.In.Key] = KV{Value: op.In.Value, Mod: op.Out.Rev}
	case Delete:
		g.seen[op.In.Key] = KV{}
	case TxnMulti:
		if !op.Out.Succeeded {
			g.seen = op.Out.KV
			return
		}
		g.seen[op.In.Key] = KV{Value: op.In.Value, Mod: op.Out.Rev}
		g.seen[op.In.Key2] = KV{Value: op.In.Value2, Mod: op.Out.Rev}
		g.seen[op.In.Del] = KV{}
	}
}
