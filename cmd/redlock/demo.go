package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/fence"
	"github.com/quorumlabs/redlock/redistest"
)

var demoHelp = cmdHelp{
	name:     "demo",
	synopsis: "",
	about: `Run the lock's main job on a machine with nothing but redis-server installed. The demo starts
5 redis-server masters (the lock's nodes) and one more for a counter (the resource the lock
guards), all on 127.0.0.1 in a temporary directory. Workers, each with its own client, take
the lock in turn and do a read-modify-write increment of the counter, fenced with the lock's
token, while faults hit the nodes on a schedule: a node is killed and comes back empty, one is
paused, one is slowed down, and one lock holder stalls past its TTL before writing, the way a
long GC pause would.

At the end a table shows the acquisitions, acquire latency, and the safety checks: tokens
strictly increase in acquisition order, no two holders overlap, the stale write is rejected,
and the counter equals the number of successful increments. Exits 1 if a check fails.
Everything the demo started is stopped when it ends, Ctrl-C included (exit 130).`,
	examples: `
redlock demo
redlock demo --duration 1m --workers 8
redlock demo --faults=false      # the same workload on healthy nodes`,
}

// demoNodes is the number of lock nodes: 5 tolerates two failures, the schedule uses that.
const demoNodes = 5

type demo struct {
	a        *app
	out      *progress
	duration time.Duration
	ttl      time.Duration
	workers  int

	nodes    *redistest.Cluster // the lock's masters
	resource *redistest.Cluster // the counter's server
	proxy    *latencyProxy      // in front of node 3, to slow it down
	work     *workload
	cond     conditions
	voting   atomic.Int32 // nodes whose vote counts, as the monitor last saw
	metrics  *demoMetrics // the workers' clients' OpenTelemetry metrics
}

func runDemo(ctx context.Context, a *app, args []string) error {
	fs := newFlagSet(a, demoHelp)
	duration := fs.Duration("duration", 20*time.Second, "how long the workers run")
	workers := fs.Int("workers", 4, "number of workers, each with its own client")
	ttl := fs.Duration("ttl", 2*time.Second, "lock `TTL`; also how long a restarted node sits out")
	withFaults := fs.Bool("faults", true, "inject the fault schedule")
	positional, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(positional) != 0:
		return usagef("demo takes no arguments, got %q", positional)
	case *ttl < 500*time.Millisecond || *ttl > time.Minute:
		return usagef("--ttl must be between 500ms and 1m, got %v", *ttl)
	case *duration < 2**ttl || *duration > time.Hour:
		return usagef("--duration must be between twice the TTL (%v) and 1h, got %v", 2**ttl, *duration)
	case *workers < 1 || *workers > 64:
		return usagef("--workers must be between 1 and 64, got %d", *workers)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("redis-server is not on PATH: install it (make deps, or apt-get install redis-server) and run the demo again")
	}

	ctx, interrupts := watchInterrupts(ctx)
	defer interrupts.stop()
	d := &demo{a: a, out: newProgress(a.stdout), duration: *duration, ttl: *ttl, workers: *workers}
	defer d.stopServers()
	v, ran, err := d.run(ctx, *withFaults)
	if err != nil {
		if ctx.Err() != nil {
			return interrupts.err()
		}
		return err
	}
	interrupted := interrupts.signal() != nil
	d.printVerdict(v, ran, *withFaults, interrupted)
	switch {
	case !v.safe() || (v.acquisitions == 0 && !interrupted):
		return &silentExit{exitFailure}
	case interrupted:
		return &silentExit{signalExitCode(interrupts.signal())}
	}
	return nil
}

