// Command mutex runs a job that must not run twice at once, under a lock held
// on three independent Redis masters.
//
// Start three local masters first (or set REDLOCK_NODES to your own):
//
//	for p in 7001 7002 7003; do redis-server --port $p --save '' --daemonize yes; done
package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/quorumlabs/redlock"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	// Three independent masters: no replication between them. REDLOCK_NODES
	// (comma-separated URLs, as for the redlock command) replaces them.
	nodes := []string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"}
	if env := os.Getenv("REDLOCK_NODES"); env != "" {
		nodes = strings.Split(env, ",")
	}
	client, err := redlock.NewFromURLs(nodes, redlock.Options{
		// Short, and extended while the job runs: a node that restarted
		// without persistence (or was just started) sits out one TTL.
		TTL:    2 * time.Second,
		Logger: slog.Default(), // says what an acquire waits for, and why
	})
	if err != nil {
		return err
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Do waits for the lock, keeps it extended while the function runs, and
	// cancels the function's ctx the moment the lock is lost.
	return client.Do(ctx, "payout:2026-11-21", func(ctx context.Context, l *redlock.Lock) error {
		fmt.Printf("paying out under fencing token %d\n", l.Token())
		return payOut(ctx, l.Token())
	})
}

// payOut stands for the guarded work. It hands the token to whatever it
// writes, which refuses a token lower than one it has seen (docs/FENCING.md).
func payOut(ctx context.Context, token int64) error {
	select {
	case <-time.After(100 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx) // redlock.ErrLockLost if the lock was lost
	}
}
