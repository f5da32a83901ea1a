/*
 * rwlock.pml -- admission rules of the read-write lock on N nodes
 * (DESIGN sec. 5, docs/PROTOCOL.md section 6).  A node admits a reader only
 * while it admitted no writer, and a writer only while it admitted no
 * reader and no writer.  A client holds its side once Q nodes admitted it,
 * and a holder may release, which takes its admissions back on every node.
 * Nothing expires (the worst case: a holder within its validity is one
 * whose admissions are all live) and a client that gives up keeps its
 * admissions.  The clients ask the nodes in any order, interleaved.
 *
 * Q = N/2+1 must keep "no reader with a writer, no two writers";
 * -DNAIVE (a node admits readers beside a writer) must break it.
 */
#ifndef N
#define N 3
#endif
#ifndef Q
#define Q (N/2+1)
#endif
#define READERS 2
#define WRITERS 2

byte readers[N];   /* readers node n admitted */
bool writer[N];    /* node n admitted a writer */
byte rheld, wheld; /* clients holding each side */

inline check() {
  assert(wheld == 0 || (wheld == 1 && rheld == 0))
}

proctype client(bool write) {
  byte n, got;
  bool asked[N], adm[N], held;  /* asked node n; node n admitted us */
  do
  :: atomic {
       select(n : 0 .. N-1);
       if
       :: !asked[n] ->
          asked[n] = 1;
          if
          :: write && !writer[n] && readers[n] == 0 -> writer[n] = 1; adm[n] = 1; got++
#ifdef NAIVE
          :: !write -> readers[n]++; adm[n] = 1; got++
#else
          :: !write && !writer[n] -> readers[n]++; adm[n] = 1; got++
#endif
          :: else -> skip
          fi
       :: else -> skip
       fi;
       n = 0
     }
  :: atomic {
       got >= Q ->
       if :: write -> wheld++ :: else -> rheld++ fi;
       held = 1;
       check();
       break
     }
  :: break                      /* gives up; its admissions stay (worst case) */
  od;
  if
  :: held ->                     /* a holder releases: everywhere at once */
     atomic {
       for (n : 0 .. N-1) {
         if
         :: adm[n] && write -> writer[n] = 0
         :: adm[n] && !write -> readers[n]--
         :: else -> skip
         fi
       }
       if :: write -> wheld-- :: else -> rheld-- fi
     }
  :: else -> skip
  fi
}

init {
  byte i;
  atomic {
    for (i : 1 .. READERS) { run client(0) }
    for (i : 1 .. WRITERS) { run client(1) }
  }
}
