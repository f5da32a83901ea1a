package redlock_test

import "testing"

// Review of 75fdd08: the rule "a master that stops migrating a slot it
// still serves starts an epoch" is read only by the probe of a node that is
// a whole Redis Cluster (a *redis.ClusterClient, probe.go probeCluster).
// A node that is one master of a Cluster, given as a plain client (GUARANTEES
// "Nodes in Redis Cluster mode": "one node may be a cluster master"), is
// probed by cluster.go's probeCluster, which reads CLUSTER NODES for the
// served slots only: neither claims nor migrating reach nextEpoch, so the
// same abort (the lock's keys MIGRATEd to the importing master, then CLUSTER
// SETSLOT STABLE) goes unseen by a client that probed while the slot was
// open. DESIGN §7: "Keep this rule in one place in the code, so that a new
// kind of node cannot go around it."
//
// Schedule: nodes = a standalone server and the slot owner M of two
// 2-master Clusters, each given as a plain client. X holds a lock whose slot
// M serves. On both Clusters: SETSLOT IMPORTING on N, MIGRATING on M, MIGRATE
// every key of the slot to N. Client "before" probes (a lock in another slot
// of M) while the slot is open. SETSLOT STABLE on N and M. After the guard's
// one-second window, "before" tries X's lock.
func TestReviewPlainClusterMasterMigrationAbortedGivesNoSecondHolder(t *testing.T) {
	migrationAbortedGivesNoSecondHolder(t, true)
}
