/*
 * redlock.pml -- the lock protocol of DESIGN sec. 1-3 as SPIN sees it.
 *
 * What is modelled
 *   3 independent nodes, each with the lock key (owner, expiry in node-clock
 *   time), the fence register F and the register R "largest TTL in use".
 *   2 clients with different TTLs (TTL_A long, TTL_B short).  A client runs
 *   one attempt: parallel acquire, decision at quorum, fencing (fast path
 *   p > max f over the winners, else the raise phase to max f + 1), at most
 *   one extend with the repair of extend.lua, writes to a fenced resource,
 *   and a release that goes to a node only after the calls in flight there
 *   have answered (quorum.go enter/leave/askRelease).
 *   Every request is a separate step (the node runs it and the client reads
 *   the reply in that step; a reply's delay only shortens the validity, as
 *   the client dates the decision when it reads), so the interleaving gives
 *   arbitrary message delay and reordering between clients and nodes, a
 *   client that starts at any moment (with no history of any node), and a
 *   client that pauses for any time (past its validity too).
 *   Faults, each switched on by a -D flag: one node crash+restart (CRASH),
 *   with or without persistence (PERSIST: every server keeps its own writes
 *   across its own restart); one forward clock jump of a node (JUMP); one
 *   failover of node 0 (FAILOVER, below), optionally followed by a fail-back
 *   to the old master (FAILBACK); one eviction (EVICT, below).  Guards,
 *   selected by -D flags: the epoch rule, or the old one (OLDRULE, below);
 *   restart grace NOGRACE | OWN | FLEET_SCRIPT | FLEET_PRE, clock guard
 *   CLOCK_OFF | CLOCK_OWN | CLOCK_CROSS; durable votes (DURABLE).
 *   The extension counts only if its quorum answered before the current
 *   deadline (LATE_EXTEND: the old rule, any answer while the new validity
 *   is positive); NOFENCE: the repair ignores F, as extend.lua does with
 *   fencing off; EXTEND_A: only client A (the longer TTL) extends, which
 *   keeps TMAX 4 within 1 GB (B's TTL of 2 ticks leaves no room for an
 *   extension across a gap: that needs a TTL of 4 ticks or more).
 *
 * The failover (FAILOVER)
 *   Node 0 is a master with one replica; the other nodes have none (the
 *   nodes are symmetric, so node 0 stands for any).  The replica holds a copy
 *   of the master's key and F, with the key's absolute expiry (Redis
 *   replicates PEXPIREAT, and the replica's clock is the master's here: a
 *   promoted replica's own clock is the clock guard's business).  A
 *   "replicate" step, enabled at any moment, copies the master's state to
 *   the replica.  So the replica holds the master's state of some earlier
 *   moment, which is exactly a prefix of the master's write stream (every
 *   prefix is such a state: the step may fire right after any write and not
 *   again).  The failover, at most once and at any time t <= CRASH_BY,
 *   promotes the replica: node 0's state becomes the replica's, losing the
 *   writes it had not received; node 0 has no replica from then on (its old
 *   master is gone), so a later vote needs no acknowledgement.  R is not
 *   copied, and the promotion empties it (the worst case): with one fault,
 *   node 0's R is read only for the grace of another restarted node, and
 *   there is none.
 *   DURABLE: a vote of node 0 counts only once its replica holds the write
 *   (WAIT 1 pipelined after the script): the reply is read in a step of its
 *   own, any time after the script ran, and counts only if a replicate step
 *   came in between (else it is WAIT's timeout: the vote does not count,
 *   the key may be set, the release sweeps it).  Every write script waits:
 *   acquire, raise and extend (a refusal is read at once: it is a no either
 *   way).  A release does not wait: see LEFT_BEHIND.  Without DURABLE the promoted master is, for
 *   the guards, a node restarted at the moment of the promotion (upat, the
 *   earliest moment a client can first see it: dating it at a later first
 *   sight only makes it sit out longer); the grace flags apply to it.
 *
 * The epoch rule (DESIGN sec. 7), and the old rule (OLDRULE)
 *   Every event that may lose a granted key starts a new epoch of the node,
 *   and the node sits out the grace from it: a restart without persistence,
 *   a promotion (the failover and the fail-back alike), an eviction.  The
 *   guards date the epoch at the event itself, the earliest moment a client
 *   can see it: a client dates it no earlier (by uptime for a restart, at
 *   its first sight of the change of master_replid or evicted_keys
 *   otherwise), and a later date only makes the node sit out longer.  A
 *   persistent server's own restart starts no epoch: that is all that
 *   persistence covers.
 *   OLDRULE is the guard before issue 25 (node.go at 993bc3d): a persistent
 *   node votes whatever happened (no grace at all); an eviction is not seen;
 *   a restart is dated by uptime; and node 0's master is known to each
 *   client by run_id: every client met node 0's first master A (long up)
 *   before its attempt, a master new to the client and promoted (R, or A
 *   again after the client met R) is dated at the client's first sight, and
 *   a master met again under the same run_id keeps the date the client gave
 *   it, whatever happened to its role in between.
 *
 * The eviction (EVICT)
 *   One eviction, at any time t <= CRASH_BY, on any node holding a key: the
 *   lock key goes (volatile-* or allkeys-*: every lock key has a TTL), and,
 *   at the choice of the search, the fence register and the TTL register
 *   with it (allkeys-*, or a register with a TTL).  The node's clock and
 *   uptime stay.  An eviction that removes no key the model has is no event
 *   for the lock (the library may still make the node sit out: only safer).
 *
 * The fail-back (FAILBACK, with FAILOVER)
 *   After the failover the old master A is the replica of the promoted R:
 *   it resyncs in full, losing every write R does not have, so its copy is
 *   R's state at the promotion, and the replicate step copies R's later
 *   state as it did A's.  At most once, after the failover and at a time
 *   t <= CRASH_BY, A is promoted back (same address, same run_id): node 0
 *   keeps only what A's copy held, and R becomes A's replica (again a copy
 *   of the promoted state).  Not with DURABLE.
 *
 * Abstractions, and why they keep the property
 *   - Time is a global counter 0..TMAX that ticks by one; node clocks run at
 *     the true rate plus a fixed offset (0, or JMP after a jump).  The drift
 *     budget (TTL*0.01 + 2ms) becomes one tick: validity ends at
 *     t0 + TTL - 1 while a key set at or after t0 lives until at least
 *     t0 + TTL on a node whose clock did not jump.  Any drift within the
 *     budget can only move the node's expiry later than that bound, which
 *     is the case we check with equality (the tightest case).
 *   - Validity is the bounded counter "deadline"; a client believes it holds
 *     the lock exactly while now < deadline.  Exclusion is asserted at every
 *     grant and every extend: time only grows, so those are the only steps
 *     where two valid holders can first appear.  An extension that counts
 *     also asserts that nobody was granted the lock since its holder's
 *     grant: the holder held it without a gap (an extension across another
 *     holder's tenure breaks no "two valid at once" check, yet the two
 *     holders' work overlaps).
 *   - Owner values: one attempt per client, so the client id is a value no
 *     other attempt ever uses (DESIGN sec. 1: new value per attempt).
 *   - Proposals p = max(last token + 1, client wall clock), with the client
 *     clocks skewed (A ahead by SKEW) so that the slow path is reachable.
 *   - Messages are delayed but never lost: a lost request is a request
 *     delayed past every decision, which the interleaving already covers;
 *     an error reply counts as a refusal, which only removes votes.
 *   - A node runs each script atomically (Redis runs Lua atomically) and
 *     expires keys lazily at the start of each script, which is what a
 *     reader of the key can observe.
 *   - The guards are evaluated when the client counts a reply, from what the
 *     node reports (uptime, clock) at that moment.
 *   - A restart is immediate (down time 0): the worst case for a node that
 *     lost its data.  A clock jump is forward and stays (a backward step
 *     only makes keys live longer; a step forward and back between two
 *     probes is left to the chaos suite).
 *   - A release to a node with nothing in flight runs at once; one owed to
 *     a call in flight is a delayed step of its own.  A delayed release only
 *     keeps our key longer, which can only refuse others.
 *   - Keys expire eagerly at each tick (same observations as Redis' lazy
 *     expiry) and finished clients clear their variables, so that equal
 *     situations are equal states.
 *   - Bounds (verify.sh): TMAX 2 to 5 ticks, the crash at t <= CRASH_BY in
 *     the safe restart runs (a later crash leaves no time in the horizon
 *     for the grace to end, and the sit-out itself is checked either way).
 */

