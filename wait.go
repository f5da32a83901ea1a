package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ownerValueLen is the length of rand.Text: 26 base32 characters, 130 bits.
const ownerValueLen = 26

// ownerValue makes the random value that marks our keys, new for every
// attempt (DESIGN §1): a retry never reuses the value being cleaned up. It
// is what rand.Text makes (26 base32 characters of crypto/rand, 130 bits),
// written into the caller's buffer so that the attempt allocates it with
// its keys.
func ownerValue(v *[ownerValueLen]byte) {
	rand.Read(v[:])
	for i, x := range v {
		v[i] = base32Alphabet[x%32]
	}
}

const base32Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" // RFC 4648, as rand.Text

// releasedSuffix ends a lock's release channel: "<prefix>{<name>}:released".
const releasedSuffix = ":released"

// wakeAllMark starts a release message that wakes every waiter of the lock
// rather than one (wakeEvery): the release of a kind whose waiters may
// all hold the lock together. Owner values are base32, so it cannot start
// one.
const wakeAllMark = "*"

// subscriptionLinger is how long a client stays subscribed to a lock's
// channel after the last of its Acquire calls stopped waiting for that lock.
// A hot lock is waited for again and again: without the linger every wait
// would cost an UNSUBSCRIBE, a SUBSCRIBE and a confirmation round trip on
// every node, and the confirmation delays the wait's next attempt. One
// second is far longer than the gap between two waits of a hot lock and
// than a hand-off, and it bounds what a lingering subscription costs: the
// releases of that one lock during one second. It is not tied to
// RetryDelayMax, which paces the attempts inside one wait, not how often
// waits start.
const subscriptionLinger = time.Second

// classicWakeups makes Cluster nodes announce releases with PUBLISH and
// listen with SUBSCRIBE even where SPUBLISH exists, as before sharded
// wake-ups: the "before" of the measurement that compares them
// (wakeup_cpu_internal_test.go). Read by the probes.
var classicWakeups atomic.Bool

// waiters wakes blocked Acquire calls when a lock they wait for is released.
//
// A release is announced, from inside the release script, on a channel of
// its own lock in the lock's hash slot (releaseChannel). The client listens
// to a lock's channel only while one of its Acquire calls waits for that
// lock, and subscriptionLinger longer, so a release nobody waits for
// reaches no client. All channels share one pub/sub connection per node,
// made when the client first waits; a writer goroutine per node SUBSCRIBEs
// and UNSUBSCRIBEs as waits start and end, and a reader goroutine per node
// delivers the messages. A release by this client wakes its local waiters
// directly, with no round trip. Each release wakes one waiter of the lock
// per client: the others would only compete for it and split the votes.
//
// A subscription counts as confirmed on a node when the node answered a
// PING written after the SUBSCRIBE (see confirm); a waiter waits until a
// quorum of nodes confirmed before its next attempt. The holder's key is on
// a quorum of nodes too, so the two meet on at least one node, and a
// release after the confirmation publishes there: it cannot be missed,
// unless that node's connection breaks meanwhile (go-redis subscribes the
// new connection again; the jittered retries cover the gap). That one copy
// may be all that comes (a holder of just a quorum), so a waiter whose
// attempt started before every node confirmed is woken by fewer copies
// than a quorum (see notify).
//
// A Redis Cluster node whose masters have SPUBLISH (nodePipes.sharded)
// keeps its wake-ups in the lock's shard: its scripts announce with
// SPUBLISH, and the node's writer SSUBSCRIBEs each lock's channel on the
// master that serves the lock's slot, on one pub/sub connection per
// master (a shardSub, with a reader of its own), since a shard channel
// can be listened to only there. The argument above holds per master: the
// PING that confirms a subscription goes on the connection that carries
// it, and the release of a lock confirmed there publishes there, unless
// the slot moved meanwhile (a failover, a reshard). The writer routes the
// lock's channel again, to the slot's new master, when the old master's
// connection fails, when that master unsubscribes it (an unasked
// SUNSUBSCRIBE), or when a probe of the node reads a layout in which the
// master no longer serves the slot (relayout; Redis 7.0 tells a demoted
// master's shard subscribers nothing). A release in the gap is missed on
// that node:
// the waiter, like one whose connection broke, then takes the lock by its
// retries, no later than its next retry delay.
type waiters struct {
	c      *Client
	mu     sync.Mutex
	topics map[string]*topic // by lock name: locks waited for now or lately
	subs   []*nodeSub        // by node index, made on the first wait; nil for a node without a client
	need   int               // confirmations a subscription needs: a quorum of the nodes that can subscribe
	nodes  int               // the nodes that can subscribe
	closed bool

	ctx    context.Context // the per-node goroutines' calls; cancelled by close
	cancel context.CancelFunc
}

