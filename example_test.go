package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// exampleNodes starts local masters for the examples. In production, give
// the URLs of your own independent Redis masters.
func exampleNodes(n int) (urls []string, stop func()) {
	nodes, err := redistest.Start(n, redistest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	return nodes.URLs(), func() { _ = nodes.Stop() }
}

func Example() {
	urls, stop := exampleNodes(5)
	defer stop()

	// The nodes were started just now, with no persistence: they sit out
	// the restart grace, one TTL, before they vote (they cannot know that
	// they forgot no lock). A short TTL, renewed while held, keeps that short.
	client, err := redlock.NewFromURLs(urls, redlock.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx := context.Background()
	lock, err := client.Acquire(ctx, "nightly-report", redlock.WithMaxWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// Work until lock.Deadline(), passing lock.Token() to whatever you write.
	fmt.Println("holding", lock.Name(), "with a token:", lock.Token() > 0)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: holding nightly-report with a token: true
}

func ExampleClient_Do() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.Options{TTL: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// Do keeps the lock extended while the function runs, and cancels its
	// context the moment the lock is lost.
	err = client.Do(context.Background(), "cache-refill", func(ctx context.Context, lock *redlock.Lock) error {
		select {
		case <-time.After(1500 * time.Millisecond): // longer than the TTL
			fmt.Println("refilled under token", lock.Token() > 0)
			return nil
		case <-ctx.Done():
			return context.Cause(ctx) // matches redlock.ErrLockLost
		}
	})
	fmt.Println("err:", err)
	// Output:
	// refilled under token true
	// err: <nil>
}

func ExampleClient_TryAcquire() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	// Acquire waits, here for the fresh nodes' restart grace (one TTL).
	first, err := client.Acquire(ctx, "cron:billing", redlock.WithMaxWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer first.Release(ctx)

	_, err = client.TryAcquire(ctx, "cron:billing")
	var held *redlock.LockedError
	if errors.As(err, &held) {
		fmt.Println("another replica runs the job; skipping")
	}
	// Output: another replica runs the job; skipping
}

func ExampleWithMetadata() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx := context.Background()
	// Tell operators who holds the lock: Inspect (and `redlock status`) show it.
	lock, err := client.Acquire(ctx, "deploy", redlock.WithMetadata("host=web-1 pid=4242 cmd=make deploy"), redlock.WithMaxWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	st, err := client.Inspect(ctx, "deploy")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", st.Held, "by", st.Metadata)
	// Output: held: true by host=web-1 pid=4242 cmd=make deploy
}