#ifndef NN
#define NN 3
#endif
#define QQ (NN/2+1)
#ifndef TMAX
#define TMAX 5
#endif
#ifndef TTL_A
#define TTL_A 3
#endif
#ifndef TTL_B
#define TTL_B 2
#endif
#ifndef SKEW
#define SKEW 2
#endif
#ifndef CRASH_BY
#define CRASH_BY TMAX   /* latest time of the crash */
#endif

/* FSYNC: node 0 runs appendfsync everysec, and its crash is a kill -9 and
   a restart on its own disk (docs/PROTOCOL.md sec. 13).  Its AOF on disk
   holds the node's state as of its last fsync, which is a prefix of its
   write stream: exactly what node 0's replica is in the failover model, so
   FSYNC reuses it, with the replica read as the disk, the replicate step as
   an fsync (enabled at any moment: everysec's timing is the search's
   choice) and the promotion as the crash and restart that loads the disk.
   The restart is of a persistent server: it starts no epoch (PROMOTED), so
   the node votes again at once, whatever the grace.  Its votes count only
   once an fsync came after their write (WAITAOF 1 0, the DURABLE step);
   FSYNC_LATE counts them at once, before the fsync: the counterexample.
   (The model's restart also empties R, the worst case, as the promotion
   does: in the code the vote's WAITAOF covers the raise before it.) */
