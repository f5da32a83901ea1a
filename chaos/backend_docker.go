package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/quorumlabs/redlock/redistest"
)

// ryukEnv turns off testcontainers' reaper container: its image cannot be
// pulled here. It must be set before the first testcontainers call, which
// reads the configuration once.
const ryukEnv = "TESTCONTAINERS_RYUK_DISABLED"

var ryukOnce sync.Once

func disableRyuk() {
	ryukOnce.Do(func() {
		if os.Getenv(ryukEnv) != "true" {
			os.Setenv(ryukEnv, "true")
		}
	})
}

// DockerAvailable reports whether a Docker engine answers, within two
// seconds.
func DockerAvailable(ctx context.Context) bool {
	disableRyuk()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return false
	}
	defer cli.Close()
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err == nil
}

// DockerBackend runs each Redis node as a testcontainers-go container of
// the locally built FROM-scratch image (see docker_image.go). Containers
// publish 6379 on a fixed 127.0.0.1 port picked at creation, so a node
// killed and started again keeps its address.
type DockerBackend struct {
	cli   *testcontainers.DockerClient
	image string
	// preload is the LD_PRELOAD that runs a node under libfaketime; empty
	// when the image has no libfaketime.
	preload string
	build   redistest.ServerBuild
}

// NewDockerBackend connects to the Docker engine and makes sure the node
// image exists (building it the first time). No engine answering is an
// error matching ErrBackendUnavailable.
func NewDockerBackend(ctx context.Context) (*DockerBackend, error) {
	disableRyuk()
	tclog.SetDefault(tclog.NewNoopLogger()) // its per-container chatter drowns the scenario log
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(pingCtx)
	if err != nil {
		return nil, fmt.Errorf("%w: docker: %v", ErrBackendUnavailable, err)
	}
	if _, err := cli.Ping(pingCtx, client.PingOptions{}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: docker engine does not answer: %v", ErrBackendUnavailable, err)
	}
	// Containers of earlier runs whose process is gone (killed, timed out)
	// would hold ports and memory forever: nothing else removes them.
	if _, err := removeOrphans(pingCtx, cli.Client); err != nil {
		cli.Close()
		return nil, err
	}
	build, err := redistest.LookupServer("")
	if err != nil {
		cli.Close()
		if redistest.SelectedServer() == redistest.Redis70 {
			return nil, fmt.Errorf("%w: %v", ErrBackendUnavailable, err)
		}
		return nil, err // a newer build asked for and missing: a failure, not a skip
	}
	image, preload, err := ensureImage(ctx, cli, build)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &DockerBackend{cli: cli, image: image, preload: preload, build: build}, nil
}

// Name is "docker".
func (b *DockerBackend) Name() string { return "docker" }

// Image is the name of the node image in use.
func (b *DockerBackend) Image() string { return b.image }

// Close closes the engine client; the image stays.
func (b *DockerBackend) Close() error { return b.cli.Close() }

// Start runs spec.Nodes lock nodes and one resource node, in parallel.
func (b *DockerBackend) Start(ctx context.Context, spec ClusterSpec) (*Cluster, error) {
	if spec.Nodes < 1 {
		return nil, fmt.Errorf("chaos: cluster of %d nodes: need at least 1", spec.Nodes)
	}
	if spec.FakeTime && b.preload == "" {
		return nil, fmt.Errorf("%w: clock faults need libfaketime in the image; install the faketime package (make deps) and rebuild", ErrBackendUnavailable)
	}
	if spec.ClusterMasters > 0 {
		return b.startClusterNodes(ctx, spec)
	}
	tmp, err := os.MkdirTemp("", "redlock-chaos-docker-")
	if err != nil {
		return nil, err
	}
	var nodeFiles *redistest.TLS
	var clientTLS *tls.Config
	if spec.TLS {
		dir := filepath.Join(tmp, "tls")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, errors.Join(err, os.RemoveAll(tmp))
		}
		if nodeFiles, clientTLS, err = clusterTLS(dir); err != nil {
			return nil, errors.Join(err, os.RemoveAll(tmp))
		}
	}
	nodes := make([]*dockerNode, spec.Nodes+1)
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i := range nodes {
		name := fmt.Sprintf("n%d", i)
		fake := spec.FakeTime
		persist, fsync := spec.Persistence, spec.AppendFsync
		files, reach := nodeFiles, clientTLS
		if i == spec.Nodes {
			name, fake, persist, files, reach = "res", false, false, nil, nil
		}
		wg.Go(func() {
			nodes[i], errs[i] = b.startNode(ctx, name, filepath.Join(tmp, name), persist, fsync, fake, files, reach)
		})
	}
	wg.Wait()
	c := &Cluster{Backend: b.Name(), TLS: clientTLS}
	c.stop = func() error {
		var errs []error
		for _, n := range nodes {
			if n != nil {
				errs = append(errs, n.terminate())
			}
		}
		errs = append(errs, os.RemoveAll(tmp))
		return errors.Join(errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	for _, n := range nodes[:spec.Nodes] {
		c.Nodes = append(c.Nodes, n)
	}
	c.Resource = nodes[spec.Nodes]
	gw, err := nodes[0].gateway(ctx)
	if err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	c.HostIP = gw
	return c, nil
}

// portAttempts is how many fresh host ports startNode tries for one node:
// another process may take the port FreePort found before Docker binds it.
const portAttempts = 5

// portTaken tells whether a container failed to start only because its host
// port was taken meanwhile. Docker says so in two ways: its own allocator
// ("port is already allocated") or, when another program holds the port,
// the userland proxy's bind error ("address already in use").
func portTaken(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "port is already allocated") || strings.Contains(msg, "address already in use")
}

