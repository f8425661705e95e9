/* `tessera launch`: runs a tessera command on N ranks through mpirun, the way users of mpirun
 * and Slurm expect; also accepts a MindSpore/HCCL rank table and turns it into a host file. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "rank_table.h"
#include "../base/rfile.h"
#include "tessera/base.h"

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera launch -n N [--hostfile FILE | --rank-table rank_table.json]\n"
          "                      [--mpirun PATH] [--threads T] [--dry-run] -- COMMAND [ARGS...]\n"
          "Runs `tessera COMMAND ARGS` on N ranks with mpirun (OpenMPI): adds --allow-run-as-root when\n"
          "run as root, --oversubscribe when N exceeds the cores of a single host, exports\n"
          "OMP_NUM_THREADS (T, default 1 per rank). A rank table (MindSpore/HCCL JSON: server_list[].\n"
          "server_id, device[].rank_id) becomes a host file with one slot per device, in rank order.\n"
          "Plain `mpirun -n N tessera train ...` and `srun tessera train ...` work too.\n"
          "example: tessera launch -n 2 -- train examples/mlp_fashion.yaml --set parallel.mode=data_parallel\n");
  return f == stderr ? 2 : 0;
}

/* Reads and validates the rank table `table` and writes its host file to a new private file
 * <tmpdir>/tessera-hosts-<pid>-XXXXXX (path in hf). Returns the number of ranks, or a negative
 * status (no file left behind). */
static int rank_table_to_hostfile(const char *table, char *hf, size_t hfcap, char **text) {
  char *buf = NULL;
  size_t n = 0;
  int rc = ts__file_read_all(table, "cannot open", &buf, &n);
  if (rc) return rc;
  ts_rank_table t;
  rc = ts__rank_table_parse(table, buf, n, &t);
  free(buf);
  if (rc) return rc;
  size_t len = ts__rank_table_hostfile(&t, NULL, 0);
  *text = malloc(len + 1);
  if (!*text) {
    ts__rank_table_free(&t);
    return ts_error_set(TS_ENOMEM, "launch: out of memory");
  }
  ts__rank_table_hostfile(&t, *text, len + 1);
  int nranks = t.nranks;
  ts__rank_table_free(&t);
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  snprintf(hf, hfcap, "%s/tessera-hosts-%d-XXXXXX", dir, (int)getpid());
  int fd = mkstemp(hf);
  if (fd < 0) return ts_error_set(TS_EIO, "%s: cannot create the host file: %s", hf, strerror(errno));
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, *text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      unlink(hf);
      return ts_error_set(TS_EIO, "%s: cannot write the host file: %s", hf, strerror(e));
    }
    off += (size_t)w;
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(hf);
    return ts_error_set(TS_EIO, "%s: cannot write the host file: %s", hf, strerror(e));
  }
  return nranks;
}

/* The child mpirun: SIGINT/SIGTERM/SIGHUP sent to the launcher by a process (kill) are passed on
 * to it; those from the terminal (si_code SI_KERNEL) reach it directly, in the same process
 * group, and are not sent twice (a second SIGINT makes mpirun kill the job without cleanup). */
static volatile sig_atomic_t g_child;
static void forward(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  if (g_child > 0 && !(si && si->si_code == SI_KERNEL)) kill((pid_t)g_child, sig);
}

/* Runs av (mpirun) as a child and waits for it; the exit status to return (128+N when the child
 * was killed by signal N), or -1 with errno when it could not be started. */