#ifdef FSYNC
#define FAILOVER
#ifndef FSYNC_LATE
#define DURABLE
#endif
#if defined(FAILBACK) || defined(OLDRULE) || defined(CRASH)
#error "FSYNC is its own fault: not with FAILBACK, OLDRULE or CRASH"
#endif
#endif
#ifndef JMP
#define JMP 3
#endif
#define INF 255
#ifdef EXTEND_A
#define EXTENDER && c == 0   /* only client A (the longer TTL) extends */
#else
#define EXTENDER
#endif

/* request kinds */
#define ACQ 1
#define EXT 2
#define RAI 3
#define REL 4

/* ---- nodes ---- */
byte now;
byte owner[NN];     /* 0: no key, else the client id + 1 */
byte kexp[NN];      /* node-clock time at which the key expires */
byte F[NN];         /* fence register */
byte R[NN];         /* largest TTL in use */
byte off[NN];       /* node clock = now + off */
byte upat[NN];      /* time of the last restart */
bool restarted[NN]; /* a new epoch started at upat (the data may have been lost then) */
bool crashed;       /* the one crash has happened */
bool jumped;        /* the one jump has happened */
#ifdef FAILOVER
/* node 0's replica: a copy of the master's state at some earlier moment */
byte rowner;
byte rkexp;
byte rF;
bool hasReplica = 1;  /* until the failover promoted it */
byte revOwner;        /* the key the promotion put back on node 0, */
byte revExp;          /* with its expiry (see LEFT_BEHIND) */
bool acked[2] = 1;    /* 0: client c's write to node 0 is not yet on the replica */
#define rlive (rowner != 0 && now + off[0] < rkexp)
#ifdef OLDRULE
byte msrv;            /* node 0's master: 0 A (the first), 1 R (the replica promoted) */
#define SETSRV(s) msrv = s
#else
#define SETSRV(s) skip
#endif
#ifdef FAILBACK
#if defined(DURABLE)
#error "FAILBACK is not modelled with DURABLE"
#endif
#endif
#endif

