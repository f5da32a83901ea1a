package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// Inspect tells a lock that is not held from one it cannot judge: when the nodes that did not
// answer could give an owner a quorum, Status.Unknown is set, and Held false is no verdict.
func TestInspectUnknownWhenTheSilentNodesCouldMakeAQuorum(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	c, err := redlock.NewFromURLs(cl.URLs(), redlock.Options{TTL: time.Minute, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, step := range []struct {
		kill    int
		unknown bool
	}{{0, false}, {2, false}, {1, true}} {
		for range step.kill {
			for _, s := range cl.Servers {
				if s.Running() {
					if err := s.Kill(); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
		}
		st, err := c.Inspect(ctx, "nobody-holds-it")
		if st == nil {
			t.Fatalf("no status: %v", err)
		}
		if st.Held || st.Unknown != step.unknown {
			t.Fatalf("after killing %d more: got Held %v Unknown %v (%v), want Held false Unknown %v", step.kill, st.Held, st.Unknown, err, step.unknown)
		}
		var qe *redlock.QuorumError
		if step.unknown && !errors.As(err, &qe) {
			t.Fatalf("2 of 5 answered: want a *QuorumError with the status, got %v", err)
		}
	}
}
