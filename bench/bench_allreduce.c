/* bench_allreduce: blocking collectives, polled (MPI_Iallreduce + MPI_Test to completion, the
 * default of ts_comm) against native (MPI_Allreduce under the watchdog thread,
 * ts_comm_set_blocking), at MPI_THREAD_MULTIPLE (what ts_comm_init asks for) and at
 * MPI_THREAD_FUNNELED (what it asked for before the watchdog). JSON lines on stdout.
 *
 *   build/bench_allreduce [--ranks N] [--reps R] [--rounds K] [--threads multiple,funneled]
 *
 * The driver runs this program with --worker under mpirun -n N (OMP_NUM_THREADS=1), K rounds,
 * alternating the thread levels (M F M F ...), since a process has one thread level. Within a
 * worker every case runs R times as polled/native pairs, in alternating order (ABBA), each
 * timed from a barrier to the slowest rank's end; figures are medians. Cases:
 *   f32/bf16 all-reduce (mean) of 4 B, 256 KiB, 2 MiB, 4 MiB and 12 MiB;
 *   the step-end reduction of each model's gradient buckets that complete in the last 1% of its
 *   FLOPs, at the default 4 MiB buckets (ResNet-18 CIFAR: one bucket of 527424 floats; the GPT of
 *   bench_dp: three, 739584 + 541440 + 3145728, the last its token embedding; the reducer leaves
 *   the last bucket of each to the end of the step, ts__buckets), followed by the step's loss
 *   all-reduce and clipping's norm (one float each);
 *   the same tail with reduce-scatters (optimizer_shard) and an all-gather of the updated parts.
 * Lines: {"name":"allreduce","thread":..,"case":..,"bytes":..,"polled_ms":..,"native_ms":..,
 * "speedup":..} per worker, then {"name":"allreduce_summary",...}: per case and thread level the
 * median over rounds, and polled/native across thread levels. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/comm.h"
#include "tessera/tessera.h"

/* (bench_common.h's models are not needed here) */
static void die(const char *what) {
  fprintf(stderr, "bench_allreduce: %s: %s\n", what, ts_last_error());
  exit(1);
}
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
  int ranks, reps, rounds;
  const char *threads;
  int worker;
  const char *thread; /* worker: multiple | funneled */
} options;

enum { K_AR, K_STEP, K_ZERO };
typedef struct {
  const char *name;
  int kind;
  ts_dtype dt;
  size_t n[3]; /* elements (K_STEP / K_ZERO: the tail buckets, 0-terminated) */
} bcase;

static const bcase k_cases[] = {
    {"f32 4 B", K_AR, TS_F32, {1}},
    {"f32 256 KiB", K_AR, TS_F32, {65536}},
    {"f32 2 MiB", K_AR, TS_F32, {524288}},
    {"f32 4 MiB", K_AR, TS_F32, {1048576}},
    {"f32 12 MiB", K_AR, TS_F32, {3145728}},
    {"bf16 2 MiB", K_AR, TS_BF16, {1048576}},
    {"resnet18 step end", K_STEP, TS_F32, {527424}},
    {"gpt step end", K_STEP, TS_F32, {739584, 541440, 3145728}},
    {"resnet18 step end, bf16 wire", K_STEP, TS_BF16, {527424}},
    {"gpt step end, optimizer_shard", K_ZERO, TS_F32, {739584, 541440, 3145728}},
};
#define NCASES (int)(sizeof k_cases / sizeof k_cases[0])

static size_t case_bytes(const bcase *k) {
  size_t b = 0;
  for (int i = 0; i < 3 && k->n[i]; i++) b += k->n[i] * ts_dtype_size(k->dt);
  return b;
}

