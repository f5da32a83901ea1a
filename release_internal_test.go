package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// A loss found by an extension releases in the background (Lock.extended),
// and the holder's Release comes right after it, as Do's does. The two
// releases share the attempt's replies: one that took the other's results
// waited for them for ever (seen as a Do that never returned, in
// TestRWLossClosesDone under load).
func TestBackgroundReleaseAndReleaseTogetherBothReturn(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	c, err := New(cl.Clients(), Options{TTL: time.Minute, RestartGrace: NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := range 300 {
		l, err := c.TryAcquire(ctx, "both")
		if err != nil {
			t.Fatal(err)
		}
		l.a.releaseInBackground()
		done := make(chan error, 1)
		go func() { done <- l.Release(ctx) }()
		bgDone := make(chan struct{})
		go func() { <-done; c.bg.wait(); close(bgDone) }()
		select {
		case <-bgDone:
		case <-time.After(30 * time.Second): // the release timeout is seconds; this is a hang
			t.Fatalf("round %d: a release did not return while another ran beside it", i)
		}
	}
}