/* ---- clients ---- */
bool held[2];       /* decided won, token fixed */
#ifdef EXTEND
bool grantedSince[2]; /* another client was granted the lock after this one's grant */
#endif
byte dl[2];         /* validity deadline: valid while now < dl */
byte tok[2];
byte lastGranted;   /* highest token granted so far */
byte finished;

/* ---- the fenced resource ---- */
byte resHigh;       /* highest token the resource accepted */
byte wpend[2];      /* a write in flight with this token, 0: none */

#define nclk(n) (now + off[n])
#define live(n) (owner[n] != 0 && nclk(n) < kexp[n])

inline expire(n) {
  if
  :: owner[n] != 0 && nclk(n) >= kexp[n] -> owner[n] = 0; kexp[n] = 0
  :: else -> skip
  fi
}

/* Mutual exclusion among clients that believe they are within validity.
   Time only grows and a deadline only moves at a grant or at an extend, so
   a state where two clients hold valid locks is first reached at one of
   those steps: the check runs there (cheaper than a monitor process). */
#define EXCLUSIVE (!(held[0] && now < dl[0] && held[1] && now < dl[1]))

/* time; keys expire eagerly at each tick so that equal situations are equal
   states (a reader sees the same as with Redis' lazy expiry) */
#ifdef FAILOVER
/* The replica matters only through a promotion: past the last moment of
   one (CRASH_BY) it is forgotten at the tick, so that equal situations are
   equal states.  With durable votes node 0's later votes then count without
   waiting (no promotion can lose them any more), and a WAIT still in flight
   times out (its vote does not count). */
#define REPLICA_GONE (now > CRASH_BY)
/* the replica reads keys by the same absolute expiry (eagerly, as the masters) */
#define EXPIRE_REPLICA \
  if \
  :: REPLICA_GONE || (rowner != 0 && !rlive) -> rowner = 0; rkexp = 0; if :: REPLICA_GONE -> rF = 0 :: else -> skip fi \
  :: else -> skip \
  fi
#else
#define EXPIRE_REPLICA skip
#endif

active proctype ticker() {
  byte n;
  do
  :: atomic { now < TMAX && finished < 2 -> now++; for (n : 0 .. NN-1) { expire(n) }; n = 0; EXPIRE_REPLICA }
  :: atomic { now >= TMAX || finished == 2 -> break }
  od
}

#ifdef FAILOVER
/* a promotion of node 0's replica (server s: see msrv).  With FAILBACK the
   old master stays as the new one's replica and resyncs in full: its copy
   is the promoted state. */
#ifdef FAILBACK
#define KEEP_REPLICA(s) rowner = owner[0]; rkexp = kexp[0]; rF = F[0]
#else
#define KEEP_REPLICA(s) rowner = 0; rkexp = 0; rF = 0; hasReplica = 0
#endif
#ifdef OLDRULE
#define PROMOTED skip     /* the old rule dates it by the client's memory (guards) */
#elif defined(FSYNC)
#define PROMOTED skip     /* a persistent server's own restart: no new epoch */
#else
#define PROMOTED restarted[0] = 1; upat[0] = now    /* a new epoch */
#endif
#define PROMOTE(s) \
  owner[0] = rowner; kexp[0] = rkexp; F[0] = rF; R[0] = 0; \
  revOwner = rowner; revExp = rkexp; \
  KEEP_REPLICA(s); SETSRV(s); PROMOTED
#endif

#if NN > 3
#define ANYKEY (owner[0] != 0 || owner[1] != 0 || owner[2] != 0 || owner[3] != 0 || owner[4] != 0)
#else
#define ANYKEY (owner[0] != 0 || owner[1] != 0 || owner[2] != 0)
#endif