/* One run of case k on c; buf holds the largest case (x size for the gathers). */
static void run_case(ts_comm *c, const bcase *k, void *buf, void *buf2) {
  int P = ts_comm_size(c);
  if (k->kind == K_AR) {
    if (ts_comm_allreduce(c, buf, buf, k->n[0], k->dt, TS_REDUCE_MEAN)) die("all-reduce");
    return;
  }
  for (int i = 0; i < 3 && k->n[i]; i++) {
    if (k->kind == K_STEP) {
      if (ts_comm_allreduce(c, buf, buf, k->n[i], k->dt, TS_REDUCE_MEAN)) die("bucket all-reduce");
    } else { /* the bucket's parts, then the updated parameters gathered back */
      size_t part = (k->n[i] + (size_t)P - 1) / (size_t)P;
      if (ts_comm_reduce_scatter_block(c, buf, buf2, part, TS_F32, TS_REDUCE_MEAN)) die("reduce-scatter");
      if (ts_comm_allgather(c, buf2, buf, part, TS_F32)) die("all-gather");
    }
  }
  float loss = 1, sq = 2;
  if (ts_comm_allreduce(c, &loss, &loss, 1, TS_F32, TS_REDUCE_MEAN)) die("loss all-reduce");
  if (ts_comm_allreduce(c, &sq, &sq, 1, TS_F32, TS_REDUCE_SUM)) die("norm all-reduce");
}

static int worker(const options *o, int *argc, char ***argv) {
  int want = !strcmp(o->thread, "funneled") ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, got = 0;
  if (MPI_Init_thread(argc, argv, want, &got) != MPI_SUCCESS) die("MPI_Init_thread");
  ts_comm *w, *pc = NULL, *nc = NULL;
  if (ts_comm_init(argc, argv) || ts_comm_world(&w)) die("MPI init");
  if (ts_comm_dup(w, &pc) || ts_comm_dup(w, &nc) || ts_comm_set_blocking(nc, TS_COMM_BLOCKING_NATIVE)) die("communicators");
  int rank = ts_comm_rank(w), P = ts_comm_size(w);
  size_t most = 0;
  for (int k = 0; k < NCASES; k++)
    for (int i = 0; i < 3; i++)
      if (k_cases[k].n[i] > most) most = k_cases[k].n[i];
  size_t cap = (most + (size_t)P) * (size_t)P;
  float *buf = malloc(cap * sizeof(float)), *buf2 = malloc(cap * sizeof(float));
  if (!buf || !buf2) die("out of memory");
  uint64_t key = ts_hash_name("bench_allreduce", (uint64_t)rank);
  for (size_t i = 0; i < cap; i++) buf[i] = 2.0f * ts_rng_uniform_at(key, i) - 1.0f;
  memset(buf2, 0, cap * sizeof(float));
  int R = o->reps;
  double *t[2];
  t[0] = malloc(sizeof(double) * (size_t)R);
  t[1] = malloc(sizeof(double) * (size_t)R);
  float *tf = malloc(sizeof(float) * 2 * (size_t)R);
  for (int k = 0; k < NCASES; k++) {
    const bcase *kc = &k_cases[k];
    for (int w2 = 0; w2 < 2; w2++) run_case(w2 ? nc : pc, kc, buf, buf2); /* warm-up */
    for (int r = 0; r < R; r++)
      for (int j = 0; j < 2; j++) {
        int native = (r % 2) ^ j; /* ABBA: polled first on even repeats, native first on odd */
        if (ts_comm_barrier(pc)) die("barrier");
        double t0 = ts_time_now();
        run_case(native ? nc : pc, kc, buf, buf2);
        t[native][r] = ts_time_now() - t0;
      }
    for (int r = 0; r < R; r++) {
      tf[r] = (float)t[0][r];
      tf[R + r] = (float)t[1][r];
    }
    if (ts_comm_allreduce(pc, tf, tf, 2 * (size_t)R, TS_F32, TS_REDUCE_MAX)) die("reducing times");
    for (int r = 0; r < R; r++) {
      t[0][r] = tf[r];
      t[1][r] = tf[R + r];
    }
    double mp = median(t[0], R) * 1e3, mn = median(t[1], R) * 1e3;
    if (rank == 0) {
      printf("{\"name\":\"allreduce\",\"thread\":\"%s\",\"provided\":%d,\"ranks\":%d,\"case\":\"%s\",\"bytes\":%zu,"
             "\"polled_ms\":%.4f,\"native_ms\":%.4f,\"speedup\":%.3f}\n",
             o->thread, got, P, kc->name, case_bytes(kc), mp, mn, mp / mn);
      fflush(stdout);
    }
  }
  free(t[0]);
  free(t[1]);
  free(tf);
  free(buf);
  free(buf2);
  ts_comm_free(pc);
  ts_comm_free(nc);
  ts_comm_finalize();
  MPI_Finalize();
  return 0;
}