// run starts the servers, waits for the nodes to vote, runs the workload and judges it.
func (d *demo) run(ctx context.Context, withFaults bool) (verdict, time.Duration, error) {
	var err error
	if d.nodes, err = redistest.Start(demoNodes, redistest.Options{}); err != nil {
		return verdict{}, 0, fmt.Errorf("starting the lock nodes: %w", err)
	}
	if d.resource, err = redistest.Start(1, redistest.Options{}); err != nil {
		return verdict{}, 0, fmt.Errorf("starting the counter's server: %w", err)
	}
	if d.proxy, err = startLatencyProxy(d.nodes.Servers[2].Addr); err != nil {
		return verdict{}, 0, fmt.Errorf("starting the proxy that slows node 3: %w", err)
	}
	urls := d.nodes.URLs()
	urls[2] = "redis://" + d.proxy.Addr()
	d.printServers()

	monitor, err := redlock.NewFromURLs(urls, redlock.Options{TTL: d.ttl})
	if err != nil {
		return verdict{}, 0, err
	}
	defer monitor.Close()
	if err := d.waitForVotes(ctx, monitor); err != nil {
		return verdict{}, 0, err
	}

	if d.metrics, err = newDemoMetrics(); err != nil {
		return verdict{}, 0, err
	}
	clients := make([]*redlock.Client, d.workers)
	for i := range clients {
		if clients[i], err = redlock.NewFromURLs(urls, redlock.Options{TTL: d.ttl, Observer: d.metrics.obs}); err != nil {
			return verdict{}, 0, err
		}
		defer clients[i].Close()
	}
	d.work = &workload{
		lockName: "demo", counterKey: "demo:counter", counter: d.resource.Servers[0].Client(),
		ttl: d.ttl, out: d.out, started: time.Now(),
	}
	d.out.eventf("%s  %d workers start: acquire, fenced increment, release; for %v", d.work.elapsed(), d.workers, d.duration)

	runCtx, stop := context.WithTimeout(ctx, d.duration)
	defer stop()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() { d.work.run(runCtx, i+1, c) })
	}
	if withFaults {
		wg.Go(func() { d.injectFaults(runCtx) })
	}
	wg.Go(func() { d.watch(runCtx, monitor) })
	wg.Wait()
	ran := time.Since(d.work.started)
	d.out.clearStatus()
	if ctx.Err() == nil {
		d.out.eventf("%s  run over", d.work.elapsed())
	} else {
		d.out.eventf("%s  interrupted: stopping", d.work.elapsed())
	}

	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), counterTimeout)
	defer cancel()
	value, _, err := fence.Get(readCtx, d.work.counter, d.work.counterKey)
	if err != nil {
		return verdict{}, ran, fmt.Errorf("reading the final counter: %w", err)
	}
	counter, _ := strconv.ParseInt(value, 10, 64)
	history, gaveUp := d.work.results()
	v := judge(history, counter)
	v.gaveUp = gaveUp
	return v, ran, nil
}

func (d *demo) printServers() {
	fmt.Fprintf(d.a.stdout, "redlock demo: %d redis-server masters for the lock (quorum %d), 1 for the counter it guards\n", demoNodes, demoNodes/2+1)
	for i, s := range d.nodes.Servers {
		via := ""
		if i == 2 {
			via = fmt.Sprintf(", clients go through %s (a proxy that can slow it)", d.proxy.Addr())
		}
		fmt.Fprintf(d.a.stdout, "  node %d     %s  pid %d%s\n", i+1, s.Addr, s.PID(), via)
	}
	s := d.resource.Servers[0]
	fmt.Fprintf(d.a.stdout, "  counter    %s  pid %d\n", s.Addr, s.PID())
}