active proctype faults() {
  byte n;
  if
  :: skip
#ifdef CRASH
  :: atomic {
       now <= CRASH_BY;
       select(n : 0 .. NN-1);
       crashed = 1;
#ifndef PERSIST
       restarted[n] = 1; upat[n] = now;   /* its own restart: an epoch only without persistence */
       owner[n] = 0; kexp[n] = 0; F[n] = 0; R[n] = 0;
#endif
     }
#endif
#ifdef EVICT
  /* the node evicts the lock key, and maybe the registers; it stays up */
  :: atomic {
       now <= CRASH_BY && ANYKEY ->
       if
       :: owner[0] != 0 -> n = 0
       :: owner[1] != 0 -> n = 1
       :: owner[2] != 0 -> n = 2
#if NN > 3
       :: owner[3] != 0 -> n = 3
       :: owner[4] != 0 -> n = 4
#endif
       fi;
       owner[n] = 0; kexp[n] = 0;
       if :: skip :: F[n] = 0; R[n] = 0 fi;
#ifndef OLDRULE
       restarted[n] = 1; upat[n] = now;   /* evicted_keys rose: a new epoch */
#endif
       n = 0
     }
#endif
#ifdef JUMP
  :: atomic { select(n : 0 .. NN-1); jumped = 1; off[n] = JMP }
#endif
#ifdef FAILOVER
  /* the replica is promoted: node 0 keeps only what the replica held */
  :: atomic { now <= CRASH_BY; PROMOTE(1) }
#ifdef FAILBACK
     /* and maybe the old master, resynced, is promoted back */
     ; if
     :: skip
     :: atomic { now <= CRASH_BY; PROMOTE(0) }
     fi
#endif
#endif
  fi
}

#ifdef FAILOVER
/* asynchronous replication: the replica catches up with the master at any
   moment (so it holds a prefix of the writes), and acknowledges every write
   made so far to the WAITs in flight */
active proctype replication() {
  do
  :: atomic {
       hasReplica && !REPLICA_GONE && (!acked[0] || !acked[1] ||
                      !(rowner == owner[0] && rkexp == kexp[0] && rF == F[0])) ->
       rowner = owner[0]; rkexp = kexp[0]; rF = F[0];
       acked[0] = 1; acked[1] = 1
     }
  :: atomic { !hasReplica || finished == 2 || REPLICA_GONE -> break }
  od
}
#endif

/* the fenced resource: accept a write only with a token >= the highest */
inline resource(c) {
  atomic {
    if
    :: wpend[c] >= resHigh ->
         assert(wpend[c] >= resHigh);  /* never a lower token after a higher */
         resHigh = wpend[c]
    :: else -> skip                    /* stale token refused */
    fi;
    wpend[c] = 0
  }
}

/* a node runs the script of the request in flight to it (Redis runs Lua atomically) */
inline deliver(i) {
  expire(i);
  if
  :: pend[i] == ACQ ->                       /* acquire.lua */
#ifdef FLEET_SCRIPT
     if :: R[i] < ttl -> R[i] = ttl :: else -> skip fi;
#endif
     if
     :: owner[i] == 0 ->
        owner[i] = me; kexp[i] = nclk(i) + ttl; rval = F[i];
        if :: p > F[i] -> F[i] = p :: else -> skip fi;
        rep[i] = 1
     :: else -> rep[i] = 2
     fi
  :: pend[i] == RAI ->                       /* raise.lua */
     if
     :: owner[i] == me && F[i] <= token -> F[i] = token; rep[i] = 1
     :: else -> rep[i] = 2
     fi
  :: pend[i] == EXT ->                       /* extend.lua, with the repair */
     if
     :: owner[i] == me -> kexp[i] = nclk(i) + ttl; rep[i] = 1
     :: owner[i] != 0 -> rep[i] = 2
     :: else ->
        if
#ifndef NOFENCE
        :: F[i] > token -> rep[i] = 2
#endif
        :: else -> F[i] = token; owner[i] = me; kexp[i] = nclk(i) + ttl; rep[i] = 1
        fi
     fi
  fi;
  pend[i] = 0
}

