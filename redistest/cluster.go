package redistest

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// clusterReadyTimeout bounds the wait for a node's cluster state to turn
// ok. A master that was just started keeps refusing writes for 2s
// (Redis' CLUSTER_WRITABLE_DELAY) before its state can turn ok.
const clusterReadyTimeout = 10 * time.Second

// ServeSlots gives a node started with ClusterMode the hash slots first to
// last (CLUSTER ADDSLOTSRANGE) and waits until its cluster state is ok, so
// that it takes keys of those slots.
func (s *Server) ServeSlots(ctx context.Context, first, last int) error {
	if !s.opts.ClusterMode {
		return fmt.Errorf("redistest: ServeSlots on %s: the node was not started with ClusterMode", s.Addr)
	}
	rdb := s.Client()
	if err := rdb.Do(ctx, "cluster", "addslotsrange", first, last).Err(); err != nil {
		return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %w", first, last, s.Addr, err)
	}
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s: cluster state not ok %v after ADDSLOTSRANGE (last error %v)", s.Addr, clusterReadyTimeout, err)
		}
		// The state is updated by the server's cron, which sends nothing.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
