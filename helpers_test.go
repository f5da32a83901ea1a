package redlock_test

import (
	"context"
	"os"
	"testing"

	"github.com/quorumlabs/redlock"
)

// TestMain silences go-redis' own log: the tests kill nodes on purpose, and
// every failed dial would print a line.
func TestMain(m *testing.M) {
	redlock.SetGoRedisLogger(quietLogger{}) // the lines about NewFromURLs' nodes go to their clients' Logger
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