/* the restart grace in force for node i (sets g) */
#if defined(NOGRACE)
#define GRACE(i) g = 0
#elif defined(OWN)
#define GRACE(i) g = ttl               /* old bug: this client's largest TTL only */
#else
#define GRACE(i) \
  g = ttl;                             /* fleet-wide: R of the other nodes */ \
  for (j : 0 .. NN-1) { if :: j != i && R[j] > g -> g = R[j] :: else -> skip fi }
#endif

/* the epoch rule: a node sits out the grace from the start of its epoch */
#define SIT_OUT(i) \
  if \
  :: restarted[i] -> GRACE(i); if :: g > 0 && now - upat[i] <= g -> ok = 0 :: else -> skip fi \
  :: else -> skip \
  fi

/* the node guards: does node i's vote count now? (sets ok) */
inline guards(i) {
#ifdef CLOCK_OWN
  /* compare with this client's own earlier sample only */
  if
  :: hist[i] == INF -> hist[i] = off[i]
  :: hist[i] != INF && hist[i] != off[i] -> excl[i] = 1
  :: else -> skip
  fi;
  if :: excl[i] -> ok = 0 :: else -> skip fi;
#endif
#ifdef CLOCK_CROSS
  /* compare with the other nodes' clocks: sit out unless a quorum agrees */
  g = 0;
  for (j : 0 .. NN-1) { if :: off[j] == off[i] -> g++ :: else -> skip fi }
  if :: g < QQ -> ok = 0 :: else -> skip fi;
#endif
#if defined(OLDRULE) && defined(PERSIST)
  skip                             /* old rule: a persistent node always votes */
#elif defined(OLDRULE) && defined(FAILOVER)
  if
  :: i == 0 ->                     /* old rule: node 0's master as this client knows it */
     if
     :: met0 != msrv -> met0 = msrv; d0 = now  /* new to us and promoted: dated at first sight */
     :: else -> skip                           /* met again: keeps its date */
     fi;
     if :: d0 != INF -> GRACE(i); if :: g > 0 && now - d0 <= g -> ok = 0 :: else -> skip fi :: else -> skip fi
  :: else -> SIT_OUT(i)
  fi
#else
  SIT_OUT(i)
#endif
}

inline startRelease() {
  phase = 4;
  for (j : 0 .. NN-1) {
    if
#ifdef UNORDERED
    :: true -> relpend[j] = 1       /* old bug: release overtakes calls in flight */
#else
    :: pend[j] == 0 && rep[j] == 0 ->  /* nothing in flight: released at once */
       expire(j); if :: owner[j] == me -> owner[j] = 0; kexp[j] = 0 :: else -> skip fi
    :: else -> relOwed[j] = 1       /* sent by the reply of the call in flight */
#endif
    fi
  }
}

inline grant() {
  assert(token > lastGranted);      /* tokens strictly increase in grant order */
  lastGranted = token;
  held[c] = 1; dl[c] = t0 + ttl - 1; phase = 3;
#ifdef EXTEND
  grantedSince[c] = 0;
  if :: held[1 - c] -> grantedSince[1 - c] = 1 :: else -> skip fi;
#endif
  assert(EXCLUSIVE)
}

/* what can happen between this client and node k: its request runs there
   and the reply is read (one step), or its release runs there */
#define NODE_STEPS(k) \
     atomic { pend[k] != 0 -> deliver(k); AWAIT_OR_READ(k) } \
  :: atomic { relpend[k] -> expire(k); if :: owner[k] == me -> owner[k] = 0; kexp[k] = 0 :: else -> skip fi; relpend[k] = 0 }

