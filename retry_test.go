package redlock_test

// Calls that run twice on a node: go-redis sends a command again on a new
// connection when the first one broke before its reply came back (its
// default retries), so a script may run a second time, after its first
// run's effects. The second run's answer must be as good as the first's.

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// skewedClock is the system clock moved by d.
type skewedClock struct{ d time.Duration }

func (s skewedClock) Now() time.Time { return time.Now().Add(s.d) }

// awaitKey returns a function that waits until s holds key: the lost
// command ran there.
func awaitKey(t *testing.T, ctx context.Context, s *redistest.Server, key string) func() {
	return func() {
		err := redistest.Await(ctx, "the command ran on "+s.Addr, 10*time.Second, func(ctx context.Context) (bool, error) {
			n, err := s.Client().Exists(ctx, key).Result()
			return n == 1, err
		})
		if err != nil {
			t.Error(err)
		}
	}
}

// A fair take whose reply was lost runs a second time. The first run
// claimed the key and raised the fence register; the second finds the
// grant pinned by this same round, a round the caller has not seen fail.
// Its answer must still carry the fence register in the slot where the
// caller reads the value before the take, or the caller draws a token that
// need not exceed an earlier holder's: here the earlier holder's clock ran
// an hour ahead, so its token is above this client's time-based proposal.
func TestFairTakeRetriedAfterALostReplyDrawsATokenAboveTheLastHolders(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "job"
	ahead := newClient(t, cl, redlock.Options{TTL: 5 * time.Second, Clock: skewedClock{time.Hour}})
	prev, err := ahead.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var loss replyLoss
	rdb := loss.client(cl.Servers[0].Addr)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redlock.New([]redis.UniversalClient{rdb}, redlock.Options{TTL: 5 * time.Second, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	// A warm-up take: a node that was never asked to load the scripts
	// (this process learnt their SHAs from another) answers the first
	// EVALSHA with NOSCRIPT, and the take runs by EVAL after that.
	warm, err := c.TryAcquire(ctx, "warm-up", redlock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lost := loss.arm("take", awaitKey(t, ctx, cl.Servers[0], c.LockKey(name)))
	l, err := c.TryAcquire(ctx, name, redlock.WithFairness())
	if err != nil {
		t.Fatalf("the retried take: %v", err)
	}
	defer l.Release(context.Background())
	select {
	case <-lost:
	default:
		t.Fatal("the take's reply was not lost: the schedule did not run")
	}
	if l.Token() <= prev.Token() {
		t.Fatalf("the retried take drew token %d, not above the last holder's %d", l.Token(), prev.Token())
	}
}
