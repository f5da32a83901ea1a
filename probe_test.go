package redlock_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// The clock sample of a probe is timed on a warm connection: a slow dial (a TLS handshake far
// away, here a dialer that takes a second) must not show up as round trip time, nor as half of
// it in the clock offset.
func TestProbeTimesTheClockSampleWithoutTheDial(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	const dialDelay = time.Second
	rdb := redis.NewClient(&redis.Options{
		Addr: cl.Addrs()[0],
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			time.Sleep(dialDelay) // the slow set-up the sample must not include
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	})
	// A node timeout that leaves room for the slow dial (Nodes bounds each probe by it).
	c := newClientOn(t, []redis.UniversalClient{rdb}, redlock.Options{AllowNoFaultTolerance: true, RestartGrace: redlock.NoRestartGrace, NodeTimeout: 2 * dialDelay})
	info := c.Nodes(context.Background())[0]
	if info.Err != nil {
		t.Fatal(info.Err)
	}
	if info.RTT >= dialDelay/2 || info.ClockOffset >= dialDelay/4 {
		t.Fatalf("RTT %v, clock offset %v: the %v dial is inside the timed sample", info.RTT, info.ClockOffset, dialDelay)
	}
}

// A wrong password is reported as the server's refusal, not as a node that did not answer
// INFO properly.
func TestProbeReportsAWrongPassword(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	if err := cl.Servers[0].Client().ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	for url, want := range map[string]string{
		"redis://:wrong@" + cl.Addrs()[0]: "WRONGPASS",
		"redis://" + cl.Addrs()[0]:        "NOAUTH",
	} {
		c, err := redlock.NewFromURLs([]string{url}, redlock.Options{AllowNoFaultTolerance: true, RestartGrace: redlock.NoRestartGrace})
		if err != nil {
			t.Fatal(err)
		}
		info := c.Nodes(context.Background())[0]
		c.Close()
		if info.Err == nil || !strings.Contains(info.Err.Error(), want) || strings.Contains(info.Err.Error(), "INFO") {
			t.Errorf("%s: want an error with %s, got %v", want, want, info.Err)
		}
	}
}
