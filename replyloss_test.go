package redlock_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// replyLoss loses the reply to one command of a go-redis client: the
// server runs it, then the client's connection breaks before the reply is
// read, and go-redis sends the command again on a new connection (its
// default retries, which a client handed to redlock.New keeps), as after a
// network fault between the two.
type replyLoss struct {
	mu     sync.Mutex
	marker []byte // a write that holds it loses its reply; nil: disarmed
	before func() // awaits the command's effect on the server, before the loss
	lost   chan struct{}
}

// arm makes the next write that holds the RESP argument arg (a command's
// name or one of its arguments, framed as go-redis writes it: a script's
// source that mentions the word does not match) lose its reply, once
// before returns. lost is closed then.
func (l *replyLoss) arm(arg string, before func()) (lost <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marker = []byte("$" + strconv.Itoa(len(arg)) + "\r\n" + arg + "\r\n")
	l.before = before
	l.lost = make(chan struct{})
	return l.lost
}

// take disarms l and returns its before and lost if b holds the marker.
func (l *replyLoss) take(b []byte) (func(), chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.marker == nil || !bytes.Contains(b, l.marker) {
		return nil, nil
	}
	l.marker = nil
	return l.before, l.lost
}

// dial is a redis.Options.Dialer.
func (l *replyLoss) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: conn, l: l}, nil
}

// client is a go-redis client of addr whose replies l can lose.
func (l *replyLoss) client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Dialer: l.dial, ContextTimeoutEnabled: true, DisableIdentity: true})
}

type lossyConn struct {
	net.Conn
	l      *replyLoss
	before func()
	lost   chan struct{}
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if before, lost := c.l.take(b); before != nil {
		c.before, c.lost = before, lost
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	if c.before != nil {
		c.before()
		c.before = nil
		_ = c.Conn.Close()
		close(c.lost)
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}
