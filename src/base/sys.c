#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <omp.h>

#include "tessera/base.h"

double ts_time_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int g_threads;

int ts_threads_get(void) {
  if (g_threads > 0) return g_threads;
  const char *e = getenv("OMP_NUM_THREADS");
  int n = e ? atoi(e) : 0;
  if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

void ts_threads_set(int n) {
  if (n <= 0) return;
  g_threads = n;
  omp_set_num_threads(n);
}
