/* bench_allreduce_variants: the all-reduces MPI offers a gradient bucket, timed as a plain MPI
 * program (no Tessera code in the loop), 1, 8 and 64 MiB, medians of 3 from a barrier to the
 * slowest rank: the blocking MPI_Allreduce in place (coll/tuned, or coll/han when its priority is
 * raised), the non-blocking MPI_Iallreduce in place (libnbc: a binomial tree whatever the size)
 * and from a separate send buffer (the copy included; libnbc may take a ring or Rabenseifner's).
 * bench/cluster_bench.sh's han step runs it across the test cluster's hosts:
 *
 *   mpirun -n 4 --hostfile H [--mca coll_han_priority 100] build/bench_allreduce_variants
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static double run(float *buf, float *snd, int n, int mode, int reps) {
  double v[16];
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (mode == 0) MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else {
      MPI_Request q;
      if (mode == 2) memcpy(snd, buf, sizeof(float) * n);
      MPI_Iallreduce(mode == 2 ? snd : MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
      MPI_Wait(&q, MPI_STATUS_IGNORE);
    }
    double t = MPI_Wtime() - t0, mx;
    MPI_Allreduce(&t, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    v[r] = mx;
  }
  for (int i = 0; i < reps; i++) for (int j = i + 1; j < reps; j++) if (v[j] < v[i]) { double x = v[i]; v[i] = v[j]; v[j] = x; }
  return v[reps / 2];
}
int main(int c, char **a) {
  MPI_Init(&c, &a);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  double mib[] = {1, 8, 64};
  for (int k = 0; k < 3; k++) {
    int n = (int)(mib[k] * 262144);
    float *b = calloc(n, 4), *s = calloc(n, 4);
    run(b, s, n, 0, 1); run(b, s, n, 2, 1);
    double x = run(b, s, n, 0, 3), y = run(b, s, n, 1, 3), z = run(b, s, n, 2, 3);
    if (!rank) printf("%5.0f MiB: blocking MPI_Allreduce %.1f ms, iallreduce in place %.1f ms, from a send buffer %.1f ms\n", mib[k], x * 1e3, y * 1e3, z * 1e3);
    free(b); free(s);
  }
  MPI_Finalize();
}
