package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/quorumlabs/redlock/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// cluster is the bench's own set of redis-server processes with two views of
// them: direct, and slow, where node 0 is reached through an in-process
// toxiproxy that delays every reply. Each view has its own contenders; every
// contender of a view shares that view's go-redis clients.
type cluster struct {
	servers *redistest.Cluster
	proxy   *toxiproxy.ApiServer

	direct []redis.UniversalClient
	// slow is nil for a single node: with one node, a slow node is a slow
	// cluster, which measures the network rather than the library.
	slow      []redis.UniversalClient
	slowProxy redis.UniversalClient

	directContenders []Contender
	slowContenders   []Contender
}

// startCluster starts n nodes and builds the contenders named in want for
// both views. slowLatency is the delay the proxy adds to node 0's replies.
func startCluster(ctx context.Context, n int, want []string, slowLatency time.Duration) (c *cluster, err error) {
	servers, err := redistest.Start(n, redistest.Options{})
	if err != nil {
		return nil, fmt.Errorf("start %d redis nodes: %w", n, err)
	}
	c = &cluster{servers: servers, direct: servers.Clients()}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stop())
		}
	}()
	if c.directContenders, err = buildContenders(ctx, want, c.direct); err != nil {
		return nil, err
	}
	if n < 3 {
		return c, nil
	}
	if err := c.startSlowView(slowLatency); err != nil {
		return nil, err
	}
	if c.slowContenders, err = buildContenders(ctx, want, c.slow); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cluster) startSlowView(latency time.Duration) error {
	if latency < time.Millisecond || latency%time.Millisecond != 0 {
		return fmt.Errorf("slow-node latency %v: must be a whole number of milliseconds (toxiproxy's unit)", latency)
	}
	c.proxy = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(c.proxy, "slow-node", "127.0.0.1:0", c.servers.Addrs()[0])
	if err := c.proxy.Collection.Add(proxy, true); err != nil {
		return fmt.Errorf("start toxiproxy in front of %s: %w", c.servers.Addrs()[0], err)
	}
	toxic := fmt.Sprintf(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, latency.Milliseconds())
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		return fmt.Errorf("add latency toxic: %w", err)
	}
	// The same options redistest gives the direct clients, so the slow node
	// differs from the others only by the proxy's delay.
	c.slowProxy = redis.NewClient(&redis.Options{
		Addr:                  proxy.Listen,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		MaxRetries:            -1,
		DisableIdentity:       true,
	})
	c.slow = append([]redis.UniversalClient{c.slowProxy}, c.direct[1:]...)
	return nil
}

// contenders returns the contenders of one view.
func (c *cluster) contenders(slow bool) []Contender {
	if slow {
		return c.slowContenders
	}
	return c.directContenders
}

// stop closes every contender, the proxy and the nodes, and reports every
// failure, not only the first.
func (c *cluster) stop() error {
	var errs []error
	for _, list := range [][]Contender{c.directContenders, c.slowContenders} {
		for _, contender := range list {
			if closer, ok := contender.(interface{ Close() error }); ok {
				errs = append(errs, closer.Close())
			}
		}
	}
	if c.slowProxy != nil {
		errs = append(errs, c.slowProxy.Close())
	}
	if c.proxy != nil {
		errs = append(errs, c.proxy.Collection.Clear())
	}
	errs = append(errs, c.servers.Stop())
	return errors.Join(errs...)
}

// buildContenders makes the contenders named in want that make sense for
// this many nodes: redislock is a single-node lock and runs only on one.
func buildContenders(ctx context.Context, want []string, nodes []redis.UniversalClient) ([]Contender, error) {
	var out []Contender
	for _, name := range want {
		var c Contender
		var err error
		switch name {
		case ContenderRedlock, ContenderRedlockNoFence:
			c, err = newRedlockContender(ctx, name, nodes, name == ContenderRedlock)
		case ContenderRedlockRWRead, ContenderRedlockRWWrite:
			c, err = newRWContender(ctx, name, nodes)
		case ContenderRedlockFair:
			c, err = newFairContender(ctx, nodes)
		case ContenderRedsync, ContenderRedsyncFailFast:
			c = newRedsyncContender(name, nodes, name == ContenderRedsyncFailFast)
		case ContenderRedislock:
			if len(nodes) != 1 {
				continue
			}
			c = newRedislockContender(nodes[0])
		case ContenderRueidislock:
			c, err = newRueidislockContender(nodes)
		case ContenderFloor:
			c = newFloor(nodes)
		case ContenderRedlockSemaphore:
			c, err = newSemaphoreContender(ctx, nodes)
		default:
			err = fmt.Errorf("unknown contender %q", name)
		}
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func closeAll(contenders []Contender) {
	for _, c := range contenders {
		if closer, ok := c.(interface{ Close() error }); ok {
			closer.Close()
		}
	}
}
