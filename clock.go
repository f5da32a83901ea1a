package redlock

import (
	"slices"
	"sync"
	"time"
)

// Clock tells the time. The default is the system clock, whose readings
// carry Go's monotonic clock, so elapsed times and deadlines are immune to
// wall-clock steps on the client. Tests inject a clock they can move.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// clockResolution covers Redis' 1ms expiry resolution (DESIGN §1).
const clockResolution = 2 * time.Millisecond

// driftAllowance is the clock drift a lock of this TTL must allow for: the
// nodes' clocks may run a little faster than ours and expire the key early.
func driftAllowance(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + clockResolution
}

// validity is how long a lock taken with this TTL is surely still ours,
// given the time elapsed between just before the first request and the
// decision. Zero or less means the lock is worth nothing.
func validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return ttl - elapsed - driftAllowance(ttl, factor)
}

// Node clock supervision (DESIGN §3). Redis expires keys by its wall clock,
// so a node whose clock jumps forward drops our key early and may hand the
// lock to someone else. Every acquire and extend reply carries the node's
// TIME; we compare it with our monotonic clock.

// driftRate is how fast two healthy clocks may drift apart between samples
// (500 ppm, far above what NTP-disciplined or even free-running quartz do),
// so that samples hours apart do not raise false alarms.
const driftRate = 500e-6

// nodeClock remembers the last sample of a node's clock. A sample is the
// interval of offsets (node time minus our clock) consistent with the reply:
// the node read its clock somewhere between our send and our receive.
type nodeClock struct {
	mu       sync.Mutex
	have     bool
	at       time.Time     // our clock at the receive of the last sample
	lo, hi   time.Duration // offset interval of the last sample
	lastSeen time.Duration // best estimate of the offset, for reports
}

// observe records a sample and returns how far the node's clock moved
// against ours beyond what the measurement can explain, if it moved more
// than threshold. base anchors our monotonic readings to a wall time.
func (nc *nodeClock) observe(nodeTime time.Time, sent, recv, base time.Time, threshold time.Duration) (jump time.Duration, jumped bool) {
	// Our clock as wall time, advanced only by the monotonic clock.
	sentWall := base.Add(sent.Sub(base))
	recvWall := base.Add(recv.Sub(base))
	lo := nodeTime.Sub(recvWall)
	hi := nodeTime.Sub(sentWall)

	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.have {
		slack := threshold + time.Duration(float64(recv.Sub(nc.at))*driftRate)
		switch {
		case lo > nc.hi+slack:
			jump, jumped = lo-nc.hi, true
		case hi < nc.lo-slack:
			jump, jumped = hi-nc.lo, true
		}
	}
	nc.have, nc.at, nc.lo, nc.hi = true, recv, lo, hi
	nc.lastSeen = (lo + hi) / 2
	return jump, jumped
}

// apart tells how far other's last sample is from nc's, and whether the two
// clocks are more than threshold apart: their offset intervals, each widened
// by the drift allowed between the samples' times, still do not come within
// threshold of each other (the same test clockPeers makes between nodes).
func (nc *nodeClock) apart(other *nodeClock, threshold time.Duration) (skew time.Duration, off bool) {
	a, haveA := nc.sample()
	b, haveB := other.sample()
	if !haveA || !haveB {
		return 0, false
	}
	gap := b.at.Sub(a.at)
	if gap < 0 {
		gap = -gap
	}
	slack := threshold + time.Duration(float64(gap)*driftRate)
	skew = (b.lo+b.hi)/2 - (a.lo+a.hi)/2
	return skew, b.lo > a.hi+slack || b.hi < a.lo-slack
}

// clockSample is a node's last clock sample: the interval of offsets (node
// time minus our clock) consistent with the reply, taken at our time at.
type clockSample struct {
	at     time.Time
	lo, hi time.Duration
}

// sample is the node's last clock sample, if it has one.
func (nc *nodeClock) sample() (clockSample, bool) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return clockSample{at: nc.at, lo: nc.lo, hi: nc.hi}, nc.have
}

// Comparing a node's clock with the other nodes' (DESIGN §3). A node's
// history with this client cannot show a jump that happened before the
// client first met the node: a process that starts after a node's clock
// jumped takes the jumped clock as normal. The nodes are meant to agree on
// the time (NTP), so a node whose clock disagrees with the others is what a
// jump looks like to a newcomer.

// clockPeers counts the samples that agree with samples[i]: those whose
// offset may be within threshold of it, given how wide each sample is and
// how far two clocks may have drifted since it was taken (the slack is
// always granted in the node's favour of agreeing only when the intervals,
// widened by it, still come within threshold: a wider measurement can hide a
// disagreement as large as its width, never invent one). known counts the
// nodes with a sample at all, i among them.
func clockPeers(samples []clockSample, have []bool, i int, now time.Time, threshold time.Duration) (agree, known int) {
	if !have[i] {
		return 0, 0
	}
	me := samples[i]
	for k, s := range samples {
		if !have[k] {
			continue
		}
		known++
		drift := time.Duration(float64(now.Sub(s.at)+now.Sub(me.at)) * driftRate)
		// The gap between the two intervals; zero if they overlap.
		gap := max(s.lo-me.hi, me.lo-s.hi, 0)
		if gap <= threshold+drift {
			agree++
		}
	}
	return agree, known
}

// clockSkew is how far samples[i]'s offset is from the median of the other
// nodes' offsets (midpoints of their intervals), for reports.
func clockSkew(samples []clockSample, have []bool, i int) (time.Duration, bool) {
	if !have[i] {
		return 0, false
	}
	var others []time.Duration
	for k, s := range samples {
		if k != i && have[k] {
			others = append(others, (s.lo+s.hi)/2)
		}
	}
	if len(others) == 0 {
		return 0, false
	}
	slices.Sort(others)
	median := others[len(others)/2]
	if len(others)%2 == 0 {
		median = (others[len(others)/2-1] + median) / 2
	}
	return (samples[i].lo+samples[i].hi)/2 - median, true
}