// startNode starts one container; with files it serves TLS only, and the
// backend reaches it with clientTLS.
func (b *DockerBackend) startNode(ctx context.Context, name, dir string, persistence bool, fsync string, fake bool, files *redistest.TLS, clientTLS *tls.Config) (*dockerNode, error) {
	for attempt := 1; ; attempt++ {
		n, err := b.startNodeOnFreePort(ctx, name, dir, persistence, fsync, fake, files, clientTLS)
		if err == nil || attempt == portAttempts || !portTaken(err) {
			return n, err
		}
		if n != nil {
			if err := n.terminate(); err != nil {
				return nil, err
			}
		}
	}
}

func (b *DockerBackend) startNodeOnFreePort(ctx context.Context, name, dir string, persistence bool, fsync string, fake bool, files *redistest.TLS, clientTLS *tls.Config) (*dockerNode, error) {
	port, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	n := &dockerNode{backend: b, name: name, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), tls: clientTLS}
	args := append([]string{"--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"}, redisArgs(persistence, fsync)...)
	env := map[string]string{}
	binds := []string(nil)
	if files != nil {
		// The files' directory is mounted read-only at /tls; the node
		// serves TLS on 6379 and nothing else.
		inImage := func(path string) string { return "/tls/" + filepath.Base(path) }
		binds = append(binds, filepath.Dir(files.CAFile)+":/tls:ro")
		args[1] = "0"
		args = append(args, "--tls-port", "6379", "--tls-cert-file", inImage(files.Server.Cert), "--tls-key-file", inImage(files.Server.Key),
			"--tls-ca-cert-file", inImage(files.CAFile), "--tls-auth-clients", "yes")
	}
	if fake {
		bind, err := n.fakeClock(dir, env)
		if err != nil {
			return nil, err
		}
		binds = append(binds, bind)
	}
	hostPort := network.MustParsePort("6379/tcp")
	n.ctr, err = b.runServer(ctx, name, args, env, binds, func(hc *container.HostConfig) {
		hc.PortBindings = network.PortMap{hostPort: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}}}
	}, testcontainers.WithExposedPorts("6379/tcp"))
	if err != nil {
		return n, err
	}
	if err := waitPing(ctx, n.addr, n.tls, 20*time.Second); err != nil {
		return n, err
	}
	return n, nil
}

// runServer runs a container of the backend's image: a Redis server called
// name, started with args and env, with binds mounted, host setting how it
// meets the network, and more options if given. The container is tracked
// for the reaper as soon as it exists, even when the start fails: what
// came up is returned, for the caller to stop.
func (b *DockerBackend) runServer(ctx context.Context, name string, args []string, env map[string]string, binds []string,
	host func(*container.HostConfig), more ...testcontainers.ContainerCustomizer) (*testcontainers.DockerContainer, error) {
	opts := append([]testcontainers.ContainerCustomizer{
		testcontainers.WithCmd(args...),
		testcontainers.WithEnv(env),
		testcontainers.WithLabels(containerLabels()),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			host(hc)
			hc.Binds = append(hc.Binds, binds...)
		}),
	}, more...)
	ctr, err := testcontainers.Run(ctx, b.image, opts...)
	if ctr != nil {
		track(b.cli.Client, ctr.GetContainerID())
	}
	if err != nil {
		return ctr, fmt.Errorf("chaos: start container %s: %w", name, err)
	}
	return ctr, nil
}

type dockerNode struct {
	backend  *DockerBackend
	name     string
	addr     string
	tls      *tls.Config // the clients' configuration; nil for plain TCP
	clockDir string
	ctr      *testcontainers.DockerContainer
}