// waitForVotes waits until every node votes. Fresh nodes sit out for one TTL: the client
// cannot tell a new server from one that restarted and lost the locks it held.
func (d *demo) waitForVotes(ctx context.Context, monitor *redlock.Client) error {
	d.out.eventf("waiting for the fresh nodes to vote: a node that just started sits out for one TTL (%v)", d.ttl)
	giveUp := time.Now().Add(d.ttl + 15*time.Second)
	for {
		voting := d.probeVotes(ctx, monitor)
		if voting == demoNodes {
			d.out.clearStatus()
			return nil
		}
		d.out.status(fmt.Sprintf("%d of %d nodes vote", voting, demoNodes))
		if time.Now().After(giveUp) {
			d.out.clearStatus()
			return fmt.Errorf("only %d of %d nodes vote after %v", voting, demoNodes, d.ttl+15*time.Second)
		}
		sleepCtx(ctx, 200*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// probeVotes asks every node for its state and counts those whose vote counts now.
func (d *demo) probeVotes(ctx context.Context, monitor *redlock.Client) int {
	ctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	voting := 0
	for i, info := range monitor.Nodes(ctx) {
		if info.Err == nil && info.Voting {
			voting++
			d.clearSittingOut(i + 1)
		}
	}
	d.voting.Store(int32(voting))
	return voting
}

// watch keeps the status line (or, off a terminal, periodic lines) up to date.
func (d *demo) watch(ctx context.Context, monitor *redlock.Client) {
	plainEvery := max(2*time.Second, d.duration/10)
	lastPlain := time.Now()
	for ctx.Err() == nil {
		d.probeVotes(ctx, monitor)
		figures := fmt.Sprintf("acquired %d  stale rejected %d  votes %d/%d",
			d.work.acquired.Load(), d.work.rejected.Load(), d.voting.Load(), demoNodes)
		if c := d.describeConditions(); c != "" {
			figures += "  " + c
		}
		if d.out.tty {
			d.out.status(fmt.Sprintf("%5.1fs/%v  %s", time.Since(d.work.started).Seconds(), d.duration, figures))
		} else if time.Since(lastPlain) >= plainEvery {
			d.out.eventf("%s  %s", d.work.elapsed(), figures)
			lastPlain = time.Now()
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// stopServers stops everything the demo started, whatever state the run left it in.
func (d *demo) stopServers() {
	if d.proxy != nil {
		d.proxy.Close()
	}
	var errs []error
	stopped := 0
	for _, c := range []*redistest.Cluster{d.nodes, d.resource} {
		if c == nil {
			continue
		}
		for _, s := range c.Servers {
			if s.Running() {
				stopped++
			}
		}
		errs = append(errs, c.Stop())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(d.a.stderr, "redlock demo: stopping the servers: %v\n", err)
		return
	}
	if stopped > 0 {
		fmt.Fprintf(d.a.stdout, "stopped the %d redis-server processes and removed their directories\n", stopped)
	}
}

// printVerdict prints the final table and, for each failed check, what it means.
func (d *demo) printVerdict(v verdict, ran time.Duration, withFaults, interrupted bool) {
	w := d.a.stdout
	how := "results"
	if interrupted {
		how = "results so far (interrupted)"
	}
	fmt.Fprintf(w, "\n%s after %.1fs: %d workers, %d lock nodes (quorum %d), TTL %v\n\n", how, ran.Seconds(), d.workers, demoNodes, demoNodes/2+1, d.ttl)
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	check := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAIL"
	}
	fmt.Fprintf(tw, "acquisitions\t%d (%d waits gave up)\t\n", v.acquisitions, v.gaveUp)
	fmt.Fprintf(tw, "acquire latency p50 / p99\t%s / %s\t\n", formatDuration(v.latencyP50), formatDuration(v.latencyP99))
	fmt.Fprintf(tw, "token order violations\t%d\t%s\n", v.tokenOrder, check(v.tokenOrder == 0))
	fmt.Fprintf(tw, "overlapping holders\t%d\t%s\n", v.overlaps, check(v.overlaps == 0))
	stale := fmt.Sprintf("%d", v.rejected)
	switch {
	case v.staleAccepted > 0:
		stale += fmt.Sprintf(" (%d stale write(s) ACCEPTED)", v.staleAccepted)
	case v.stalledWrites > 0:
		stale += " (incl. the stalled holder's write)"
	case v.stalls > 0:
		stale += " (the stalled holder saw no newer write and dropped its own)"
	case withFaults:
		stale += " (no holder stalled yet)"
	}
	fmt.Fprintf(tw, "stale writes rejected\t%s\t%s\n", stale, check(v.staleAccepted == 0))
	counter := fmt.Sprintf("%d = %d successful increments", v.counter, v.applied)
	if !v.counterMatches {
		counter = fmt.Sprintf("%d != %d successful increments", v.counter, v.applied)
	}
	if v.ambiguous > 0 {
		counter += fmt.Sprintf(" (+ up to %d uncertain)", v.ambiguous)
	}
	fmt.Fprintf(tw, "final counter\t%s\t%s\n", counter, check(v.counterMatches))
	tw.Flush()
	fmt.Fprintln(w)
	if d.metrics != nil {
		if err := d.metrics.print(w); err != nil {
			fmt.Fprintf(w, "(no metrics: %v)\n", err)
		}
		fmt.Fprintln(w)
	}

	switch {
	case v.safe() && v.acquisitions > 0:
		fmt.Fprintln(w, "PASS: tokens rose in acquisition order, no two holders overlapped, no stale write got through, no increment was lost.")
		return
	case v.acquisitions == 0 && !interrupted:
		fmt.Fprintln(w, "FAIL: no worker acquired the lock.")
	}
	if v.tokenOrder > 0 {
		fmt.Fprintln(w, "FAIL: a holder got a token not above one handed out before it asked: fencing cannot order their writes.")
	}
	if v.overlaps > 0 {
		fmt.Fprintln(w, "FAIL: a worker acquired the lock while another holder's validity had not ended: mutual exclusion broke.")
	}
	if v.staleAccepted > 0 {
		fmt.Fprintln(w, "FAIL: the counter accepted a write from a holder whose lock had been taken over.")
	}
	if !v.counterMatches {
		fmt.Fprintln(w, "FAIL: the counter does not match the successful increments: an update was lost or doubled.")
	}
}
