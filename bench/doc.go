// Package bench measures the hot path of the redlock library side by side
// with the locks a user would pick instead: go-redsync/redsync (default and
// fail-fast), bsm/redislock (one node) and a raw floor that does nothing but
// one SET NX and one owner-checked DEL per node.
//
// Every contender runs in the same process against the same redis-server
// processes, which the bench starts and stops itself, through the same
// go-redis clients. RunMatrix runs the whole matrix (cluster sizes ×
// workloads × contenders, repeated and interleaved) and returns the medians;
// the go test benchmarks in this package measure the same workloads with
// -benchmem for allocation counts and profiles.
//
// This is a separate module so that redsync, redislock and toxiproxy never
// enter the library's go.mod.
package bench
