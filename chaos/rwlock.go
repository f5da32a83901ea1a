package chaos

import (
	"context"
	"fmt"
	"slices"

	"github.com/quorumlabs/redlock"
)

// RWScheme is the library's read-write lock under the mutex's faults.
// Client 0 always writes, the last client writes and reads in turn, and
// the others read: readers share the lock with each other, and every
// schedule that pins one client's hold and sends another at the lock
// meets a writer on at least one side. The checker allows readers to
// overlap each other and nothing else; writers' tokens must strictly
// increase.
type RWScheme struct{}

// Name is "redlock-rw".
func (RWScheme) Name() string { return "redlock-rw" }

// LockKey is the writer key: the mutex's key of LockName.
func (RWScheme) LockKey() string { return RedlockScheme{}.LockKey() }

// ExtraKeys are the readers and the waiting writers' intents, kept beside
// the writer key: none may stay behind.
func (RWScheme) ExtraKeys() []string {
	k := RedlockScheme{}.LockKey()
	return []string{k + ":readers", k + ":writers"}
}

// NewLocker builds a redlock.Client over the node proxies, as RedlockScheme
// does, and takes the read-write lock LockName on it. The client's number
// is not in SchemeEnv, so the role comes from the order of the calls: the
// run makes client 0's locker first.
func (s RWScheme) NewLocker(env SchemeEnv) (Locker, error) {
	l, err := RedlockScheme{}.NewLocker(env)
	if err != nil {
		return nil, err
	}
	rl := l.(*redlockLocker)
	return &rwLocker{redlockLocker: rl, rw: rl.c.RWLock(LockName)}, nil
}

// assignRWRoles gives the lockers of one run their roles, in the order the run
// makes them (client 0 first): writer, readers, and the last one both.
func assignRWRoles(lockers []Locker) {
	for i, l := range lockers {
		rl, ok := l.(*rwLocker)
		if !ok {
			continue
		}
		switch {
		case i == 0:
			rl.role = roleWriter
		case i == len(lockers)-1:
			rl.role = roleBoth
		default:
			rl.role = roleReader
		}
	}
}

type rwRole int

const (
	roleWriter rwRole = iota
	roleReader
	roleBoth
)

type rwLocker struct {
	*redlockLocker
	rw    *redlock.RWLock
	role  rwRole
	holds int // of this client, which runs one hold at a time
}

// write tells whether the next hold writes.
func (l *rwLocker) write() bool {
	l.holds++
	switch l.role {
	case roleWriter:
		return true
	case roleReader:
		return false
	}
	return l.holds%2 == 1
}

func (l *rwLocker) Acquire(ctx context.Context) (Held, error) {
	if l.write() {
		lk, err := l.rw.Lock(ctx, redlock.WithTTL(l.ttl))
		if err != nil {
			return nil, err
		}
		return lk, nil
	}
	lk, err := l.rw.RLock(ctx, redlock.WithTTL(l.ttl))
	if err != nil {
		return nil, err
	}
	return readHeld{lk}, nil
}

func (l *rwLocker) Do(ctx context.Context, fn func(ctx context.Context, h Held) error) error {
	if l.write() {
		return l.rw.DoWrite(ctx, func(ctx context.Context, lk *redlock.Lock) error { return fn(ctx, lk) }, redlock.WithTTL(l.ttl))
	}
	return l.rw.DoRead(ctx, func(ctx context.Context, lk *redlock.Lock) error { return fn(ctx, readHeld{lk}) }, redlock.WithTTL(l.ttl))
}

// readHeld is a reader's hold: the workload only reads under it.
type readHeld struct{ *redlock.Lock }

func (readHeld) shared() {}

// isShared tells whether h is a reader's hold.
func isShared(h Held) bool {
	_, ok := h.(interface{ shared() })
	return ok
}

// rwScenarioNames are the mutex scenarios the read-write lock runs.
var rwScenarioNames = []string{
	"no-faults", "partition-minority", "partition-flapping", "node-pause", "restart-aof",
	"restart-empty-grace", "restart-empty-no-grace", "clock-jump-guard",
	"failover-majority-not-durable", "failover-majority-durable",
}

// RWScenarios are the mutex's scenarios named in rwScenarioNames, each run
// with RWScheme under the name "rw-<name>", with the same schedule and the
// same expected verdict.
func RWScenarios() []Scenario {
	var out []Scenario
	for _, sc := range Scenarios() {
		if !slices.Contains(rwScenarioNames, sc.Name) {
			continue
		}
		sc.Name = "rw-" + sc.Name
		sc.About = fmt.Sprintf("read-write lock: %s", sc.About)
		sc.Scheme = RWScheme{}
		out = append(out, sc)
	}
	return out
}
