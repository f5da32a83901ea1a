package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// reaperHelperEnv makes the test binary act as a chaos run that starts a
// docker cluster, says so, and waits to be killed.
const reaperHelperEnv = "REDLOCK_CHAOS_REAPER_HELPER"

// TestDockerRunHelper is the killed run of TestKilledDockerRunLeavesNoContainer,
// not a test of its own: it does nothing unless the parent test started it.
func TestDockerRunHelper(t *testing.T) {
	if os.Getenv(reaperHelperEnv) != "1" {
		t.Skip("only run as the subprocess of TestKilledDockerRunLeavesNoContainer")
	}
	ctx := context.Background()
	b, err := NewDockerBackend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(ctx, ClusterSpec{Nodes: 2}); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("started run %s\n", runID)
	select {} // until a signal ends the process
}

// dockerOrSkip returns an engine client, failing the test if docker was asked
// for (REDLOCK_CHAOS_BACKEND=docker or both) and does not answer, skipping it
// loudly otherwise.
func dockerOrSkip(t *testing.T) *client.Client {
	t.Helper()
	names, err := BackendsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, "docker") {
		t.Skipf("SKIPPED: no Docker engine answers (or %s=%q leaves it out): the container clean-up on SIGTERM is NOT tested; set %s=docker to make a missing engine a failure",
			BackendEnv, os.Getenv(BackendEnv), BackendEnv)
	}
	disableRyuk()
	cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
	if err != nil {
		t.Fatalf("docker asked for but not usable: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli.Client
}

// runContainers lists the containers labelled with run id.
func runContainers(t *testing.T, cli *client.Client, id string) []string {
	t.Helper()
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelRun+"="+id),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, c.ID[:12]+" "+string(c.State))
	}
	return names
}

// startKilledRun starts the helper run and returns it with its run id once
// its containers are up.
func startKilledRun(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDockerRunHelper$", "-test.v")
	cmd.Env = append(os.Environ(), reaperHelperEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "started run "); ok {
			go func() { // keep draining: a full pipe must not block the helper
				for sc.Scan() {
				}
			}()
			return cmd, id
		}
	}
	t.Fatalf("the helper run ended before starting its containers (%v)", cmd.Wait())
	return nil, ""
}

// A run stopped by SIGTERM removes its containers before it dies; one killed
// outright (SIGKILL, or go test's timeout) leaves them for the next run's
// start to remove, since their creating process is gone.
func TestKilledDockerRunLeavesNoContainer(t *testing.T) {
	cli := dockerOrSkip(t)

	t.Run("SIGTERM", func(t *testing.T) {
		cmd, id := startKilledRun(t)
		if n := runContainers(t, cli, id); len(n) != 3 {
			t.Fatalf("want the run's 3 containers (2 nodes and the resource) before the signal, got %q", n)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if n := runContainers(t, cli, id); len(n) != 0 {
			t.Fatalf("containers of run %s left after SIGTERM: %q", id, n)
		}
	})

	t.Run("SIGKILL, then the next start", func(t *testing.T) {
		cmd, id := startKilledRun(t)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if n := runContainers(t, cli, id); len(n) != 3 {
			t.Fatalf("a SIGKILL cannot be caught: want the 3 containers left, got %q", n)
		}
		b, err := NewDockerBackend(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if n := runContainers(t, cli, id); len(n) != 0 {
			t.Fatalf("the next start left the dead run's containers: %q", n)
		}
	})
}
