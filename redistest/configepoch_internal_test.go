package redistest

import (
	"context"
	"strings"
	"testing"
)

// A fresh cluster server that another cluster's server met first (the
// chaos suite's backends run clusters side by side on reused ports) still
// takes its config epoch: SetConfigEpoch forgets the stranger and asks
// again.
func TestSetConfigEpochForgetsAStrangerThatMetTheServerFirst(t *testing.T) {
	cl := StartT(t, 2, Options{ClusterMode: true})
	ctx := context.Background()
	fresh, stranger := cl.Servers[0], cl.Servers[1]
	if err := stranger.Client().Do(ctx, "cluster", "meet", "127.0.0.1", fresh.Port, fresh.BusPort).Err(); err != nil {
		t.Fatal(err)
	}
	if err := await(ctx, "the stranger known to the fresh server", func(ctx context.Context) (bool, error) {
		nodes, err := fresh.Client().Do(ctx, "cluster", "nodes").Text()
		return strings.Count(strings.TrimSpace(nodes), "\n") >= 1, err
	}); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Client().Do(ctx, "cluster", "set-config-epoch", 1).Err(); err == nil || !strings.Contains(err.Error(), "know any other node") {
		t.Fatalf("CLUSTER SET-CONFIG-EPOCH on a server that knows another: %v, want the refusal SetConfigEpoch handles", err)
	}
	if err := SetConfigEpoch(ctx, fresh.Client(), 1); err != nil {
		t.Fatal(err)
	}
	info, err := fresh.Client().Do(ctx, "cluster", "info").Text()
	if err != nil || !strings.Contains(info, "cluster_my_epoch:1") {
		t.Fatalf("CLUSTER INFO after SetConfigEpoch: %v %q, want cluster_my_epoch:1", err, info)
	}
}