/* ---------------------------------------------------------------- driver */
static double field(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  return p ? atof(p + strlen(pat)) : NAN;
}

int main(int argc, char **argv) {
  options o = {.ranks = 2, .reps = 41, .rounds = 3, .threads = "multiple,funneled", .thread = "multiple"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++i)
    if (!strcmp(a, "--worker")) o.worker = 1;
    else if (ARG("--thread")) o.thread = v;
    else if (ARG("--threads")) o.threads = v;
    else if (ARG("--ranks")) o.ranks = atoi(v);
    else if (ARG("--reps")) o.reps = atoi(v);
    else if (ARG("--rounds")) o.rounds = atoi(v);
    else {
      fprintf(stderr, "usage: bench_allreduce [--ranks N] [--reps R] [--rounds K] [--threads multiple,funneled]\n");
      return 2;
    }
#undef ARG
  }
  if (o.reps < 2 || o.rounds < 1 || o.ranks < 2) return 2;
  if (o.worker) return worker(&o, &argc, &argv);
  char self[1024];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char levels[64], *lv[4];
  int nl = 0;
  snprintf(levels, sizeof levels, "%s", o.threads);
  for (char *s = strtok(levels, ","); s && nl < 4; s = strtok(NULL, ",")) lv[nl++] = s;
  /* [level][case][round]: polled, native */
  double *pm = calloc((size_t)nl * NCASES * (size_t)o.rounds, sizeof(double));
  double *nm = calloc((size_t)nl * NCASES * (size_t)o.rounds, sizeof(double));
  for (int r = 0; r < o.rounds; r++)
    for (int l = 0; l < nl; l++) {
      char cmd[2048];
      snprintf(cmd, sizeof cmd,
               "OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive mpirun --oversubscribe --allow-run-as-root -n %d "
               "-x OMP_NUM_THREADS -x OMP_WAIT_POLICY %s --worker --thread %s --reps %d",
               o.ranks, self, lv[l], o.reps);
      fprintf(stderr, "bench_allreduce: round %d: %s\n", r + 1, cmd);
      FILE *f = popen(cmd, "r");
      if (!f) die("popen");
      char line[1024];
      int k = 0;
      while (fgets(line, sizeof line, f)) {
        if (line[0] != '{') {
          fputs(line, stderr);
          continue;
        }
        fputs(line, stdout);
        fflush(stdout);
        if (k < NCASES) {
          pm[((size_t)l * NCASES + k) * (size_t)o.rounds + r] = field(line, "polled_ms");
          nm[((size_t)l * NCASES + k) * (size_t)o.rounds + r] = field(line, "native_ms");
          k++;
        }
      }
      if (pclose(f) != 0 || k != NCASES) die("a worker failed");
    }
  for (int k = 0; k < NCASES; k++) {
    printf("{\"name\":\"allreduce_summary\",\"ranks\":%d,\"rounds\":%d,\"reps\":%d,\"case\":\"%s\",\"bytes\":%zu", o.ranks,
           o.rounds, o.reps, k_cases[k].name, case_bytes(&k_cases[k]));
    double p0 = NAN, n0 = NAN;
    for (int l = 0; l < nl; l++) {
      double *a = pm + ((size_t)l * NCASES + k) * (size_t)o.rounds, *b = nm + ((size_t)l * NCASES + k) * (size_t)o.rounds;
      double mp = median(a, o.rounds), mn = median(b, o.rounds);
      printf(",\"%s_polled_ms\":%.4f,\"%s_native_ms\":%.4f,\"%s_speedup\":%.3f", lv[l], mp, lv[l], mn, lv[l], mp / mn);
      if (l == 0) p0 = mp, n0 = mn;
      else printf(",\"polled_%s_over_%s\":%.3f,\"native_%s_over_%s\":%.3f", lv[0], lv[l], p0 / mp, lv[0], lv[l], n0 / mn);
    }
    printf("}\n");
  }
  free(pm);
  free(nm);
  return 0;
}
