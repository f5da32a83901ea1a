package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/client"
)

// testcontainers' reaper (Ryuk) cannot run here: its image cannot be pulled.
// Without it, a run stopped by a signal or by go test's timeout left its
// containers running. This file does the reaper's job in-process: every
// container carries labels that say which run and which process made it;
// the containers of a process that is gone are removed at the next start,
// and SIGINT/SIGTERM remove the current process' containers before it dies.

// Container labels. labelCommon is on every container (and the image) the
// chaos suite makes; the others tell whose it is.
const (
	labelCommon   = "org.quorumlabs.redlock"
	labelRun      = "org.quorumlabs.redlock.chaos.run"
	labelPID      = "org.quorumlabs.redlock.chaos.pid"
	labelPIDStart = "org.quorumlabs.redlock.chaos.pid-start" // the process' start time: a reused PID is another process
)

// runID names this process' chaos run in its containers' labels.
var runID = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// containerLabels are the labels of a container this process creates.
func containerLabels() map[string]string {
	return map[string]string{
		labelCommon:   "chaos-node",
		labelRun:      runID,
		labelPID:      strconv.Itoa(os.Getpid()),
		labelPIDStart: processStart(os.Getpid()),
	}
}

// processStart is the start time of process pid in clock ticks since boot
// (field 22 of /proc/pid/stat), "" if it cannot be read. Together with the
// PID it names one process: PIDs are reused, start times are not.
func processStart(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return ""
	}
	return fields[19] // field 22 overall: 3 is fields[0]
}

// creatorGone tells whether the process that labelled a container is gone.
// A container without the labels (made before they existed, or by hand) is
// never taken for an orphan: its owner may still use it.
func creatorGone(labels map[string]string) bool {
	pid, err := strconv.Atoi(labels[labelPID])
	if err != nil || pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	start := processStart(pid)
	if start == "" {
		return true // no /proc entry: gone (or exited between the two checks)
	}
	return labels[labelPIDStart] != "" && start != labels[labelPIDStart]
}

// removeOrphans removes the chaos containers whose creating process is
// gone, and returns how many it removed.
func removeOrphans(ctx context.Context, cli *client.Client) (int, error) {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelCommon+"=chaos-node"),
	})
	if err != nil {
		return 0, fmt.Errorf("chaos: listing leftover containers: %w", err)
	}
	removed := 0
	var errs []error
	for _, c := range list.Items {
		if c.Labels[labelPID] == strconv.Itoa(os.Getpid()) || !creatorGone(c.Labels) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			errs = append(errs, fmt.Errorf("chaos: removing leftover container %s of run %s: %w", c.ID[:12], c.Labels[labelRun], err))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// live tracks the containers this process runs, for the signal handler.
var live = struct {
	sync.Mutex
	cli  *client.Client
	ids  map[string]bool
	once sync.Once
}{ids: make(map[string]bool)}

// track records a running container and, the first time, starts the
// handler that removes the tracked containers on SIGINT or SIGTERM.
func track(cli *client.Client, id string) {
	live.Lock()
	live.cli = cli
	live.ids[id] = true
	live.Unlock()
	live.once.Do(func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-sigs
			removeTracked()
			// Die of the signal as if nobody had caught it: every handler of
			// it is reset (including a NotifyContext's), then it is sent again.
			signal.Reset(sig)
			_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		}()
	})
}

// untrack forgets a container that was removed.
func untrack(id string) {
	live.Lock()
	delete(live.ids, id)
	live.Unlock()
}

// removeTracked force-removes every container this process still runs.
func removeTracked() {
	live.Lock()
	defer live.Unlock()
	if live.cli == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for id := range live.ids {
		wg.Go(func() {
			_, _ = live.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		})
	}
	wg.Wait()
	clear(live.ids)
}