static int run_child(const char *const *av) {
  int pfd[2]; /* reports a failed exec to the parent */
  if (pipe2(pfd, O_CLOEXEC) != 0) return -1;
  struct sigaction sa, old_int, old_term, old_hup;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    close(pfd[0]);
    execvp(av[0], (char *const *)av);
    int e = errno;
    ssize_t w = write(pfd[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  int status = -1, e = 0;
  if (pid < 0) {
    e = errno;
  } else {
    g_child = pid;
    close(pfd[1]);
    pfd[1] = -1;
    ssize_t r;
    do r = read(pfd[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    if (r != (ssize_t)sizeof e) e = 0;
    int ws = 0;
    pid_t w;
    do w = waitpid(pid, &ws, 0);
    while (w < 0 && errno == EINTR);
    g_child = 0;
    if (w == pid) status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 1;
    else if (!e) e = errno;
  }
  close(pfd[0]);
  if (pfd[1] >= 0) close(pfd[1]);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGHUP, &old_hup, NULL);
  if (e) {
    errno = e;
    return -1;
  }
  return status;
}

int ts_cli_launch(int argc, char **argv) {
  int n = 0, threads = 1, dry = 0, cmd_at = -1;
  const char *hostfile = NULL, *table = NULL, *mpirun = "mpirun";
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--")) { cmd_at = i + 1; break; }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "--dry-run")) { dry = 1; continue; }
    if (!v) return ts_cli_fail(2, "launch: option %s needs a value", a);
    if (!strcmp(a, "-n") || !strcmp(a, "--np")) n = atoi(v) > 0 ? atoi(v) : -1;
    else if (!strcmp(a, "--hostfile")) hostfile = v;
    else if (!strcmp(a, "--rank-table")) table = v;
    else if (!strcmp(a, "--mpirun")) mpirun = v;
    else if (!strcmp(a, "--threads")) threads = atoi(v);
    else return ts_cli_fail(2, "launch: unknown option '%s' (see tessera launch --help)", a);
    i++;
  }
  if (cmd_at < 0 || cmd_at >= argc) return ts_cli_fail(2, "launch: missing '-- COMMAND' (e.g. -- train config.yaml)");
  if (hostfile && table) return ts_cli_fail(2, "launch: --hostfile and --rank-table exclude each other");
  if (threads <= 0) return ts_cli_fail(2, "launch: --threads must be positive");
  if (n < 0) return ts_cli_fail(2, "launch: -n must be a positive number of ranks");
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return ts_cli_fail(1, "launch: cannot find the tessera executable");
  char hf[4096] = "";
  char *hosts = NULL;
  if (table) {
    int r = rank_table_to_hostfile(table, hf, sizeof hf, &hosts);
    if (r < 0) return ts_cli_fail(r == TS_EFORMAT || r == TS_EIO ? 2 : 1, "launch: %s", ts_last_error());
    if (n == 0) n = r;
    if (n != r) {
      unlink(hf);
      free(hosts);
      return ts_cli_fail(2, "launch: -n %d but the rank table has %d ranks", n, r);
    }
    hostfile = hf;
  }
  if (n <= 0) return ts_cli_fail(2, "launch: -n N (number of ranks) is required");
  self[sl] = 0;
  char nbuf[16], tbuf[32];
  snprintf(nbuf, sizeof nbuf, "%d", n);
  snprintf(tbuf, sizeof tbuf, "OMP_NUM_THREADS=%d", threads);
  const char **av = calloc((size_t)(argc + 24), sizeof *av);
  int k = 0;
  av[k++] = mpirun;
  if (geteuid() == 0) av[k++] = "--allow-run-as-root";
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (!hostfile && (long)n * threads > cores) av[k++] = "--oversubscribe";
  if (threads > 1) { av[k++] = "--bind-to"; av[k++] = "none"; }
  av[k++] = "-n"; av[k++] = nbuf;
  if (hostfile) { av[k++] = "--hostfile"; av[k++] = hostfile; }
  av[k++] = "-x"; av[k++] = tbuf;
  av[k++] = "-x"; av[k++] = "OMP_WAIT_POLICY=passive";
  av[k++] = self;
  for (int i = cmd_at; i < argc; i++) av[k++] = argv[i];
  av[k] = NULL;
  if (dry) {
    for (int i = 0; i < k; i++) printf("%s%s", i ? " " : "", av[i]);
    printf("\n");
    /* the host file is removed again: show what it would hold */
    for (char *l = hosts; l && *l;) {
      char *nl = strchr(l, '\n');
      printf("# %s: %.*s\n", hf, (int)(nl ? nl - l : (long)strlen(l)), l);
      l = nl ? nl + 1 : l + strlen(l);
    }
    if (hf[0]) unlink(hf);
    free(hosts);
    free(av);
    return 0;
  }
  /* mpirun runs as a child so that the host file can be removed when it ends */
  int st = run_child(av);
  int e = errno;
  if (hf[0]) unlink(hf);
  free(hosts);
  free(av);
  if (st < 0) return ts_cli_fail(1, "launch: cannot run %s: %s (install openmpi-bin)", mpirun, strerror(e));
  return st;
}
