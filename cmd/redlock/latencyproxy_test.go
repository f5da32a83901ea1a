package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line, until it is closed.
func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestLatencyProxyForwardsBothWays(t *testing.T) {
	upstream := echoServer(t)
	p, err := startLatencyProxy(upstream.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, delay := range []time.Duration{0, 5 * time.Millisecond} {
		p.SetDelay(delay)
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		for _, line := range []string{"PING\n", "a longer line of data\n", "PING\n"} {
			if _, err := c.Write([]byte(line)); err != nil {
				t.Fatal(err)
			}
			got, err := r.ReadString('\n')
			if err != nil || got != line {
				t.Fatalf("delay %v: sent %q, got %q, %v", delay, line, got, err)
			}
		}
		c.Close()
	}
}

func TestLatencyProxyCutsConnectionsOnClose(t *testing.T) {
	upstream := echoServer(t)
	p, err := startLatencyProxy(upstream.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after Close, a client read gave %v, want EOF", err)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("the proxy still accepts connections after Close")
	}
}

func TestLatencyProxyClosesClientsOfADeadUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p, err := startLatencyProxy(dead)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("with the upstream down, a client read gave %v, want EOF", err)
	}
}