func (n *dockerNode) Name() string { return n.name }

// TLSConfig is the client configuration to reach the node with, nil for
// plain TCP.
func (n *dockerNode) TLSConfig() *tls.Config { return n.tls }
func (n *dockerNode) Addr() string           { return n.addr }

// PeerAddr is the container's address on the Docker bridge, asked afresh
// because a restarted container may get another one.
func (n *dockerNode) PeerAddr() string {
	ip, err := n.ctr.ContainerIP(context.Background())
	if err != nil || ip == "" {
		return ""
	}
	return net.JoinHostPort(ip, "6379")
}

// gateway is the container's bridge gateway: the host as the container
// sees it.
func (n *dockerNode) gateway(ctx context.Context) (string, error) {
	inspect, err := n.ctr.Inspect(ctx)
	if err != nil {
		return "", fmt.Errorf("chaos: inspect %s: %w", n.name, err)
	}
	for _, nw := range inspect.NetworkSettings.Networks {
		if nw.Gateway.IsValid() {
			return nw.Gateway.String(), nil
		}
	}
	return "", fmt.Errorf("chaos: container %s has no network gateway", n.name)
}

func (n *dockerNode) Kill(ctx context.Context) error {
	if _, err := n.backend.cli.ContainerKill(ctx, n.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("chaos: kill %s: %w", n.name, err)
	}
	wait := n.backend.cli.ContainerWait(ctx, n.ctr.GetContainerID(), client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-wait.Result:
		return nil
	case err := <-wait.Error:
		return fmt.Errorf("chaos: wait for %s to stop: %w", n.name, err)
	}
}

func (n *dockerNode) Restart(ctx context.Context) error {
	if _, err := n.backend.cli.ContainerStart(ctx, n.ctr.GetContainerID(), client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("chaos: start %s again: %w", n.name, err)
	}
	return waitPing(ctx, n.addr, n.tls, 20*time.Second)
}

func (n *dockerNode) Pause(ctx context.Context) error {
	_, err := n.backend.cli.ContainerPause(ctx, n.ctr.GetContainerID(), client.ContainerPauseOptions{})
	if err != nil {
		return fmt.Errorf("chaos: pause %s: %w", n.name, err)
	}
	return nil
}

func (n *dockerNode) Resume(ctx context.Context) error {
	_, err := n.backend.cli.ContainerUnpause(ctx, n.ctr.GetContainerID(), client.ContainerUnpauseOptions{})
	if err != nil {
		return fmt.Errorf("chaos: unpause %s: %w", n.name, err)
	}
	return nil
}

// fakeClock sets the node up to run under libfaketime reading its clock
// from dir: it writes the clock at real time, adds the environment to env
// and returns the bind of dir into the container.
func (n *dockerNode) fakeClock(dir string, env map[string]string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	n.clockDir = dir
	if err := n.writeClock(0); err != nil {
		return "", err
	}
	env["LD_PRELOAD"] = n.backend.preload
	env["FAKETIME_TIMESTAMP_FILE"] = "/faketime/clock"
	env["FAKETIME_NO_CACHE"] = "1"
	// Only the wall clock moves, as on a real machine; a monotonic
	// clock moved by a fault would stall Redis' own timers.
	env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
	return dir + ":/faketime", nil
}

func (n *dockerNode) SetClockOffset(_ context.Context, d time.Duration) error {
	if n.clockDir == "" {
		return fmt.Errorf("chaos: node %s runs without libfaketime; start the cluster with FakeTime", n.name)
	}
	return n.writeClock(d)
}

// writeClock replaces the timestamp file in one rename, so libfaketime
// (which rereads it at every clock call) never sees half a file. The
// directory, not the file, is bind-mounted: a mounted file would keep its
// old inode across the rename.
func (n *dockerNode) writeClock(d time.Duration) error {
	tmp := filepath.Join(n.clockDir, ".clock.tmp")
	if err := os.WriteFile(tmp, []byte(fakeTimeFileContent(d)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(n.clockDir, "clock"))
}

func (n *dockerNode) terminate() error {
	if n.ctr == nil {
		return nil
	}
	// A paused container cannot be stopped; thaw it first (an error just
	// means it was not paused).
	_, _ = n.backend.cli.ContainerUnpause(context.Background(), n.ctr.GetContainerID(), client.ContainerUnpauseOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.ctr.Terminate(ctx, testcontainers.StopTimeout(0)); err != nil {
		return err
	}
	untrack(n.ctr.GetContainerID())
	return nil
}