// waiter is one blocked Acquire. It is woken with true for a release by
// this client, false for one announced by another.
type waiter struct {
	ch chan bool

	// Under waiters.mu, set by attempting: whether the waiter told when
	// its last attempt started, and how many nodes had confirmed the
	// subscription then.
	tracked bool
	sure    int
}

// topic is one lock that this client's Acquire calls wait for, or did
// until less than subscriptionLinger ago.
type topic struct {
	list   []*waiter
	last   string      // owner value of the last release announced
	copies int         // how many nodes announced it (a quorum: all it needs)
	early  bool        // a waiter was woken for it short of a quorum of copies (see notify)
	linger *time.Timer // running while nobody waits: ends the subscription

	// Per node: the sequence number of the first PING written after our
	// SUBSCRIBE reached go-redis (0 until then), and whether that PING (or
	// a later one) was answered.
	subscribed []uint64
	confirmed  []bool
	route      []*shardSub // per sharded node: the master it is SSUBSCRIBEd on (nil for another node)
	nconfirmed int
	ready      chan struct{} // closed once need nodes confirmed
}

// nodeSub is the pub/sub connection to one node, or for a sharded node
// (cc set) its connections to the node's masters.
type nodeSub struct {
	index int
	ps    *redis.PubSub        // nil for a sharded node
	cc    *redis.ClusterClient // a sharded node's: routes each lock's channel to its master
	kick  chan struct{}        // wakes the writer: the topics changed, or a PING is owed

	// Under waiters.mu:
	active map[string]struct{}  // locks whose channel we SUBSCRIBEd and not UNSUBSCRIBEd since
	seq    uint64               // last PING sequence number handed out
	repin  bool                 // the connection broke: PINGs written before may never be answered
	shards map[string]*shardSub // a sharded node's connections, by master address
}

// shardSub is a sharded node's pub/sub connection to one of its masters.
// Its channels are SSUBSCRIBEd one command each: a command's shard
// channels must share a slot. When it fails it is dropped whole, never
// reconnected: go-redis would subscribe a new connection to all its
// channels in one command, which the master refuses (CROSSSLOT) once they
// span slots, and the master may no longer serve them.
type shardSub struct {
	addr   string
	ps     *redis.PubSub
	active map[string]struct{} // under waiters.mu: locks whose channel we SSUBSCRIBEd here
}

