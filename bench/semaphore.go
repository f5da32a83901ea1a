package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/quorumlabs/redlock"
	"github.com/redis/go-redis/v9"
)

// ContenderRedlockSemaphore is this library's Semaphore (SemaphoreBenchPermits
// permits): a permit's TryAcquire + Release beside the lock's. It runs the
// uncontended and slow-node workloads only: with several permits, several
// holders of one name at once are its purpose, not a violation.
const ContenderRedlockSemaphore = "redlock-semaphore"

// SemaphoreBenchPermits is the number of permits of the benchmarked
// semaphores: every acquire scans all the slots on each node, so K shows
// in the cost.
const SemaphoreBenchPermits = 4

// semaphoreContender takes permits of one Semaphore per name.
type semaphoreContender struct {
	client *redlock.Client
	mu     sync.Mutex
	sems   map[string]*redlock.Semaphore
}

// newSemaphoreContender builds its client as the lock's contender does
// (see newRedlockContender), under a key prefix of its own.
func newSemaphoreContender(ctx context.Context, nodes []redis.UniversalClient) (*semaphoreContender, error) {
	client, err := redlock.New(nodes, redlock.Options{RestartGrace: redlock.NoRestartGrace, KeyPrefix: ContenderRedlockSemaphore + ":", AllowNoFaultTolerance: len(nodes) < 3})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ContenderRedlockSemaphore, err)
	}
	if err := checkVoting(ctx, client); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("%s: %w", ContenderRedlockSemaphore, err)
	}
	return &semaphoreContender{client: client, sems: map[string]*redlock.Semaphore{}}, nil
}

func (s *semaphoreContender) Name() string { return ContenderRedlockSemaphore }

// semaphore is the semaphore called name, made once: a Semaphore is meant
// to be made once per name and shared.
func (s *semaphoreContender) semaphore(name string) (*redlock.Semaphore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sem := s.sems[name]; sem != nil {
		return sem, nil
	}
	// One or two nodes tolerate no failure: allowed here, the bench
	// measures the cost, not the fault tolerance.
	sem, err := s.client.Semaphore(name, SemaphoreBenchPermits)
	if err != nil {
		return nil, err
	}
	s.sems[name] = sem
	return sem, nil
}

func (s *semaphoreContender) TryAcquire(ctx context.Context, name string) (Held, error) {
	sem, err := s.semaphore(name)
	if err != nil {
		return nil, err
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (s *semaphoreContender) Close() error { return s.client.Close() }
