/*
 * fair.pml -- the fair lock with direct hand-off (DESIGN sec. 5,
 * lua/fair_queue.lua and fair.go of the fair-lock branch) as SPIN sees it.
 *
 * What is modelled
 *   3 nodes, each with the lock key (owner, expiry in node-clock time), the
 *   fence register F, the grant record (claimed bit, fence value before the
 *   grant) and a queue of waiters ordered by ticket, each entry with its
 *   expiry.  Every script first drops the expired entries, does its part,
 *   then applies the node's rule (settle): a free key goes to the live head;
 *   a grant nobody pinned yet moves to the head when the head is someone
 *   else, or is deleted when nobody waits.  Giving the key sets it with the
 *   waiter's TTL, records an unpinned grant and publishes a notice; it
 *   leaves F alone.
 *   2 clients (TTL_A long, TTL_B short, A's clock SKEW ticks ahead, so A's
 *   ticket and proposal are higher for the same start time).  A client:
 *   wait rounds (join or refresh its entry on every node; a yes reply or a
 *   notice read later tells it a node granted it the key), a claim round
 *   once it counts grants from a quorum (extend the key to its TTL where it
 *   is ours, pin the grant with the round's number, read F and raise it to
 *   the round's own time-based proposal; leave the queue either way),
 *   validity dated from that round's start, the token by the acquire's fast
 *   path (proposal above every value read) or slow path (raise to max + 1
 *   on a quorum), then the release, which hands the key to the head of the
 *   queue on each node.  A failed claim is followed by a wait round when
 *   the bound WR allows one, else by the cleanup; so is a waiter out of
 *   claim rounds.  A wait call carries the number of the waiter's last
 *   claim round that fell short, and un-pins our grant only if its pin is
 *   no newer (a late wait leaves a newer pin alone and registers nothing).
 *   With -DEXTEND a holder may extend once (fair_extend.lua: renew our key,
 *   pin it for good, leave the queue; repair a missing key), its validity
 *   then dated from the extend's start.
 *   With -DLATE client A may leave one wait call of a round in flight past
 *   its timeout: the client counts no answer and goes on (its claim may
 *   reach that node first), the node runs the call at any later step.
 *   With -DSKIP a claim round may skip any node (it sits out at that
 *   moment): the call is not sent.
 *   A waiter may give up at any time (cleanup: the release script on every
 *   node, after its calls in flight there answered) or, with -DDIE, die:
 *   stop without cleanup, its entries and any grant left to expire.
 *
 * Properties (assertions)
 *   - exclusion: no two clients believe they hold within validity (checked
 *     at each successful claim, the only step where a validity starts);
 *   - tokens strictly increase in grant order, across hand-offs;
 *   - no grant after cleanup: a node never gives its key to a waiter whose
 *     cleanup already ran there;
 *   - a dead waiter gets no grant later than one entry lifetime (ETTL)
 *     after its last call on that node;
 *   - end state (every client stopped): no key left on any node except one
 *     given to a dead waiter, and no queue entry of a waiter that cleaned up;
 *   - a key a holder relies on never moves: no give or settle deletion on a
 *     node whose key said yes to a claim or extend round that made its
 *     owner hold (the premise of the validity argument), until the key
 *     expires or its owner releases it.
 *
 * Abstractions (beyond those of redlock.pml, whose header explains time,
 * drift, messages and atomic scripts; they carry over unchanged)
 *   - Tickets: start time on the client's clock times 2 plus the client id,
 *     so they are distinct (the random tie-break) and ordered the same way
 *     on every node.  Proposals: the claim round's start on the client's
 *     clock + 1.
 *   - A notice ("granted") is a flag the node sets and the client reads at
 *     any later step, or never: arbitrary pub/sub delay and loss.
 *   - A client's knowledge of its grants is only the trigger of a claim; the
 *     claim itself checks ownership on the node, so a wrong belief costs a
 *     failed claim, never safety.
 *   - One client's requests of one round reach the nodes in node order
 *     (0, 1, 2); the two clients' requests still interleave in every order
 *     on every node, so every split of votes between them is reachable.
 *     What is lost is a client whose own requests arrive in another order:
 *     with symmetric nodes (no faults here) that differs from a reachable
 *     state only by renaming the nodes when the other client has no call
 *     in flight; with both in flight it is a restriction (a search without
 *     it found nothing either at 12M states but does not finish in time).
 *   - A claim round starts only when the waiter has no call in flight (the
 *     library orders a node's calls one after the other), at any moment:
 *     the trigger (a grant notice, a yes reply) is left free, which covers
 *     every arrival time and loss of the notices.
 *   - Bounded effort: at most WR wait rounds (the first included) and CR
 *     claim rounds per client; a waiter whose entry expires because it
 *     stopped refreshing is a waiter paused for that long.
 *   - The checks are split to keep each search small: fair-handoff runs
 *     fencing (F, tokens, slow path) with waiters that do not give up early
 *     (a failed claim still ends in the cleanup); fair-cleanup (-DGIVEUP
 *     -DNOFENCE -DDIE) lets a waiter give up or die at any moment and leaves
 *     the fence register out (it does not decide who holds the key).
 *   - A round's call to a node that still has a call of ours in flight
 *     counts as a refusal (the library queues it behind; the model drops
 *     votes, which only makes claims fail more often).
 *   - Entry lifetime ETTL = the waiter's TTL (fairEntryTTL); queue entries
 *     and keys expire eagerly at each tick, which a script observes the same
 *     way as the lazy removal at its start.
 *   - No node faults here: crash, restart grace and clock guards act on the
 *     lock key exactly as for the mutex (redlock.pml); the queue only
 *     orders the waiters, and a node that lost it only serves them out of
 *     order (DESIGN sec. 5).
 *
 * Unsafe variants, each must be caught:
 *   DATE_GRANT  no extend in the claim; validity dated from the moment the
 *               last grant notice arrived (any time between the latest
 *               grant made to the client and the claim);
 *   NOEXPIRY    queue entries never expire (a dead waiter keeps its place);
 *   UNORDERED   the cleanup may overtake a wait call in flight;
 *   UNPIN_ANY   a wait un-pins our grant whatever round pinned it (the
 *               claimed flag before round numbers): with LATE, a late wait
 *               makes a claimed key movable;
 *   EXT_UNPINNED  the extend renews our key without pinning it (the
 *               mutex's extend.lua): with SKIP, a key an extend counted
 *               moves to an earlier ticket.
 */

