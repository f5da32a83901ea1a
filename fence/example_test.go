package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/fence"
	"github.com/quorumlabs/redlock/redistest"
)

func ExampleSet() {
	nodes, err := redistest.Start(1, redistest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = nodes.Stop() }()
	resource, err := redis.ParseURL(nodes.URLs()[0])
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(resource)
	defer rdb.Close()
	ctx := context.Background()

	// Token 42 wrote first; a holder with an older token, stalled past
	// its lock's validity, wakes up and tries to write.
	_ = fence.Set(ctx, rdb, "balance:alice", 42, "100")
	err = fence.Set(ctx, rdb, "balance:alice", 41, "0")
	fmt.Println(errors.Is(err, fence.ErrStaleToken))
	value, token, _ := fence.Get(ctx, rdb, "balance:alice")
	fmt.Println(value, token)
	// Output:
	// true
	// 100 42
}

func ExampleGuard() {
	var guard fence.Guard // one per guarded resource, in the process that owns it
	fmt.Println(guard.Admit(7))
	fmt.Println(guard.Admit(5))
	// Output:
	// <nil>
	// fence: stale fencing token 5 (a holder with token 7 came after it)
}