/* DURABLE: a yes of node 0 while it has a replica is read only with WAIT's
   answer, a step of its own (WAIT_READ) */
#if defined(FAILOVER) && defined(DURABLE)
#define AWAIT_OR_READ(k) \
  if \
  :: k == 0 && hasReplica && !REPLICA_GONE && rep[k] == 1 -> acked[c] = 0; waiting = 1; rval0 = rval; rval = 0 \
  :: else -> readReply(k) \
  fi
#define WAIT_READ :: atomic { waiting -> rval = rval0; rval0 = 0; readReply(0) }
#else
#define AWAIT_OR_READ(k) readReply(k)
#define WAIT_READ
#endif

/* A release is not awaited by WAIT (nor need it be): a promotion may bring
   back a key its owner had released, or one whose vote did not count and
   which the sweep had deleted.  That key keeps its absolute expiry, so it
   lasts at most its TTL; it is the one key the end state may still hold. */
#ifdef FAILOVER
#define LEFT_BEHIND(j) (j == 0 && owner[0] == revOwner && kexp[0] == revExp)
#else
#define LEFT_BEHIND(j) 0
#endif

#define BUSY(k) (pend[k] != 0 || rep[k] != 0 || relpend[k] || relOwed[k])
#if NN > 3
#define ALLIDLE (!BUSY(0) && !BUSY(1) && !BUSY(2) && !BUSY(3) && !BUSY(4))
#else
#define ALLIDLE (!BUSY(0) && !BUSY(1) && !BUSY(2))
#endif

/* the client reads node i's reply and counts it */
inline readReply(i) {
  ok = (rep[i] == 1);
  guards(i);
#if defined(FAILOVER) && defined(DURABLE)
  /* WAIT's answer: the vote counts only if the replica acknowledged it */
  if :: i == 0 && waiting -> ok = ok && acked[c]; acked[c] = 1; waiting = 0 :: else -> skip fi;
#endif
  if
  :: phase == 0 ->
     if
     :: ok -> yes++; if :: rval > maxf -> maxf = rval :: else -> skip fi
     :: else -> no++
     fi
  :: phase == 1 || phase == 2 -> if :: ok -> yes++ :: else -> no++ fi
  :: else -> skip                                               /* a straggler */
  fi;
  rep[i] = 0; ok = 0; g = 0; j = 0; rval = 0;
  if :: relOwed[i] -> relOwed[i] = 0; relpend[i] = 1 :: else -> skip fi
}

