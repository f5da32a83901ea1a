package main

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// latencyProxy forwards TCP connections to one Redis node and delays every chunk of data, in
// both directions, by an adjustable amount: a slow network link to that node. Data keeps its
// order, and throughput is not limited, only delayed.
type latencyProxy struct {
	ln       net.Listener
	upstream string
	delay    atomic.Int64 // nanoseconds, each way

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startLatencyProxy listens on a free port of 127.0.0.1 and forwards to upstream.
func startLatencyProxy(upstream string) (*latencyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &latencyProxy{ln: ln, upstream: upstream, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's own address, to give to clients instead of the node's.
func (p *latencyProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the one-way delay for data read from now on.
func (p *latencyProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Close stops accepting, cuts every connection and waits for the forwarding goroutines.
func (p *latencyProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *latencyProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(down)
	}
}

// track registers a connection so Close can cut it; false if the proxy is closing.
func (p *latencyProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *latencyProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// serve forwards one client connection. When either side closes or fails, both are closed:
// a node that dies or restarts breaks its clients' connections, as it would without us.
func (p *latencyProxy) serve(down net.Conn) {
	defer p.wg.Done()
	if !p.track(down) {
		down.Close()
		return
	}
	defer p.untrack(down)
	up, err := net.DialTimeout("tcp", p.upstream, time.Second)
	if err != nil {
		down.Close()
		return
	}
	if !p.track(up) {
		up.Close()
		down.Close()
		return
	}
	defer p.untrack(up)
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			down.Close()
			up.Close()
		})
	}
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); p.pipe(up, down, closeBoth) }()
	go func() { defer pipes.Done(); p.pipe(down, up, closeBoth) }()
	pipes.Wait()
}

// chunk is data read at one moment, to be written once its delay has passed.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk held back by the delay in force when it was read.
func (p *latencyProxy) pipe(dst, src net.Conn, closeBoth func()) {
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{data: buf[:n], due: time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait) // the delay is the point of this proxy
		}
		if _, err := dst.Write(c.data); err != nil && !errors.Is(err, net.ErrClosed) {
			break
		}
	}
	closeBoth()
	for range chunks {
		// Drain so the reader, unblocked by closeBoth, can exit.
	}
}
