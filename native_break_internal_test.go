package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// Adversarial tests of the native paths (native.go) against what the
// scripts they replace do (lua/): each runs the same schedule on the
// script path (the control) and on the native path.

// fillNodes puts every server of cl at its maxmemory with the policy the
// client demands (noeviction, DEPLOYMENTS.md): the server then refuses
// every command flagged denyoom with OOM. maxmemory 1 is below any used
// memory; undo sets it back.
func fillNodes(t *testing.T, ctx context.Context, cl *redistest.Cluster) (undo func()) {
	t.Helper()
	for _, s := range cl.Servers {
		rdb := s.Client()
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		for _, s := range cl.Servers {
			_ = s.Client().ConfigSet(context.Background(), "maxmemory", "0").Err()
		}
	}
}

// TestNativeExtendOnAFullNode: a node at its maxmemory under noeviction
// (the only policy the client accepts by default) refuses SET with OOM,
// since SET is flagged denyoom; the extend script's GET and PEXPIRE are
// not denyoom, and a script's first write is refused only when it is a
// denyoom command, so the script keeps renewing the held lock on a full
// node (until the client must raise the TTL register again, whose SET is
// refused: registerWindow, max(TTL, 10s) after the last raise; measured:
// a 3s lock on 3 full Redis 8.6 nodes kept extending for 10.09s). The
// native extend (SET IFEQ PX) does not: nativeRefusal does not take OOM
// for a reason to run the script, so the node's vote is lost at once, and
// a lock the script path keeps through a transient full node is lost on
// the native path. The same holds for every renewal round (extendBatch).
//
// Schedule: acquire on 3 nodes; the 3 nodes fill up (maxmemory reached,
// noeviction); the holder extends. Script path: extended on 3 of 3.
// Native path: OOM on 3 of 3, ErrNoQuorum, and the auto-renewal loses the
// lock at its deadline.
func TestNativeExtendOnAFullNode(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			script, err := c.TryAcquire(ctx, "full-script")
			if err != nil {
				t.Fatal(err)
			}
			native, err := c.TryAcquire(ctx, "full-native")
			if err != nil {
				t.Fatal(err)
			}
			undo := fillNodes(t, ctx, cl)
			defer undo()

			// The control: the script path on the same full nodes.
			scriptsOnly(c)
			mark := log.mark()
			if err := script.Extend(ctx); err != nil {
				t.Fatalf("control: the extend script on full nodes: %v", err)
			}
			if got := log.since(mark, "set ifeq"); got != 0 {
				t.Fatalf("control sent %d SET IFEQ", got)
			}

			// The native path on the same nodes.
			for _, n := range c.nodes {
				n.pipes.nativeRefused.Store(0)
			}
			mark = log.mark()
			err = native.Extend(ctx)
			if log.since(mark, "set ifeq") == 0 {
				t.Fatalf("the extend did not go native")
			}
			if err != nil {
				t.Errorf("native extend on full nodes: %v; the extend script renews the same lock on the same nodes", err)
			}
		})
	}
}

// TestNativeExtendOnAFullNode (extendBatch, as the auto-renewal sends
// it): on full nodes the batched extend script renews every lock of the
// round, the native round (SET IFEQ) renews none.
func TestNativeRenewalRoundOnAFullNode(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			var locks []*Lock
			for i := range 4 {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("full-round-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, l)
			}
			undo := fillNodes(t, ctx, cl)
			defer undo()
			round := func() []error {
				for _, l := range locks {
					l.extendMu.Lock()
				}
				defer func() {
					for _, l := range locks {
						l.extendMu.Unlock()
					}
				}()
				_, _, errs := c.extendBatch(ctx, locks, nil, time.Second)
				return errs
			}
			scriptsOnly(c)
			for i, err := range round() {
				if err != nil {
					t.Fatalf("control: lock %d in a scripted round on full nodes: %v", i, err)
				}
			}
			for _, n := range c.nodes {
				n.pipes.nativeRefused.Store(0)
			}
			mark := log.mark()
			errs := round()
			if log.since(mark, "set ifeq") == 0 {
				t.Fatal("the round did not go native")
			}
			for i, err := range errs {
				if err != nil {
					t.Errorf("lock %d in a native round on full nodes: %v; the batched script renews it", i, err)
				}
			}
		})
	}
}
