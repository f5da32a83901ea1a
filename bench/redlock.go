package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/redis/go-redis/v9"
)

// redlockContender is this library with its default options, except for the
// restart grace and key prefixes (see newRedlockContender).
type redlockContender struct {
	name   string
	client *redlock.Client
	// waitClient serves Acquire, the blocking wait. It is a second client
	// with a key prefix (and so release channels) of its own, so that what
	// its waits leave behind (subscriptions, wake-up state) never counts
	// against the TryAcquire workloads' time and allocations. What such
	// leftovers cost is measured on purpose, by the idle-subscribers
	// workloads.
	waitClient *redlock.Client

	// nodes and fencing are what the clients were built with (StartIdle).
	nodes   []redis.UniversalClient
	fencing bool

	// newClient makes a client like the above with another key prefix;
	// workerClients are the ones ForWorker made, under a prefix of their own.
	newClient     func(prefix string) (*redlock.Client, error)
	mu            sync.Mutex
	workerClients []*redlock.Client
}

// newRedlockContender builds its clients over nodes with default options but
// two. KeyPrefix is the contender's name, so the fenced and unfenced
// contenders never share keys or release channels. RestartGrace is
// NoRestartGrace: the default grace (never less than the largest TTL, 10s)
// would keep the bench's freshly started nodes from voting for 10s after
// every cluster start. They start empty, so there is no forgotten lock for
// the grace to protect, and the guard's code still runs on every vote (it
// compares against a grace of zero), so the hot path measured is the one
// users run.
func newRedlockContender(ctx context.Context, name string, nodes []redis.UniversalClient, fencing bool) (*redlockContender, error) {
	newClient := func(prefix string) (*redlock.Client, error) {
		client, err := redlock.New(nodes, redlock.Options{
			RestartGrace:          redlock.NoRestartGrace,
			AllowNoFaultTolerance: len(nodes) < 3, // the matrix measures 1 node too
			DisableFencing:        !fencing,
			KeyPrefix:             prefix,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := checkVoting(ctx, client); err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w", name, err), client.Close())
		}
		return client, nil
	}
	client, err := newClient(name + ":")
	if err != nil {
		return nil, err
	}
	waitClient, err := newClient(name + "-wait:")
	if err != nil {
		return nil, errors.Join(err, client.Close())
	}
	return &redlockContender{name: name, client: client, waitClient: waitClient, nodes: nodes, fencing: fencing, newClient: newClient}, nil
}

// checkVoting makes sure every node's vote counts before anything is
// measured: a node sitting out would turn every run into a measurement of
// the library's failure path.
func checkVoting(ctx context.Context, client *redlock.Client) error {
	var notVoting []string
	for _, info := range client.Nodes(ctx) {
		if !info.Voting {
			notVoting = append(notVoting, fmt.Sprintf("%s (sits out: %q, error: %v)", info.Node, info.SitOutReason, info.Err))
		}
	}
	if len(notVoting) > 0 {
		return fmt.Errorf("nodes not voting: %s", strings.Join(notVoting, ", "))
	}
	return nil
}

func (r *redlockContender) Name() string { return r.name }

func (r *redlockContender) TryAcquire(ctx context.Context, name string) (Held, error) {
	lock, err := r.client.TryAcquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return lock, nil
}

func (r *redlockContender) Acquire(ctx context.Context, name string) (Held, error) {
	lock, err := r.waitClient.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return lock, nil
}

// ForWorker gives worker i a client of its own, made on first use and kept
// until Close. All of them share one key prefix, so they contend for the
// same keys, and it is not the prefix of waitClient, so waitClient's
// subscription never hears their releases.
func (r *redlockContender) ForWorker(i int) (Waiter, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.workerClients) <= i {
		client, err := r.newClient(r.name + "-clients:")
		if err != nil {
			return nil, err
		}
		r.workerClients = append(r.workerClients, client)
	}
	return &redlockContender{name: r.name, client: r.workerClients[i], waitClient: r.workerClients[i]}, nil
}

// StartIdle makes n clients with the contender's key prefix, so the same
// release channels, and with go-redis clients of their own: New adds a hook
// to the clients it is given, and a hundred hooks on the shared ones would
// slow the measured client's every command. The main client holds lock while
// every idle client waits for it once, concurrently, until a short MaxWait
// gives up; then it releases. The idle clients stay until stop.
func (r *redlockContender) StartIdle(ctx context.Context, n int, lock string) (_ func() error, err error) {
	var idle []*redlock.Client
	stop := func() error {
		var errs []error
		for _, c := range idle {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, stop())
		}
	}()
	urls := make([]string, len(r.nodes))
	for i, node := range r.nodes {
		rdb, ok := node.(*redis.Client)
		if !ok {
			return nil, fmt.Errorf("idle clients: node %d is a %T, not a *redis.Client", i, node)
		}
		urls[i] = "redis://" + rdb.Options().Addr
	}
	for range n {
		c, err := redlock.NewFromURLs(urls, redlock.Options{
			RestartGrace:          redlock.NoRestartGrace,
			AllowNoFaultTolerance: len(urls) < 3,
			DisableFencing:        !r.fencing,
			KeyPrefix:             r.name + ":", // the main client's

		})
		if err != nil {
			return nil, fmt.Errorf("idle client: %w", err)
		}
		idle = append(idle, c)
		// One at a time: a hundred first contacts at once overload two
		// cores past the node timeout.
		if err := c.Verify(ctx); err != nil {
			return nil, fmt.Errorf("idle client: %w", err)
		}
	}
	held, err := r.client.TryAcquire(ctx, lock)
	if err != nil {
		return nil, fmt.Errorf("idle clients: hold %s: %w", lock, err)
	}
	// Long enough for a first attempt, the subscription and a second
	// attempt of ten clients at once on a loaded machine.
	const wait = 500 * time.Millisecond
	errs := make(chan error, len(idle))
	slots := make(chan struct{}, 10) // waits at once
	for _, c := range idle {
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			_, err := c.Acquire(ctx, lock, redlock.WithMaxWait(wait))
			if errors.Is(err, context.DeadlineExceeded) {
				// Waited, as meant, and gave up. The last attempt may have
				// failed on a node too busy to answer in time rather than
				// on the held lock: no matter, the client waited.
				err = nil
			} else if err == nil {
				err = fmt.Errorf("an idle client took %s, which was held", lock)
			}
			errs <- err
		}()
	}
	var waitErrs []error
	for range idle {
		waitErrs = append(waitErrs, <-errs)
	}
	waitErrs = append(waitErrs, held.Release(ctx))
	if err := errors.Join(waitErrs...); err != nil {
		return nil, fmt.Errorf("idle clients: %w", err)
	}
	return stop, nil
}

func (r *redlockContender) Close() error {
	errs := []error{r.client.Close(), r.waitClient.Close()}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, client := range r.workerClients {
		errs = append(errs, client.Close())
	}
	return errors.Join(errs...)
}
