#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
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

int64_t ts_mem_peak_rss(void) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u)) return 0;
  return (int64_t)u.ru_maxrss * 1024; /* KiB on Linux */
}

int64_t ts_mem_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long size = 0, res = 0;
  int n = f ? fscanf(f, "%lld %lld", &size, &res) : 0;
  if (f) fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? (int64_t)res * page : 0;
}