#define NN 3
#define NC 2
#define QQ (NN/2+1)
#ifndef TMAX
#define TMAX 3
#endif
#ifndef TTL_A
#define TTL_A 3
#endif
#ifndef TTL_B
#define TTL_B 2
#endif
#ifndef SKEW
#define SKEW 1
#endif
#ifndef WR
#define WR 1
#endif
#ifndef CR
#define CR 1
#endif
#ifndef XR
#define XR 1
#endif
#define HELD 255     /* pinned by the holder's extend (or a repair): no wait undoes it */

/* request kinds */
#define WAIT 1
#define CLAIM 2
#define RAI 3
#define EXT 4
#define TAKEREQ 5

/* the claim rounds' requests: a claim, or with -DTAKE a take (a wait that
   claims the key where it is ours after it; the client's first round is one) */
#ifdef TAKE
#define CLAIMKIND TAKEREQ
#else
#define CLAIMKIND CLAIM
#endif

#define E(i, c) ((i)*NC + (c))


/* ---- nodes ---- */
byte now;
byte owner[NN];      /* 0: no key, else client id + 1 */
byte kexp[NN];       /* node time the key expires */
byte F[NN];          /* fence register */
byte gcl[NN];        /* the grant record: 0 movable, else the claim round that pinned it, or HELD */
bool relied[NN];     /* observer: a holder counted this key (claim or extend) */
bool inq[NN*NC];     /* client c waits in node i's queue */
byte eexp[NN*NC];    /* node time its entry expires */
#ifdef DATE_GRANT
byte glast[NC];      /* time of the latest grant made to c (the notice is sent then) */
#endif

/* ---- what the nodes know of each waiter (its settings hash) ---- */
byte wttl[NC];
byte ticket[NC];

