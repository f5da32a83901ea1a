package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Net is the network between the lock clients and the Redis nodes: one
// toxiproxy proxy per node, run in this process. Clients reach a node only
// through its proxy, so a fault on the proxy is a fault on the node's
// network. Stopping a proxy drops every connection through it and refuses
// new ones: a partition.
type Net struct {
	server *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies []*toxiproxy.Proxy
	down    []bool
}

// NewNet starts one proxy on 127.0.0.1 (a free port) for each upstream
// address, in order.
func NewNet(upstreams []string) (*Net, error) {
	// Toxics log through zerolog's global logger whatever logger the
	// server is given; their trace lines would drown the scenario log.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	n := &Net{server: server}
	for i, up := range upstreams {
		p := toxiproxy.NewProxy(server, fmt.Sprintf("n%d", i), "127.0.0.1:0", up)
		if err := server.Collection.Add(p, true); err != nil {
			n.Close()
			return nil, fmt.Errorf("chaos: proxy for node %d (%s): %w", i, up, err)
		}
		n.proxies = append(n.proxies, p)
		n.down = append(n.down, false)
	}
	return n, nil
}

// Addrs returns the address of each proxy, in order: the nodes first (the
// only addresses the lock clients are given), then any links.
func (n *Net) Addrs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, len(n.proxies))
	for i, p := range n.proxies {
		out[i] = p.Listen // resolved to the bound port once started
	}
	return out
}

// AddLink adds a proxy that listens on host (any free port) and forwards
// to upstream, for traffic between nodes such as a replication link. It
// returns the proxy's index, usable with Partition and Reconnect, and its
// address.
func (n *Net) AddLink(host, upstream string) (int, string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := len(n.proxies)
	p := toxiproxy.NewProxy(n.server, fmt.Sprintf("link%d", i), net.JoinHostPort(host, "0"), upstream)
	if err := n.server.Collection.Add(p, true); err != nil {
		return 0, "", fmt.Errorf("chaos: link %s -> %s: %w", host, upstream, err)
	}
	n.proxies = append(n.proxies, p)
	n.down = append(n.down, false)
	return i, p.Listen, nil
}

// withProxy runs fn on node's proxy, under the net's lock.
func (n *Net) withProxy(node int, fn func(p *toxiproxy.Proxy) error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if node < 0 || node >= len(n.proxies) {
		return fmt.Errorf("chaos: no node %d (the net has %d)", node, len(n.proxies))
	}
	return fn(n.proxies[node])
}

// Partition cuts a node off: its proxy stops, dropping every connection.
func (n *Net) Partition(node int) error {
	return n.withProxy(node, func(p *toxiproxy.Proxy) error {
		p.Stop()
		n.down[node] = true
		return nil
	})
}

// Reconnect undoes Partition: the proxy listens again on the same address.
func (n *Net) Reconnect(node int) error {
	return n.withProxy(node, func(p *toxiproxy.Proxy) error {
		if !n.down[node] {
			return nil
		}
		if err := p.Start(); err != nil {
			return fmt.Errorf("chaos: reconnect node %d on %s: %w", node, p.Listen, err)
		}
		n.down[node] = false
		return nil
	})
}

// Retarget points a node's proxy at another upstream (a promoted replica).
// Open connections are dropped, as a failover drops them.
func (n *Net) Retarget(node int, upstream string) error {
	return n.withProxy(node, func(p *toxiproxy.Proxy) error {
		// Proxy.Update restarts the listener only when the address
		// changes; a retarget must also drop the connections to the old
		// upstream.
		p.Stop()
		p.Upstream = upstream
		if err := p.Start(); err != nil {
			return fmt.Errorf("chaos: retarget node %d to %s: %w", node, upstream, err)
		}
		n.down[node] = false
		return nil
	})
}

// AddToxic adds a toxiproxy toxic to a node's proxy. kind is a toxiproxy
// toxic type ("latency", "timeout", ...), stream "upstream" or
// "downstream", attrs its attributes.
func (n *Net) AddToxic(node int, name, kind, stream string, attrs map[string]int64) error {
	body, err := json.Marshal(map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		return err
	}
	return n.withProxy(node, func(p *toxiproxy.Proxy) error {
		if _, err := p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("chaos: toxic %s on node %d: %w", name, node, err)
		}
		return nil
	})
}

// RemoveToxic removes a toxic added by AddToxic.
func (n *Net) RemoveToxic(ctx context.Context, node int, name string) error {
	return n.withProxy(node, func(p *toxiproxy.Proxy) error {
		if err := p.Toxics.RemoveToxic(ctx, name); err != nil {
			return fmt.Errorf("chaos: remove toxic %s from node %d: %w", name, node, err)
		}
		return nil
	})
}

// Close stops every proxy.
func (n *Net) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.proxies {
		p.Toxics.ResetToxics(context.Background())
		p.Stop()
	}
}
