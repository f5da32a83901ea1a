/*
 * semaphore.pml -- admission arithmetic of a K-permit semaphore on N nodes
 * (DESIGN sec. 5).  Each node admits at most K live holders; a client holds
 * a permit once QS nodes admitted it.  Nothing ever expires here: every
 * admission stays live, which is the worst case for the bound (a holder
 * within its validity is exactly one whose admissions are all still live).
 * The clients ask the nodes in any order and any subset, interleaved.
 *
 * QS = N/2+1 (majority) must break the bound for K = 2, N = 5 (three holders);
 * QS = floor(K*N/(K+1))+1 must keep it.
 */
#ifndef N
#define N 5
#endif
#ifndef K
#define K 2
#endif
#ifndef QS
#define QS (K*N/(K+1)+1)
#endif
#define CL (K+1)

byte count[N];     /* live holders admitted by node n */
byte holders;      /* clients that reached QS admissions */

proctype client() {
  byte n, got;
  bool asked[N];
  do
  :: atomic {
       select(n : 0 .. N-1);
       if
       :: !asked[n] ->
          asked[n] = 1;
          if :: count[n] < K -> count[n]++; got++ :: else -> skip fi
       :: else -> skip
       fi;
       n = 0
     }
  :: atomic {
       got >= QS -> holders++;
       assert(holders <= K);   /* never more than K valid holders */
       break
     }
  :: break                      /* gives up; its admissions stay (worst case) */
  od
}

init {
  byte i;
  atomic { for (i : 1 .. CL) { run client() } }
}
