package chaos

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// ProcessBackend runs each Redis node as a local redis-server process
// (through the library's redistest package), on 127.0.0.1.
type ProcessBackend struct{}

// NewProcessBackend checks that redis-server is installed.
func NewProcessBackend() (*ProcessBackend, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("%w: redis-server not found on PATH (run make deps): %v", ErrBackendUnavailable, err)
	}
	return &ProcessBackend{}, nil
}

// Name is "process".
func (*ProcessBackend) Name() string { return "process" }

// Close has nothing to release.
func (*ProcessBackend) Close() error { return nil }

// Start starts the lock nodes (under libfaketime if asked) and a separate
// plain resource server.
func (*ProcessBackend) Start(ctx context.Context, spec ClusterSpec) (*Cluster, error) {
	if spec.Nodes < 1 {
		return nil, fmt.Errorf("chaos: cluster of %d nodes: need at least 1", spec.Nodes)
	}
	nodes, err := redistest.Start(spec.Nodes, redistest.Options{Persistence: spec.Persistence, FakeTime: spec.FakeTime})
	if err != nil {
		return nil, err
	}
	res, err := redistest.Start(1, redistest.Options{})
	if err != nil {
		return nil, errors.Join(err, nodes.Stop())
	}
	c := &Cluster{Backend: "process", HostIP: "127.0.0.1", Resource: processNode{"res", res.Servers[0], false}}
	for i, s := range nodes.Servers {
		c.Nodes = append(c.Nodes, processNode{fmt.Sprintf("n%d", i), s, spec.Persistence})
	}
	c.stop = func() error { return errors.Join(nodes.Stop(), res.Stop()) }
	return c, nil
}

type processNode struct {
	name        string
	s           *redistest.Server
	persistence bool
}

func (n processNode) Name() string     { return n.name }
func (n processNode) Addr() string     { return n.s.Addr }
func (n processNode) PeerAddr() string { return n.s.Addr }

func (n processNode) Kill(context.Context) error { return n.s.Kill() }

// Restart keeps the data dir when the node persists: the AOF is what it
// comes back with. Without persistence there is nothing to keep.
func (n processNode) Restart(context.Context) error { return n.s.Restart(n.persistence) }

func (n processNode) Pause(context.Context) error  { return n.s.Pause() }
func (n processNode) Resume(context.Context) error { return n.s.Resume() }

func (n processNode) SetClockOffset(_ context.Context, d time.Duration) error {
	return n.s.SetClockOffset(d)
}