/* ---- observer ---- */
bool held[NC];
byte dl[NC];
byte lastGranted;
byte finished;
bool cleaned[NN*NC]; /* c's cleanup ran on node i */
bool dead[NC];
byte lastCall[NN*NC];/* node time of c's last call on node i */

#define nclk(n) (now)
#ifdef NOFENCE
#define TOKEN_ORDER skip
#else
#define TOKEN_ORDER assert(token > lastGranted); lastGranted = token   /* tokens strictly increase in grant order */
#endif
#define EXCLUSIVE (!(held[0] && now < dl[0] && held[1] && now < dl[1]))
/* the nodes whose yes made the holder hold, and still hold its key: those
   keys must not move (one that already expired is DATE_GRANT's fault, which
   the exclusion check catches).  A claim's yes nodes are those its round
   pinned (replies are read in the step that delivers them, and nothing of
   ours un-pins them before the decision); an extend's are recorded in ybits. */
#ifndef NORELIED
#define RELY_CLAIM for (j : 0 .. NN-1) { if :: owner[j] == me && gcl[j] == claims -> relied[j] = 1 :: else -> skip fi }; j = 0
#define RELY(bits) for (j : 0 .. NN-1) { if :: (bits >> j) & 1 && owner[j] == me -> relied[j] = 1 :: else -> skip fi }; j = 0
#else
#define RELY_CLAIM skip   /* the check left out to keep the search small */
#define RELY(bits) skip
#endif

inline expireKey(n) {
  if
  :: owner[n] != 0 && nclk(n) >= kexp[n] -> owner[n] = 0; kexp[n] = 0; gcl[n] = 0; relied[n] = 0
  :: else -> skip
  fi
}

inline forget(n, w) { inq[E(n, w)] = 0; eexp[E(n, w)] = 0 }

inline expireQueue(n) {
#ifndef NOEXPIRY
  for (x : 0 .. NC-1) {
    if :: inq[E(n, x)] && nclk(n) >= eexp[E(n, x)] -> forget(n, x) :: else -> skip fi
  }
  x = 0
#else
  skip
#endif
}

active proctype ticker() {
  byte n, x;
  do
  :: atomic {
       now < TMAX && finished < NC -> now++;
       for (n : 0 .. NN-1) { expireKey(n); expireQueue(n) };
       n = 0
     }
  :: atomic { now >= TMAX || finished == NC -> break }
  od
}

/* give node n's key to waiter w (fair_queue.lua give) */
inline give(n, w) {
  assert(!cleaned[E(n, w)]);                    /* no grant after cleanup */
  assert(!dead[w] || nclk(n) < lastCall[E(n, w)] + wttl[w]);  /* dead: within one entry lifetime */
  assert(!relied[n]);                           /* a key a holder relies on never moves */
  owner[n] = w + 1; kexp[n] = nclk(n) + wttl[w];
  gcl[n] = 0;
#ifdef DATE_GRANT
  glast[w] = now
#else
  skip
#endif
}

/* the head of node n's queue, NC if empty */
inline head(n) {
  h = NC;
  for (x : 0 .. NC-1) {
    if
    :: inq[E(n, x)] && (h == NC || ticket[x] < ticket[h]) -> h = x
    :: else -> skip
    fi
  }
  x = 0
}

/* the node's rule (fair_queue.lua settle) */
inline settle(n) {
  head(n);
  if
  :: owner[n] == 0 -> if :: h < NC -> give(n, h) :: else -> skip fi
  :: owner[n] != 0 && !gcl[n] && owner[n] != h + 1 ->
     if
     :: h < NC -> give(n, h)
     :: else -> assert(!relied[n]); owner[n] = 0; kexp[n] = 0; gcl[n] = 0
     fi
  :: else -> skip
  fi;
  h = 0
}

/* the wait script on node i for client c, carrying wf, the last claim round
   of c that fell short; rw := 1 if the key is ours after it, 3 if a newer
   pin of ours stands (a late call: it changes nothing), else 2 */
