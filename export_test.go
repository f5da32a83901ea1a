package redlock

// Internal limits and values that the tests outside the package check
// against. They are not part of the API: a user sets -1 or reads the limit
// from the error a bad value gets.
const (
	MinTTL               = minLockTTL
	MaxNameLen           = maxNameLen
	NoClockGuard         = noClockGuard
	NoFenceExpiry        = noFenceExpiry
	DefaultFenceLifetime = defaultFenceLifetime
	SitOutClockJump      = sitOutClockJump
	KindMaster           = kindMaster
	KindCluster          = kindCluster
	KindSentinel         = kindSentinel
)

// GraceError is the error of a node that sits out the restart grace.
type GraceError = graceError

// ParseURL is the parser NewFromURLs uses for a standalone node's URL.
var ParseURL = parseURL

// PermitsOf is how many holders s admits at once: the K it was made with.
func PermitsOf(s *Semaphore) int { return s.permits }

// AcquireAsync and AwaitGot are the internal tests' fixtures for an acquire
// in the background, shared with the external tests.
var (
	AcquireAsync = acquireAsync
	AwaitGot     = awaitGot
)
