// Package setup connects the programs in examples/ to their servers, so that
// each program shows only the primitive it is about.
//
// The lock nodes are the three local masters of the README's quick start
// (redis://127.0.0.1:7001 to 7003), or the comma-separated URLs in
// REDLOCK_NODES. examples/mutex, the README's first program, writes this setup
// out in full: copy it from there into a program of your own.
package setup

import (
	"context"
	"log"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
)

// TTL is the examples' lock TTL: short, so that on nodes just started the
// first lock waits out their restart grace (one TTL) in seconds.
const TTL = 2 * time.Second

// Timeout bounds each example's run: none takes more than a few seconds.
const Timeout = 30 * time.Second

// Run connects a client to the lock nodes with locks of TTL, calls run with
// it and a context that ends after Timeout, and closes the client. It exits
// the program through log.Fatal if the client could not be made or run
// returned an error.
func Run(run func(ctx context.Context, client *redlock.Client) error) {
	if err := connectAndRun(run); err != nil {
		log.Fatal(err)
	}
}

func connectAndRun(run func(ctx context.Context, client *redlock.Client) error) error {
	nodes := []string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"}
	if env := os.Getenv("REDLOCK_NODES"); env != "" {
		nodes = strings.Split(env, ",")
	}
	client, err := redlock.NewFromURLs(nodes, redlock.Options{TTL: TTL})
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	return run(ctx, client)
}

// Redis connects to the server whose URL is in the environment variable env,
// or to defaultURL when env is unset: the data a lock guards (a resource, a
// cache), which is never one of the lock nodes. The caller closes it.
func Redis(env, defaultURL string) (*redis.Client, error) {
	url := defaultURL
	if v := os.Getenv(env); v != "" {
		url = v
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opts), nil
}