inline waitScript(i, wf) {
  if
#ifdef UNPIN_ANY
  :: owner[i] == me -> gcl[i] = 0; rw = 0
#else
  :: owner[i] == me && gcl[i] != 0 && (gcl[i] == HELD || gcl[i] > wf) -> rw = 3  /* late: a newer pin stands */
  :: owner[i] == me && gcl[i] != 0 && gcl[i] != HELD && gcl[i] <= wf -> gcl[i] = 0; rw = 0
#endif
  :: else -> rw = 0
  fi;
  if
  :: rw == 0 ->
     inq[E(i, c)] = 1; eexp[E(i, c)] = nclk(i) + wttl[c];
     settle(i);
     if :: owner[i] == me -> rw = 1 :: else -> rw = 2 fi
  :: else -> skip
  fi
}

/* the claim step on node i, whose key is ours: extend it from now, pin it
   with round r (max: a later round's or the extend's pin stays), raise F
   to the proposal, leave the queue */
inline claimStep(i, r) {
#ifndef DATE_GRANT
  kexp[i] = nclk(i) + ttl;
#endif
  if :: gcl[i] != HELD && gcl[i] < r -> gcl[i] = r :: else -> skip fi;
#ifndef NOFENCE
  rval = F[i]; if :: prop > F[i] -> F[i] = prop :: else -> skip fi;
#endif
  forget(i, c)
}

/* node i runs client c's request in flight (one atomic script) */
inline deliver(i) {
  expireKey(i); expireQueue(i);
#ifdef DIE
  lastCall[E(i, c)] = nclk(i);
#endif
  kind = pend[i];
  if
  :: pend[i] == WAIT -> waitScript(i, failedR); if :: rw == 3 -> rep[i] = 1 :: else -> rep[i] = rw fi; rw = 0
  :: pend[i] == CLAIM ->
     if
     :: owner[i] == me -> claimStep(i, claims); rep[i] = 1
     :: else -> forget(i, c); settle(i); rep[i] = 2   /* not ours: leave this queue too */
     fi
  :: pend[i] == TAKEREQ ->                          /* not ours: stays queued */
     waitScript(i, failedR);
     if
     :: rw == 1 && owner[i] == me -> claimStep(i, claims); rep[i] = 1
     :: rw == 3 -> rep[i] = 1
     :: else -> rep[i] = 2
     fi;
     rw = 0
  :: pend[i] == EXT ->                              /* fair_extend.lua */
     if
     :: owner[i] == me ->
        kexp[i] = nclk(i) + ttl;
#ifndef EXT_UNPINNED
        gcl[i] = HELD;
#endif
        forget(i, c); rep[i] = 1
     :: owner[i] == 0 && F[i] <= token ->           /* repair: no grant record, never moved */
        owner[i] = me; kexp[i] = nclk(i) + ttl; gcl[i] = HELD;
        if :: token > F[i] -> F[i] = token :: else -> skip fi;
        forget(i, c); rep[i] = 1
     :: else -> rep[i] = 2
     fi
  :: pend[i] == RAI ->
     if
     :: owner[i] == me && F[i] <= token -> F[i] = token; rep[i] = 1
     :: else -> rep[i] = 2
     fi
  fi;
  pend[i] = 0
}

/* the release script (also the cleanup of a waiter that gave up) */
inline relScript(i) {
  expireKey(i); expireQueue(i);
  forget(i, c); cleaned[E(i, c)] = 1;
  if
  :: owner[i] != me -> settle(i)
  :: else -> owner[i] = 0; kexp[i] = 0; gcl[i] = 0; relied[i] = 0; settle(i)
  fi
}

/* the client reads node i's reply */
inline readReply(i) {
  if
  :: phase == 1 && kind == CLAIMKIND ->
     if
     :: rep[i] == 1 -> yes++; if :: rval > maxb -> maxb = rval :: else -> skip fi
     :: else -> no++
     fi
  :: phase == 7 && kind == EXT ->
     if :: rep[i] == 1 -> yes++; ybits = ybits | (1 << i) :: else -> no++ fi
  :: phase == 2 && kind == RAI -> if :: rep[i] == 1 -> yes++ :: else -> no++ fi
  :: else -> skip
  fi;
  rep[i] = 0; rval = 0; kind = 0;
  if :: relOwed[i] && latew[i] == 0 -> relOwed[i] = 0; relpend[i] = 1 :: else -> skip fi
}

