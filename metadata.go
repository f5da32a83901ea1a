package redlock

import (
	"fmt"
	"unicode/utf8"
)

// MaxMetadataLen is the largest holder metadata accepted, in bytes: enough
// for a host, a process id, a command line and a start time, small enough
// that every node keeps it beside the lock at no noticeable cost.
const MaxMetadataLen = 1024

// holderSuffix names the key that keeps a holder's metadata beside its
// lock, in the lock's hash slot.
const holderSuffix = ":holder"

// WithMetadata attaches md to the lock while it is held, for operators
// asking who holds it: Inspect returns it (Status.Metadata) and
// `redlock status` shows it. It is kept on each node in a key of its own
// (Keys.Holder) that the acquire sets, every extension renews and the release
// deletes, in the same scripts as the lock key, so it lives exactly as long
// as the lock does there. The value is stored after the owner value, so a
// reader pairs it with the holder that wrote it and never shows an earlier
// holder's. A lock without metadata costs nothing more than before.
// md must be valid UTF-8 of at most MaxMetadataLen bytes; "" attaches none.
func WithMetadata(md string) LockOption { return func(lc *lockConfig) { lc.metadata = md } }

// checkMetadata refuses metadata the nodes should not store.
func checkMetadata(md string) error {
	switch {
	case len(md) > MaxMetadataLen:
		return configErr("metadata", fmt.Sprintf("%.20q... (%d bytes)", md, len(md)), fmt.Sprintf("is longer than %d bytes", MaxMetadataLen))
	case !utf8.ValidString(md):
		return configErr("metadata", fmt.Sprintf("%.20q", md), "is not valid UTF-8")
	}
	return nil
}

// holderKey is Keys.Holder: the metadata of the lock's holder (see
// WithMetadata), in the lock's cluster slot.
func (c *Client) holderKey(name string) string { return c.lockKey(name) + holderSuffix }

// attachMetadata makes the attempt's scripts set, renew and delete the
// holder key along with the lock key. Only attempts with metadata pay for
// the longer commands.
//
// The holder key and the metadata are kept in the commands only, not in
// fields of the attempt: an attempt is allocated on every acquire, and two
// more fields would put it in a larger size class for every lock.
func (a *attempt) attachMetadata(md string) {
	var holderKey any = a.keys[0] + holderSuffix // boxed once, for both commands
	// acquireArgs: evalsha sha 2 lock fence value ttl proposal lifetime;
	// the holder key joins the keys and md the arguments (acquire.lua).
	acq := a.acquireArgs
	a.acquireArgs = []any{acq[0], acq[1], 3, acq[3], acq[4], holderKey, acq[5], acq[6], acq[7], acq[8], md}
	// releaseArgs: evalsha sha 1 lock value channel (release.lua).
	rel := a.releaseArgs
	a.releaseArgs = []any{rel[0], rel[1], 2, rel[3], holderKey, rel[4], rel[5]}
}

// holder gives the holder key and metadata that attachMetadata put in the
// acquire command; ok is false for an attempt without metadata. Only the
// mutex keeps metadata (the other kinds refuse it), so the kind decides
// first; the other kinds' commands may have the same length (a reader's
// acquire has eleven elements too).
func (a *attempt) holder() (holderKey, md string, ok bool) {
	if a.kind != mutexKind || len(a.acquireArgs) != 11 {
		return "", "", false
	}
	return a.acquireArgs[5].(string), a.acquireArgs[10].(string), true
}

// holderMetadata splits a holder key's value into the owner value that
// wrote it and the metadata.
func holderMetadata(stored string) (owner, md string) {
	if len(stored) < ownerValueLen {
		return "", ""
	}
	return stored[:ownerValueLen], stored[ownerValueLen:]
}