proctype client(byte c; byte ttl; byte skew) {
  byte me = c + 1;
  byte pend[NN];    /* request in flight to node i */
  byte rep[NN];     /* reply waiting: 0 none, 1 yes, 2 no */
  byte rval;        /* fence register before (acquire reply) */
  bool relpend[NN]; /* release in flight to node i */
  bool relOwed[NN]; /* release asked, waits for the call in flight */
  byte hist[NN];    /* CLOCK_OWN: node clock offset first seen */
  bool excl[NN];    /* CLOCK_OWN: a jump was seen, the node sits out */
  byte phase;       /* 0 acquire, 1 raise, 2 extend, 3 hold, 4 release */
  byte yes, no, maxf, p, t0, token, ext, i, j, g;
  bool ok, wrote;
#if defined(OLDRULE) && defined(FAILOVER)
  byte met0;        /* node 0's master this client met last (msrv; A, long up, before the attempt) */
  byte d0 = INF;    /* the date it gave it (INF: long up, no grace) */
#endif
#if defined(FAILOVER) && defined(DURABLE)
  bool waiting;     /* node 0's yes waits for WAIT's answer */
  byte rval0;       /* and its fence register value, read with it */
#endif

  for (i : 0 .. NN-1) { hist[i] = INF }
  i = 0;

#ifdef FLEET_PRE
  /* raise R on every node before the first acquire is sent */
  atomic { for (j : 0 .. NN-1) { if :: R[j] < ttl -> R[j] = ttl :: else -> skip fi } }
#endif

  atomic {
    t0 = now; p = now + skew + 1;
    for (j : 0 .. NN-1) { pend[j] = ACQ }
  }

  do
  /* the network: any request may be delivered, any reply read, in any order */
  :: NODE_STEPS(0)
  :: NODE_STEPS(1)
  :: NODE_STEPS(2)
  WAIT_READ
#if NN > 3
  :: NODE_STEPS(3)
  :: NODE_STEPS(4)
#endif
  /* decisions */
  :: atomic {
       phase == 0 && yes >= QQ ->
       if
       :: now >= t0 + ttl - 1 -> startRelease()               /* validity <= 0 */
       :: else ->
          if
          :: p > maxf -> token = p; grant()                  /* fast path */
          :: else ->                                         /* slow path: raise */
             token = maxf + 1; yes = 0; no = 0; phase = 1;
             for (j : 0 .. NN-1) { if :: pend[j] == 0 && rep[j] == 0 -> pend[j] = RAI :: else -> no++ fi }
          fi
       fi
     }
  :: atomic { phase == 0 && no > NN - QQ -> startRelease() }
  :: atomic {
       phase == 1 && yes >= QQ ->
       if :: now >= t0 + ttl - 1 -> startRelease() :: else -> grant() fi
     }
  :: atomic { phase == 1 && no > NN - QQ -> startRelease() }
  :: atomic {
       phase == 2 && yes >= QQ ->
       if
#ifdef LATE_EXTEND
       :: now < t0 + ttl - 1 ->                 /* old bug: answers after the deadline count */
#else
       :: now < dl[c] && now < t0 + ttl - 1 ->  /* the quorum answered within the validity */
#endif
          dl[c] = t0 + ttl - 1;
#ifdef EXTEND
          assert(!grantedSince[c])    /* held without a gap: nobody was granted since our grant */
#endif
       :: else -> skip                /* too late: lost, the deadline stays passed */
       fi;
       phase = 3; assert(EXCLUSIVE)
     }
  :: atomic { phase == 2 && no > NN - QQ -> phase = 3 }          /* extend failed: deadline unchanged */
  /* holding: write to the resource (the write may arrive much later), extend, release */
#ifdef WRITES
  :: atomic { phase == 3 && wpend[c] == 0 && !wrote -> wpend[c] = token; wrote = 1 }
  :: atomic { wpend[c] != 0 -> resource(c) }
#endif
#ifdef EXTEND
  :: atomic {
       phase == 3 && ext == 0 && now < dl[c] EXTENDER ->
       ext = 1; phase = 2; yes = 0; no = 0; t0 = now;
       for (j : 0 .. NN-1) { if :: pend[j] == 0 && rep[j] == 0 -> pend[j] = EXT :: else -> no++ fi }
     }
#endif
  :: atomic { phase == 3 && wpend[c] == 0 -> held[c] = 0; startRelease() }
  /* done when every release went out and every call answered */
  :: atomic {
       phase == 4 && wpend[c] == 0 && ALLIDLE ->
       finished++;
       if
       :: finished == 2 ->   /* every client stopped: no key left behind */
          for (j : 0 .. NN-1) { expire(j); assert(owner[j] == 0 || LEFT_BEHIND(j)) }
       :: else -> skip
       fi;
       held[c] = 0; dl[c] = 0; tok[c] = 0;
#ifdef EXTEND
       grantedSince[c] = 0;
#endif
       phase = 0; yes = 0; no = 0; maxf = 0; p = 0; t0 = 0; token = 0; ext = 0; i = 0; j = 0; wrote = 0;
#if defined(OLDRULE) && defined(FAILOVER)
       met0 = 0; d0 = 0;
#endif
       break
     }
  od
}

init {
  atomic {
    run client(0, TTL_A, SKEW);
    run client(1, TTL_B, 0)
  }
}
