// Package setup connects the programs in examples/ to their servers, so that
// each program shows only the primitive it is about.
//
// The lock nodes are the three local masters of the README's quick start
// (redis://127.0.0.1:7001 to 7003), or the comma-separated URLs in
// REDLOCK_NODES. examples/mutex, the README's first program, writes this setup
// out in full: copy it from there into a program of your own.
package setup

import (
	"log"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
)

// Run connects a client to the lock nodes with opts, calls run with it and
// closes it. It exits the program through log.Fatal if the client could not
// be made or run returned an error.
func Run(opts redlock.Options, run func(client *redlock.Client) error) {
	if err := connectAndRun(opts, run); err != nil {
		log.Fatal(err)
	}
}

func connectAndRun(opts redlock.Options, run func(client *redlock.Client) error) error {
	nodes := []string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"}
	if env := os.Getenv("REDLOCK_NODES"); env != "" {
		nodes = strings.Split(env, ",")
	}
	client, err := redlock.NewFromURLs(nodes, opts)
	if err != nil {
		return err
	}
	defer client.Close()
	return run(client)
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
