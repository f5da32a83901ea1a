package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/quorumlabs/redlock"
	"github.com/redis/go-redis/v9"
)

// redlockContender is this library with its default options, except for the
// restart grace and key prefixes (see newRedlockContender).
type redlockContender struct {
	name   string
	client *redlock.Client
	// waitClient serves Acquire, the blocking wait. It is a second client
	// with a key prefix (and so a release channel) of its own: a client that
	// ever waited stays subscribed to its release channel, and in this one
	// process the messages it receives for every later release would be
	// counted against the TryAcquire workloads' time and allocations. Across
	// processes, as users run it, that cost lands on the waiting process.
	waitClient *redlock.Client

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
			RestartGrace:   redlock.NoRestartGrace,
			DisableFencing: !fencing,
			KeyPrefix:      prefix,
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
	return &redlockContender{name: name, client: client, waitClient: waitClient, newClient: newClient}, nil
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

func (r *redlockContender) Close() error {
	errs := []error{r.client.Close(), r.waitClient.Close()}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, client := range r.workerClients {
		errs = append(errs, client.Close())
	}
	return errors.Join(errs...)
}
