package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// fault is one step of the demo's fault schedule: at a share of the run, do something to a
// node (or to the workers) and say what.
type fault struct {
	at    float64 // share of the run, 0..1
	what  string
	apply func() error
}

// slowNodeDelay is the extra one-way delay of the slowed node: well under the per-node
// timeout (200ms at the demo's TTL), so the node still votes, just late.
const slowNodeDelay = 60 * time.Millisecond

// schedule lists the faults, in order. Node numbers in messages count from 1.
func (d *demo) schedule() []fault {
	n1, n2 := d.nodes.Servers[0], d.nodes.Servers[1]
	return []fault{
		{0.10, "kill node 1 (SIGKILL): 4 of 5 nodes answer, quorum is 3", func() error {
			d.setCondition(1, "down")
			return n1.Kill()
		}},
		{0.20, "the next lock holder will stall past its TTL between reading and writing the counter", func() error {
			d.work.stallNext.Store(true)
			return nil
		}},
		{0.30, "restart node 1 with its data wiped: it sits out for one TTL (restart grace)", func() error {
			err := n1.Restart(false)
			d.setCondition(1, "sits out")
			return err
		}},
		{0.40, "pause node 2 (SIGSTOP): calls to it time out", func() error {
			d.setCondition(2, "paused")
			return n2.Pause()
		}},
		{0.55, "resume node 2 (SIGCONT)", func() error {
			d.setCondition(2, "")
			return n2.Resume()
		}},
		{0.60, fmt.Sprintf("slow node 3: +%v each way, it answers late", slowNodeDelay), func() error {
			d.setCondition(3, "slow")
			d.proxy.SetDelay(slowNodeDelay)
			return nil
		}},
		{0.80, "node 3 back to full speed", func() error {
			d.setCondition(3, "")
			d.proxy.SetDelay(0)
			return nil
		}},
	}
}

// injectFaults applies the schedule over the run, until ctx is done.
func (d *demo) injectFaults(ctx context.Context) {
	for _, f := range d.schedule() {
		at := d.work.started.Add(time.Duration(f.at * float64(d.duration)))
		sleepCtx(ctx, time.Until(at))
		if ctx.Err() != nil {
			return
		}
		d.out.eventf("%s  fault: %s", d.work.elapsed(), f.what)
		if err := f.apply(); err != nil {
			d.out.eventf("%s  fault failed: %v", d.work.elapsed(), err)
		}
	}
}

// conditions tracks what is wrong with each node right now, for the status line.
type conditions struct {
	mu     sync.Mutex
	byNode map[int]string
}

func (d *demo) setCondition(node int, what string) {
	d.cond.mu.Lock()
	defer d.cond.mu.Unlock()
	if d.cond.byNode == nil {
		d.cond.byNode = make(map[int]string)
	}
	if what == "" {
		delete(d.cond.byNode, node)
	} else {
		d.cond.byNode[node] = what
	}
}

// clearSittingOut forgets a restarted node's condition once it votes again.
func (d *demo) clearSittingOut(node int) {
	d.cond.mu.Lock()
	defer d.cond.mu.Unlock()
	if d.cond.byNode[node] == "sits out" {
		delete(d.cond.byNode, node)
	}
}

func (d *demo) describeConditions() string {
	d.cond.mu.Lock()
	defer d.cond.mu.Unlock()
	var parts []string
	for node, what := range d.cond.byNode {
		parts = append(parts, fmt.Sprintf("node %d %s", node, what))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