#define NODE_STEPS(k) \
     atomic { pend[k] != 0 && BEFORE(k) -> deliver(k); readReply(k) } \
  :: atomic { relpend[k] -> relScript(k); relpend[k] = 0 } \
  :: atomic { latew[k] != 0 -> expireKey(k); expireQueue(k); waitScript(k, latew[k] - 1); LATE_TAKE(k); rw = 0; latew[k] = 0; \
              if :: relOwed[k] && pend[k] == 0 -> relOwed[k] = 0; relScript(k) :: else -> skip fi }

/* a late take claims the key if it is ours after its wait part, with its
   own round's number (fencing is off with LATE) */
#ifdef TAKE
#define LATE_TAKE(k) if :: latet[k] != 0 && rw == 1 && owner[k] == me -> claimStep(k, latet[k]) :: else -> skip fi; latet[k] = 0
#else
#define LATE_TAKE(k) skip
#endif

/* a client's requests of one round reach the nodes in node order (see the header) */
#define BEFORE(k) ((k) == 0 || pend[0] == 0 && ((k) == 1 || pend[1] == 0))
#define BUSY(k) (pend[k] != 0 || rep[k] != 0 || relpend[k] || relOwed[k])
#define ALLIDLE (!BUSY(0) && !BUSY(1) && !BUSY(2))
/* a call left in flight past its timeout is still ahead of our release there
   (the library sweeps the node once more after it); the next calls of the
   waiter there do not wait for it */
#define RELBUSY(k) (BUSY(k) || latew[k] != 0)
#define DONEIDLE (!RELBUSY(0) && !RELBUSY(1) && !RELBUSY(2))

/* a round: one request to every node with nothing of ours in flight; with
   LATE, client A may leave one wait call in flight past its timeout (no
   answer counted); with SKIP, a claim may skip a node (it sits out) */
inline sendAll(kind) {
  yes = 0; no = 0; ybits = 0;
  for (j : 0 .. NN-1) {
    if
    :: !BUSY(j) -> pend[j] = kind
#ifdef LATE
    :: !BUSY(j) && latew[j] == 0 && kind == WAIT && c == 0 && lateLeft > 0 -> lateLeft--; latew[j] = failedR + 1; no++
#ifdef TAKE
    :: !BUSY(j) && latew[j] == 0 && kind == TAKEREQ && c == 0 && lateLeft > 0 -> lateLeft--; latew[j] = failedR + 1; latet[j] = claims; no++
#endif
#endif
#ifdef SKIP
    :: !BUSY(j) && kind == CLAIMKIND -> no++
#endif
    :: BUSY(j) -> no++
    fi
  }
  j = 0
}

/* the release (phase 4) or the cleanup of a waiter that gives up (phase 5):
   to each node after the call in flight there answered */
inline startRelease(ph) {
  phase = ph;
  for (j : 0 .. NN-1) {
    if
#ifdef UNORDERED
    :: true -> relpend[j] = 1
#else
    :: !RELBUSY(j) -> relScript(j)
    :: else -> relOwed[j] = 1
#endif
    fi
  }
  j = 0
}

/* a failed claim: wait again if allowed (gives the grants back), else give up */
inline claimFailed() {
  if
  :: rounds < WR && ALLIDLE -> failedR = claims; rounds++; phase = 0; sendAll(WAIT)
  :: else -> startRelease(5)
  fi
}