// add registers a waiter for name, subscribing to the lock's channel if no
// other waiter of this client did, and waits (up to timeout) until a
// quorum of nodes confirmed the subscription: a release published
// afterwards reaches the waiter, so the caller tries once more at once and
// may then wait for the wake-up.
func (w *waiters) add(ctx context.Context, name string, timeout time.Duration) *waiter {
	wt := &waiter{ch: make(chan bool, 1)}
	w.mu.Lock()
	if w.topics == nil {
		w.topics = make(map[string]*topic)
	}
	t := w.topics[name]
	if t == nil {
		t = w.newTopic(name)
	}
	t.list = append(t.list, wt)
	if t.linger != nil {
		t.linger.Stop()
		t.linger = nil
	}
	ready := t.ready
	w.mu.Unlock()
	select {
	case <-ready:
		return wt
	default:
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select { // without a confirmation, the retries still find the lock free
	case <-ready:
	case <-timer.C:
	case <-ctx.Done():
	}
	return wt
}

// newTopic starts listening to name's channel on every node. w.mu is held.
func (w *waiters) newTopic(name string) *topic {
	if w.subs == nil && !w.closed {
		w.start()
	}
	n := len(w.c.nodes)
	t := &topic{subscribed: make([]uint64, n), confirmed: make([]bool, n), route: make([]*shardSub, n), ready: make(chan struct{})}
	w.topics[name] = t
	if w.need == 0 || w.closed { // nothing can confirm: do not make every wait time out
		close(t.ready)
		return t
	}
	w.kickAll()
	return t
}

// start makes the pub/sub connections and their goroutines. w.mu is held.
// go-redis makes a PubSub without a connection; the reader dials it.
func (w *waiters) start() {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.subs = make([]*nodeSub, len(w.c.nodes))
	for i, n := range w.c.nodes {
		if n.rdb == nil {
			continue
		}
		s := &nodeSub{index: i, kick: make(chan struct{}, 1), active: make(map[string]struct{})}
		w.subs[i] = s
		w.need++
		w.nodes++
		if cc, ok := n.rdb.(*redis.ClusterClient); ok && n.pipes != nil && n.pipes.sharded.Load() {
			s.cc, s.shards = cc, make(map[string]*shardSub)
		} else {
			s.ps = n.rdb.Subscribe(w.ctx)
			w.c.bg.add()
			go w.read(s)
		}
		w.c.bg.add()
		go w.write(s)
	}
	w.need = min(w.need, w.c.quorum())
}

func (w *waiters) kickAll() {
	for _, s := range w.subs {
		if s != nil {
			s.wake()
		}
	}
}

func (s *nodeSub) wake() {
	select {
	case s.kick <- struct{}{}:
	default: // a kick is pending: the writer will see every change
	}
}

// remove unregisters a waiter. When it was the last of its lock, the
// subscription lingers a little, then ends.
func (w *waiters) remove(name string, wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.topics[name]
	if t == nil {
		return
	}
	for i, x := range t.list {
		if x == wt {
			t.list = append(t.list[:i], t.list[i+1:]...)
			break
		}
	}
	if len(t.list) > 0 || t.linger != nil {
		return
	}
	if w.closed {
		delete(w.topics, name)
		return
	}
	var timer *time.Timer
	timer = time.AfterFunc(subscriptionLinger, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		// A waiter that came meanwhile stopped this timer, maybe too late:
		// then the topic is in use, or lingers on another timer.
		if t.linger != timer || w.topics[name] != t {
			return
		}
		delete(w.topics, name)
		if !w.closed {
			w.kickAll()
		}
	})
	t.linger = timer
}

// attempting records that waiter wt of name starts an attempt: a release
// that comes after it was announced on the nodes that confirmed the
// subscription by now, but maybe not on the others (see notify).
func (w *waiters) attempting(name string, wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.topics[name]; t != nil {
		wt.tracked, wt.sure = true, t.nconfirmed
	}
}

