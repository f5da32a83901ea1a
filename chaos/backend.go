package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one Redis server of a cluster, whatever runs it.
type Node interface {
	// Name is "n0", "n1", ... ("res" for the resource server).
	Name() string
	// Addr is host:port this process reaches the server on directly,
	// bypassing the fault proxies.
	Addr() string
	// PeerAddr is host:port another node of the same backend reaches it
	// on (for REPLICAOF).
	PeerAddr() string
	// Kill stops the server at once (SIGKILL); nothing is flushed.
	Kill(ctx context.Context) error
	// Restart starts a killed server again on the same address and waits
	// until it answers. It keeps its data only if the cluster was started
	// with Persistence (AOF, fsync always).
	Restart(ctx context.Context) error
	// Pause freezes the server (SIGSTOP, docker pause); Resume thaws it.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// SetClockOffset moves the server's wall clock to real time + d.
	// Only for clusters started with FakeTime.
	SetClockOffset(ctx context.Context, d time.Duration) error
}

// ClusterSpec says what to start.
type ClusterSpec struct {
	Nodes       int  // lock nodes (independent masters)
	Persistence bool // appendonly yes, appendfsync always
	// AppendFsync, with Persistence, is the lock nodes' appendfsync
	// instead of always ("everysec").
	AppendFsync string
	FakeTime    bool // run the lock nodes under libfaketime so clock faults can move their clocks
	TLS         bool // the lock nodes serve TLS only and require client certificates (the resource stays plain)
	// ClusterMasters > 0 makes each lock node a Redis Cluster of that many
	// masters (no persistence), in Cluster.ClusterNodes.
	ClusterMasters int
	// ClusterReplicas is how many replicas each master of a Cluster lock
	// node has (0: none).
	ClusterReplicas int
}

// Cluster is N lock nodes plus one resource server (the fenced resource
// and the unfenced register live there, never behind a fault).
type Cluster struct {
	Backend  string
	Nodes    []Node
	Resource Node
	// HostIP is the address on which the nodes reach listeners of this
	// process (a proxy on a replication link): 127.0.0.1 for processes,
	// the Docker bridge gateway for containers.
	HostIP string
	// TLS is the client configuration for the lock nodes when they serve
	// TLS (ClusterSpec.TLS), nil otherwise.
	TLS *tls.Config
	// ClusterNodes are the lock nodes when each is a Redis Cluster
	// (ClusterSpec.ClusterMasters); Nodes is empty then.
	ClusterNodes []ClusterNode
	stop         func() error
}

// Stop stops every server the cluster started and removes its files.
func (c *Cluster) Stop() error {
	if c == nil || c.stop == nil {
		return nil
	}
	stop := c.stop
	c.stop = nil
	return stop()
}

// Backend starts clusters.
type Backend interface {
	Name() string
	Start(ctx context.Context, spec ClusterSpec) (*Cluster, error)
	// Close releases what the backend holds (clients, temp files). It
	// never removes the docker image: that is built once and kept.
	Close() error
}

// BackendEnv is the environment variable that picks the backend.
const BackendEnv = "REDLOCK_CHAOS_BACKEND"

// ErrBackendUnavailable is returned when the asked-for backend cannot run
// here (no Docker engine answering, no redis-server binary).
var ErrBackendUnavailable = errors.New("chaos: backend unavailable")

// OpenBackend opens the backend named by choice: "docker", "process" or
// "auto" ("" means auto: docker when an engine answers, else processes).
// Asking for docker when no engine answers is an error, never a silent
// fallback.
func OpenBackend(ctx context.Context, choice string) (Backend, error) {
	switch strings.ToLower(strings.TrimSpace(choice)) {
	case "docker":
		return NewDockerBackend(ctx)
	case "process":
		return NewProcessBackend()
	case "", "auto":
		b, err := NewDockerBackend(ctx)
		if err == nil {
			return b, nil
		}
		return NewProcessBackend()
	default:
		return nil, fmt.Errorf("chaos: %s=%q: want docker, process, both or auto", BackendEnv, choice)
	}
}

// BackendsFromEnv lists the backends the short suite runs, from
// REDLOCK_CHAOS_BACKEND: "docker" or "process" alone, "both" (Docker must
// answer), "auto" (the default) both when Docker answers, else processes
// alone.
func BackendsFromEnv() ([]string, error) {
	choice := strings.ToLower(strings.TrimSpace(os.Getenv(BackendEnv)))
	switch choice {
	case "docker", "process":
		return []string{choice}, nil
	case "both":
		return []string{"process", "docker"}, nil
	case "", "auto":
		if DockerAvailable(context.Background()) {
			return []string{"process", "docker"}, nil
		}
		return []string{"process"}, nil
	default:
		return nil, fmt.Errorf("chaos: %s=%q: want docker, process, both or auto", BackendEnv, choice)
	}
}

// waitPing polls a server until it answers PING or the deadline passes.
func waitPing(ctx context.Context, addr string, tlsConfig *tls.Config, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: tlsConfig, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	defer c.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = c.Ping(ctx).Err(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s did not answer PING within %s: %w", addr, within, last)
		case <-tick.C:
		}
	}
}

// redisArgs are the server arguments every backend uses.
func redisArgs(persistence bool, fsync string) []string {
	args := []string{"--save", ""}
	if persistence {
		args = append(args, "--appendonly", "yes", "--appendfsync", cmpOr(fsync, "always"))
	} else {
		args = append(args, "--appendonly", "no")
	}
	return args
}

// fakeTimeFileContent is what libfaketime reads from its timestamp file to
// put the clock at real time + d ("+1.500000").
func fakeTimeFileContent(d time.Duration) string {
	return fmt.Sprintf("%+f\n", d.Seconds())
}

// directClient talks to a node without going through its proxy, for setup
// and for the nemesis.
func directClient(n Node) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.Addr(), TLSConfig: nodeTLS(n), MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

// SilenceRedisLog stops go-redis from printing every failed dial: under
// injected faults that is thousands of lines that say nothing the history
// does not. It sets go-redis' process-wide logger.
func SilenceRedisLog() { redis.SetLogger(quietRedisLogger{}) }

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}