proctype client(byte c; byte ttl; byte skew) {
  byte me = c + 1;
  byte pend[NN], rep[NN], rval, kind;  /* kind: of the request just answered */
  byte latew[NN];   /* a wait call left in flight: 1 + the failed round it carries; 0 none */
  byte latet[NN];   /* with TAKE: the round of the late call if it is a take; 0 a wait */
  bool relpend[NN], relOwed[NN];
  byte phase;       /* 0 wait, 1 claim, 2 raise, 3 hold, 4 release, 5 cleanup, 7 extend */
  byte yes, no, maxb, t0, token, rounds, claims, failedR, prop, j, x, h, rw, ybits, exts, lateLeft;

  atomic {
    wttl[c] = ttl; ticket[c] = (now + skew) * NC + c; lateLeft = 1;
#ifdef TAKE
    /* the first round is a take (rounds counts the waits after it) */
    claims = 1; phase = 1; t0 = now;
#ifndef NOFENCE
    prop = now + skew + 1;
#else
    prop = 1;
#endif
    sendAll(TAKEREQ)
#else
    rounds = 1; sendAll(WAIT)
#endif
  }

  do
  :: NODE_STEPS(0)
  :: NODE_STEPS(1)
  :: NODE_STEPS(2)
  /* waiting: refresh, claim, give up, die */
  :: atomic { phase == 0 && rounds < WR && ALLIDLE -> rounds++; sendAll(WAIT) }
  :: atomic {
       phase == 0 && claims < CR && ALLIDLE ->
       claims++; phase = 1; maxb = 0;
#ifdef DATE_GRANT
       select(t0 : glast[c] .. now);  /* unsafe: from when the last notice arrived */
#else
       t0 = now;            /* the claim round's start */
#endif
#ifndef NOFENCE
       prop = now + skew + 1;   /* the round's own time-based proposal */
#else
       prop = 1;                /* above every value read (0): the fast path, no raise round */
#endif
       sendAll(CLAIMKIND)
     }
#ifdef GIVEUP
  :: atomic { phase == 0 -> startRelease(5) }
#else
  :: atomic { phase == 0 && claims >= CR && ALLIDLE -> startRelease(5) }  /* out of effort: gives up */
#endif
#ifdef DIE
  :: atomic { phase == 0 && DONEIDLE -> dead[c] = 1; phase = 6 }
#endif
  /* claim and raise decisions */
  :: atomic {
       phase == 1 && yes >= QQ ->
       if
       :: now >= t0 + ttl - 1 -> claimFailed()                  /* validity <= 0 */
       :: else ->
          if
          :: prop > maxb -> token = prop; phase = 3              /* fast path */
          :: else -> token = maxb + 1; phase = 2; sendAll(RAI)   /* slow path: raise */
          fi
       fi;
       if
       :: phase == 3 ->
          TOKEN_ORDER;
          held[c] = 1; dl[c] = t0 + ttl - 1; RELY_CLAIM;
          assert(EXCLUSIVE)
       :: else -> skip
       fi;
     }
  :: atomic { phase == 1 && no > NN - QQ -> claimFailed() }
  :: atomic {
       phase == 2 && yes >= QQ ->
       if
       :: now >= t0 + ttl - 1 -> claimFailed()
       :: else ->
          TOKEN_ORDER;
          held[c] = 1; dl[c] = t0 + ttl - 1; phase = 3; RELY_CLAIM;
          assert(EXCLUSIVE)
       fi
     }
  :: atomic { phase == 2 && no > NN - QQ -> claimFailed() }
  /* holding: release, which hands the key on */
  :: atomic { phase == 3 -> held[c] = 0; startRelease(4) }
#ifdef EXTEND
  /* holding: one extend, validity from its start (t0 reused) */
  :: atomic { phase == 3 && exts < XR && now < dl[c] && ALLIDLE -> exts++; phase = 7; t0 = now; sendAll(EXT) }
  :: atomic {
       phase == 7 && yes >= QQ ->
       if
       :: now < t0 + ttl - 1 -> dl[c] = t0 + ttl - 1; RELY(ybits); assert(EXCLUSIVE)
       :: else -> skip
       fi;
       phase = 3; ybits = 0
     }
  :: atomic { phase == 7 && no > NN - QQ -> phase = 3; ybits = 0 }
#endif
  /* done */
  :: atomic {
       (phase == 4 || phase == 5) && DONEIDLE || phase == 6 ->
       finished++;
       if
       :: finished == NC ->
          for (j : 0 .. NN-1) {
            expireKey(j); expireQueue(j);
            assert(owner[j] == 0 || dead[owner[j] - 1]);   /* no orphan grant */
            for (x : 0 .. NC-1) { assert(!inq[E(j, x)] || dead[x]) }
          }
       :: else -> skip
       fi;
       held[c] = 0; dl[c] = 0;
       phase = 0; yes = 0; no = 0; maxb = 0; t0 = 0; token = 0;
       rounds = 0; claims = 0; failedR = 0; prop = 0; j = 0; x = 0; rw = 0;
       ybits = 0; exts = 0; lateLeft = 0;
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