// notify wakes one waiter of name for the release of the owner value, or
// every waiter when the value starts with wakeAllMark (the waiters may
// all hold the lock together and need not take turns). The
// same release comes from every node (and from ourselves first, if we held
// it): it wakes one waiter once, when our own release or a quorum of nodes
// told of it. The woken waiter goes to the back, so waiters take turns.
func (w *waiters) notify(name, value string, local bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.topics[name]
	if t == nil {
		return
	}
	// Every node that released announces it. A waiter woken by the first
	// copy could find the other nodes not yet released, fail, and then
	// sleep its whole backoff, the later copies of the same release being
	// dropped. So a remote release wakes a waiter once a quorum of nodes
	// announced it: the lock is then free on a quorum. Our own release
	// wakes at once, having already heard a quorum's deletions.
	//
	// A quorum of copies is certain to come only if the waiter's
	// subscription was in effect on every node when the lock was
	// released. The confirmation promises a quorum of nodes, which meets
	// the holder's quorum on one node only: a holder that won just a
	// quorum (another contender took the last node first) publishes on a
	// node where the waiter's subscription may still be on its way, and
	// the copies then never make a quorum. So a waiter whose last attempt
	// started while some nodes had not confirmed (attempting) is woken by
	// fewer copies, counting each of those nodes as a copy it may have
	// missed; the copies up to the quorum still wake a waiter, so one
	// woken early whose attempt failed is woken again by them.
	if t.last != value {
		t.last, t.copies, t.early = value, 0, false
	}
	q := w.c.quorum()
	if t.copies >= q {
		return // a waiter was woken for this release already
	}
	if local {
		t.copies = q
	} else if t.copies++; t.copies < q {
		if !t.early {
			// One waiter, or for a release that wakes every waiter
			// (wakeAllMark), each one that qualifies.
			all := strings.HasPrefix(value, wakeAllMark)
			for i, wt := range t.list {
				if !wt.tracked || t.copies+w.nodes-wt.sure < q {
					continue
				}
				select {
				case wt.ch <- false:
					t.early = true
					if !all {
						t.list = append(append(t.list[:i:i], t.list[i+1:]...), wt)
						return
					}
				default: // already woken, not yet back to waiting
				}
			}
		}
		return
	}
	if strings.HasPrefix(value, wakeAllMark) {
		for _, wt := range t.list {
			select {
			case wt.ch <- local:
			default: // already woken
			}
		}
		return
	}
	for i, wt := range t.list {
		select {
		case wt.ch <- local:
			t.list = append(append(t.list[:i:i], t.list[i+1:]...), wt)
			return
		default: // already woken, not yet back to waiting
		}
	}
}

// confirm records that node s answered the PING numbered seq: every
// subscription whose SUBSCRIBE reached go-redis before that PING was
// written is in effect on the node. go-redis keeps the set of channels it
// was asked for and, on any new connection, subscribes to all of them
// before it writes anything else; so whichever connection carried the PING
// was subscribed to them when the node answered it. Nothing UNSUBSCRIBEs a
// topic's channel while the topic exists (see sync). The SUBSCRIBE's own
// reply would not do: after an UNSUBSCRIBE and a new SUBSCRIBE of the same
// channel, or a reconnection, a reply to an earlier SUBSCRIBE looks the
// same; a numbered PING cannot be mistaken.
// On a sharded node, sh is the master that answered: it confirms only the
// subscriptions made there.
func (w *waiters) confirm(s *nodeSub, sh *shardSub, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := s.index
	for _, t := range w.topics {
		if at := t.subscribed[i]; at != 0 && at <= seq && !t.confirmed[i] && t.route[i] == sh {
			t.confirmed[i] = true
			t.nconfirmed++
			if t.nconfirmed == w.need {
				close(t.ready)
			}
		}
	}
}

// read delivers what node s sends: release messages and PING answers.
func (w *waiters) read(s *nodeSub) {
	defer w.c.bg.done()
	for failures := 0; ; {
		msg, err := s.ps.Receive(w.ctx)
		if err != nil {
			if w.ctx.Err() != nil {
				return // closed
			}
			// The connection broke. go-redis makes a new one and subscribes
			// it again to every channel, but a PING written to the old one
			// may never be answered: the writer pings again.
			w.mu.Lock()
			s.repin = true
			w.mu.Unlock()
			s.wake()
			failures++
			if failures == 1 {
				w.warnRefused(s, err)
			}
			if !w.pause(failures) {
				return
			}
			continue
		}
		failures = 0
		w.received(s, nil, msg)
	}
}

