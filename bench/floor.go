package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// floor is the least a Redlock acquire+release can do: per node in parallel
// one SET NX with a TTL and one owner-checked DEL, each phase returning as
// soon as a majority answered. No validity check, no retry, no fencing, no
// node guards. Every real library pays for those; the floor shows the price.
type floor struct {
	nodes  []redis.UniversalClient
	quorum int
	// running counts the per-node goroutines, which outlive Release on
	// straggling nodes, so that Close can wait for them.
	running sync.WaitGroup
}

// floorTTL matches this library's default TTL.
const floorTTL = 10 * time.Second

// floorRelease deletes the key only while it still holds our value.
var floorRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

var errFloorLost = errors.New("floor: no majority")

func newFloor(nodes []redis.UniversalClient) *floor {
	return &floor{nodes: nodes, quorum: len(nodes)/2 + 1}
}

func (f *floor) Name() string { return ContenderFloor }

// floorLock runs one goroutine per node that does the SET NX, reports, waits
// for the release signal, then does the DEL on the same node. Doing both from
// one goroutine is how the floor keeps a DEL from overtaking its own SET NX
// on a slow node without any bookkeeping.
type floorLock struct {
	floor      *floor
	key, value string
	acquired   chan bool
	released   chan bool
	release    chan struct{}
	// releaseCtx is written before release is closed and read only after, so
	// the DELs run under the context the caller gave Release.
	releaseCtx context.Context
}

func (f *floor) TryAcquire(ctx context.Context, name string) (Held, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("floor: owner value: %w", err)
	}
	l := &floorLock{
		floor:    f,
		key:      "floor:" + name,
		value:    hex.EncodeToString(raw[:]),
		acquired: make(chan bool, len(f.nodes)),
		released: make(chan bool, len(f.nodes)),
		release:  make(chan struct{}),
	}
	f.running.Add(len(f.nodes))
	for _, node := range f.nodes {
		go l.run(ctx, node)
	}
	if !f.majority(l.acquired) {
		l.releaseCtx = context.WithoutCancel(ctx)
		close(l.release)
		return nil, errFloorLost
	}
	return l, nil
}

func (l *floorLock) run(ctx context.Context, node redis.UniversalClient) {
	defer l.floor.running.Done()
	ok, err := node.SetNX(ctx, l.key, l.value, floorTTL).Result()
	l.acquired <- ok && err == nil
	<-l.release
	deleted, err := floorRelease.Run(l.releaseCtx, node, []string{l.key}, l.value).Int()
	l.released <- deleted == 1 && err == nil
}

// Close waits until every DEL sent to a straggling node has finished.
func (f *floor) Close() error {
	f.running.Wait()
	return nil
}

func (l *floorLock) Release(ctx context.Context) error {
	l.releaseCtx = ctx
	close(l.release)
	if !l.floor.majority(l.released) {
		return errNotReleased
	}
	return nil
}

// majority reads the nodes' answers until a majority said yes (true) or
// can no longer (false); the other answers stay in the buffered channel.
func (f *floor) majority(answers <-chan bool) bool {
	yes, no := 0, 0
	for yes < f.quorum && no <= len(f.nodes)-f.quorum {
		if <-answers {
			yes++
		} else {
			no++
		}
	}
	return yes >= f.quorum
}
