//go:build race

package main

// raceEnabled makes TestMain build the redlock binary with the race detector too, so that
// `go test -race` also covers the code that runs in the subprocesses.
const raceEnabled = true