// received handles what node s sent: a release message, or a PING's
// answer; sh is the master that sent it on a sharded node.
func (w *waiters) received(s *nodeSub, sh *shardSub, msg any) {
	switch m := msg.(type) {
	case *redis.Message:
		if name, ok := w.c.nameOfChannel(m.Channel); ok {
			if w.c.messages.deliver(s.index, name, m.Payload) {
				return // a kind's own message, not a release
			}
			w.notify(name, m.Payload, false)
		}
	case *redis.Pong:
		if seq, err := strconv.ParseUint(m.Payload, 10, 64); err == nil {
			w.confirm(s, sh, seq)
		}
	case *redis.Subscription:
		if sh != nil && m.Kind == "sunsubscribe" {
			w.unsubscribed(s, sh, m.Channel)
		}
	}
}

// readShard delivers what master sh of sharded node s sends, until the
// connection fails or the client closes: then sh is dropped, and the
// writer routes its locks' channels again.
func (w *waiters) readShard(s *nodeSub, sh *shardSub) {
	defer w.c.bg.done()
	for {
		msg, err := sh.ps.Receive(w.ctx)
		if err != nil {
			if w.ctx.Err() == nil {
				w.warnRefused(s, err)
				w.dropShard(s, sh)
			}
			return
		}
		w.received(s, sh, msg)
	}
}

// unsubscribed handles an SUNSUBSCRIBE of channel on master sh: ours, for
// a lock nobody waits for any more, or the master's own, when it stopped
// serving the channel's slot (a failover made it a replica, or the slot
// moved). A lock still routed to sh lost its subscription: the writer
// routes it again, to the master that serves the slot now.
func (w *waiters) unsubscribed(s *nodeSub, sh *shardSub, channel string) {
	name, ok := w.c.nameOfChannel(channel)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.topics[name]
	if t == nil || t.route[s.index] != sh {
		return // ours
	}
	delete(sh.active, name)
	t.route[s.index], t.subscribed[s.index] = nil, 0
	s.cc.ReloadState(w.ctx)
	s.wake()
}

// dropShard forgets master sh of sharded node s after its connection
// failed: the locks routed there are routed again by the writer, after the
// cluster's layout is read anew (the master may have failed over).
func (w *waiters) dropShard(s *nodeSub, sh *shardSub) {
	w.mu.Lock()
	if s.shards[sh.addr] == sh {
		delete(s.shards, sh.addr)
	}
	for _, t := range w.topics {
		if t.route[s.index] == sh {
			t.route[s.index], t.subscribed[s.index] = nil, 0
		}
	}
	w.mu.Unlock()
	_ = sh.ps.Close()
	s.cc.ReloadState(w.ctx)
	s.wake()
}

// warnRefused logs a pub/sub command that node s refused (an ACL without
// subscribe, say): waiters still get the lock by their retries, only later,
// and nothing else would tell why.
func (w *waiters) warnRefused(s *nodeSub, err error) {
	var refused redis.Error
	if errors.As(err, &refused) && w.ctx.Err() == nil {
		w.c.logger.Warn("redlock: cannot listen for releases; waiters fall back to retries",
			"node", w.c.nodes[s.index].name, "err", err)
	}
}

// write keeps node s's subscriptions in line with the topics.
func (w *waiters) write(s *nodeSub) {
	defer w.c.bg.done()
	for {
		select {
		case <-s.kick:
		case <-w.ctx.Done():
			return
		}
		for failures := 0; ; {
			err := w.sync(s)
			if err == nil {
				break
			}
			failures++
			if failures == 1 {
				w.warnRefused(s, err)
			}
			if !w.pause(failures) {
				return
			}
		}
	}
}

