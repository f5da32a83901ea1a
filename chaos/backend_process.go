package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// ProcessBackend runs each Redis node as a local redis-server process
// (through the library's redistest package), on 127.0.0.1.
type ProcessBackend struct{}

// NewProcessBackend checks that the server build the nodes run is
// installed: the one REDLOCK_TEST_SERVER names (redistest.LookupServer),
// the system's redis-server by default. The system's missing is an
// unavailable backend; a newer build asked for and missing is an error of
// its own, so that a run that asked for it fails instead of skipping.
func NewProcessBackend() (*ProcessBackend, error) {
	if _, err := redistest.LookupServer(""); err != nil {
		if redistest.SelectedServer() == redistest.Redis70 {
			return nil, fmt.Errorf("%w: %v", ErrBackendUnavailable, err)
		}
		return nil, err
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
	if spec.ClusterMasters > 0 {
		return startProcessClusterNodes(spec)
	}
	opts := redistest.Options{Persistence: spec.Persistence, FakeTime: spec.FakeTime}
	if spec.Persistence && spec.AppendFsync != "" {
		opts.Args = []string{"--appendfsync", spec.AppendFsync} // after Persistence's always: it wins
	}
	var clientTLS *tls.Config
	tlsDir := ""
	if spec.TLS {
		var err error
		if tlsDir, err = os.MkdirTemp("", "redlock-chaos-tls-"); err != nil {
			return nil, err
		}
		if opts.TLS, clientTLS, err = clusterTLS(tlsDir); err != nil {
			return nil, errors.Join(err, os.RemoveAll(tlsDir))
		}
	}
	removeTLS := func() error {
		if tlsDir == "" {
			return nil
		}
		return os.RemoveAll(tlsDir)
	}
	nodes, err := redistest.Start(spec.Nodes, opts)
	if err != nil {
		return nil, errors.Join(err, removeTLS())
	}
	res, err := redistest.Start(1, redistest.Options{})
	if err != nil {
		return nil, errors.Join(err, nodes.Stop(), removeTLS())
	}
	c := &Cluster{Backend: "process", HostIP: "127.0.0.1", Resource: processNode{"res", res.Servers[0], false, nil}, TLS: clientTLS}
	for i, s := range nodes.Servers {
		c.Nodes = append(c.Nodes, processNode{fmt.Sprintf("n%d", i), s, spec.Persistence, clientTLS})
	}
	c.stop = func() error { return errors.Join(nodes.Stop(), res.Stop(), removeTLS()) }
	return c, nil
}

type processNode struct {
	name        string
	s           *redistest.Server
	persistence bool
	tls         *tls.Config // the clients' configuration; nil for plain TCP
}

// TLSConfig is the client configuration to reach the node with, nil for
// plain TCP.
func (n processNode) TLSConfig() *tls.Config { return n.tls }

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