// sync UNSUBSCRIBEs node s from the channels of locks nobody waits for any
// more, SUBSCRIBEs it to those of new topics, and writes a PING to confirm
// them. On an error the caller calls again: whatever did not succeed is
// still to do.
func (w *waiters) sync(s *nodeSub) error {
	if s.cc != nil {
		return w.syncShards(s)
	}
	i := s.index
	var subNames, subChannels, unsubChannels []string
	w.mu.Lock()
	for name, t := range w.topics {
		if t.subscribed[i] == 0 {
			subNames = append(subNames, name)
			subChannels = append(subChannels, w.c.releaseChannel(name))
		}
	}
	var gone []string
	for name := range s.active {
		if w.topics[name] == nil {
			gone = append(gone, name)
			unsubChannels = append(unsubChannels, w.c.releaseChannel(name))
		}
	}
	ping := len(subNames) > 0
	if s.repin {
		s.repin = false
		for _, t := range w.topics {
			ping = ping || (t.subscribed[i] != 0 && !t.confirmed[i])
		}
	}
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(w.ctx, w.c.releaseTimeout())
	defer cancel()
	if len(unsubChannels) > 0 {
		// go-redis forgets the channels before it writes the command: even
		// if that fails, no new connection subscribes to them again.
		_ = s.ps.Unsubscribe(ctx, unsubChannels...)
		w.mu.Lock()
		for _, name := range gone {
			delete(s.active, name)
		}
		w.mu.Unlock()
	}
	if len(subNames) > 0 {
		// Active from now on, even if the call fails: go-redis remembers
		// the channels either way, and only an UNSUBSCRIBE makes it forget.
		w.mu.Lock()
		for _, name := range subNames {
			s.active[name] = struct{}{}
		}
		w.mu.Unlock()
		if err := s.ps.Subscribe(ctx, subChannels...); err != nil {
			return err // maybe not subscribed on the connection now in use: again
		}
	}
	if !ping {
		return nil
	}
	w.mu.Lock()
	s.seq++
	seq := s.seq
	for _, name := range subNames {
		// The topic may have been replaced meanwhile: the new one wants
		// the same channel, and no UNSUBSCRIBE came after ours.
		if t := w.topics[name]; t != nil && t.subscribed[i] == 0 {
			t.subscribed[i] = seq
		}
	}
	w.mu.Unlock()
	if err := s.ps.Ping(ctx, strconv.FormatUint(seq, 10)); err != nil {
		w.mu.Lock()
		s.repin = true
		w.mu.Unlock()
		return err
	}
	return nil
}

// pause waits before the next try after the given number of failures in a
// row: not at all after the first (a broken connection is made anew at
// once), then 10ms doubling up to 1s. It is false once the client closed.
func (w *waiters) pause(failures int) bool {
	if failures <= 1 {
		return w.ctx.Err() == nil
	}
	timer := time.NewTimer(min(10*time.Millisecond<<min(failures-2, 7), time.Second))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// close ends every subscription: closing a PubSub closes its connection,
// and with it the node drops the connection's subscriptions.
func (w *waiters) close() {
	w.mu.Lock()
	w.closed = true
	for name, t := range w.topics {
		if t.linger != nil {
			t.linger.Stop()
			delete(w.topics, name)
		}
	}
	subs := w.subs
	var shards []*shardSub
	for _, s := range subs {
		if s != nil {
			for _, sh := range s.shards {
				shards = append(shards, sh)
			}
		}
	}
	w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
	for _, s := range subs {
		if s != nil && s.ps != nil {
			_ = s.ps.Close()
		}
	}
	for _, sh := range shards {
		_ = sh.ps.Close()
	}
}

// relayout has sharded node i's writer check its locks' routes against
// the cluster's layout that a probe just read.
func (w *waiters) relayout(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i < len(w.subs) && w.subs[i] != nil && w.subs[i].cc != nil {
		w.subs[i].wake()
	}
}

// syncShards is sync for a sharded node: it SUNSUBSCRIBEs each master
// from the channels of locks nobody waits for any more (or routed
// elsewhere since), SSUBSCRIBEs the channel of each new topic on the
// master that serves its slot (connecting to that master first if need
// be), and writes a numbered PING to each master it subscribed on. A
// master whose command fails is dropped (dropShard); the caller calls
// again, and what did not succeed is still to do.
func (w *waiters) syncShards(s *nodeSub) error {
	i := s.index
	ctx, cancel := context.WithTimeout(w.ctx, w.c.releaseTimeout())
	defer cancel()
	type change struct {
		sh    *shardSub
		names []string
	}
	var subNames []string
	var gone []change
	w.mu.Lock()
	// A lock whose master no longer serves its slot, as the node's last
	// probe read the layout, is routed again, and SUNSUBSCRIBEd there
	// below. Redis 7.0 keeps a demoted master's shard subscribers and tells
	// them nothing (a replica of the slot's new master even goes on
	// delivering its SPUBLISHes); a master that refuses the SUNSUBSCRIBE
	// (MOVED: the slot left its shard) is dropped whole.
	g, moved := w.c.nodes[i].guard.Load(), false
	for name, t := range w.topics {
		if sh := t.route[i]; sh != nil && g != nil && g.shards != nil {
			if sg := g.shard(sh.addr); sg == nil || !sg.serves(keySlot(w.c.releaseChannel(name))) {
				t.route[i], t.subscribed[i], moved = nil, 0, true
			}
		}
	}
	if moved {
		s.cc.ReloadState(w.ctx)
	}
	for name, t := range w.topics {
		if t.subscribed[i] == 0 {
			subNames = append(subNames, name)
		}
	}
	for _, sh := range s.shards {
		var names []string
		for name := range sh.active {
			if t := w.topics[name]; t == nil || t.route[i] != sh {
				names = append(names, name)
				delete(sh.active, name) // see sync: go-redis forgets it first
			}
		}
		if len(names) > 0 {
			gone = append(gone, change{sh, names})
		}
	}
	w.mu.Unlock()

	var errs []error
	for _, g := range gone {
		for _, name := range g.names {
			if err := g.sh.ps.SUnsubscribe(ctx, w.c.releaseChannel(name)); err != nil {
				w.dropShard(s, g.sh)
				errs = append(errs, err)
				break
			}
		}
	}
	// Route each new topic to the master of its slot, as the ClusterClient
	// knows the layout now.
	byShard := map[*shardSub][]string{}
	for _, name := range subNames {
		sh, err := w.shardFor(s, w.c.releaseChannel(name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		byShard[sh] = append(byShard[sh], name)
	}
	for sh, names := range byShard {
		w.mu.Lock()
		for _, name := range names {
			sh.active[name] = struct{}{}
		}
		w.mu.Unlock()
		var err error
		for _, name := range names {
			if err = sh.ps.SSubscribe(ctx, w.c.releaseChannel(name)); err != nil {
				break
			}
		}
		if err == nil {
			w.mu.Lock()
			s.seq++
			seq := s.seq
			for _, name := range names {
				if t := w.topics[name]; t != nil && t.subscribed[i] == 0 {
					t.subscribed[i], t.route[i] = seq, sh
				}
			}
			w.mu.Unlock()
			err = sh.ps.Ping(ctx, strconv.FormatUint(seq, 10))
		}
		if err != nil {
			w.dropShard(s, sh)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// shardFor is the connection of sharded node s to the master that serves
// channel's slot, made (with its reader) if there is none yet.
func (w *waiters) shardFor(s *nodeSub, channel string) (*shardSub, error) {
	ctx, cancel := context.WithTimeout(w.ctx, w.c.releaseTimeout())
	defer cancel()
	m, err := s.cc.MasterForKey(ctx, channel)
	if err != nil {
		return nil, err
	}
	addr := m.Options().Addr
	w.mu.Lock()
	defer w.mu.Unlock()
	if sh := s.shards[addr]; sh != nil {
		return sh, nil
	}
	if w.closed {
		return nil, errors.New("redlock: client closed")
	}
	sh := &shardSub{addr: addr, ps: m.SSubscribe(w.ctx), active: make(map[string]struct{})}
	s.shards[addr] = sh
	w.c.bg.add()
	go w.readShard(s, sh)
	return sh, nil
}
