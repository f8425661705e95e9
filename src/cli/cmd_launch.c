/* `tessera launch`: runs a tessera command, or any program (a Python script), on N ranks through
 * mpirun, the way users of mpirun and Slurm expect; also accepts a MindSpore/HCCL rank table and
 * turns it into a host file. A program runs through `tessera __exec` (main.c), which puts the
 * rank in MindSpore's and torchrun's variables first.
 * With --restarts K, a training job that fails (a rank killed or crashed, or stuck past the
 * watchdog's parallel.comm_timeout) is run again from its newest readable checkpoint, up to K
 * times, with --min-ranks M on fewer ranks (docs/parallel.md, "Surviving a lost rank"). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "rank_table.h"
#include "../base/rfile.h"
#include "train/train_compat.h"
#include "tessera/base.h"
#include "tessera/checkpoint.h"
#include "tessera/comm.h"

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera launch -n N [--hostfile FILE | --rank-table rank_table.json]\n"
          "                      [--restarts K [--min-ranks M]] [--mpirun PATH] [--threads T] [--dry-run]\n"
          "                      -- COMMAND [ARGS...]\n"
          "Runs `tessera COMMAND ARGS` (COMMAND a tessera command: train, profile, ..., also written\n"
          "`tessera profile ...`) or any other program (`python3 train.py`) on N ranks; a program gets\n"
          "RANK_ID, RANK_SIZE, DEVICE_ID (the rank on its host), RANK, WORLD_SIZE, LOCAL_RANK,\n"
          "LOCAL_WORLD_SIZE and, with --rank-table, RANK_TABLE_FILE, and is not restarted.\n"
          "Through mpirun (OpenMPI): adds --allow-run-as-root when\n"
          "run as root, --oversubscribe when N exceeds the cores of a single host, exports\n"
          "OMP_NUM_THREADS (T, default 1 per rank). A rank table (MindSpore/HCCL JSON: server_list[].\n"
          "server_id, device[].rank_id) becomes a host file with one slot per device, in rank order.\n"
          "--restarts K (default: the config's train.restarts): when `-- train CONFIG` fails (a rank\n"
          "killed or crashed, or stuck past parallel.comm_timeout), runs it again from the newest\n"
          "readable checkpoint in checkpoint.dir (--set checkpoint.resume=auto), up to K times; exit\n"
          "status 0 when it completes, else the last failure's. Configuration errors (exit 2) are not\n"
          "restarted. --min-ranks M: a restart after a lost rank drops that rank (with a host file or\n"
          "rank table: every rank of its host, and hosts left unused take their place) and runs on the\n"
          "largest count from M up that divides the global batch (data_parallel only).\n"
          "With `-- train CONFIG`, the config's parallel.device_num (MindSpore's) is the rank count\n"
          "when -n is absent, and must equal -n when both are given.\n"
          "Plain `mpirun -n N tessera train ...` and `srun tessera train ...` work too (no restarts).\n"
          "example: tessera launch -n 2 -- train examples/mlp_fashion.yaml --set parallel.mode=data_parallel\n"
          "         tessera launch --rank-table rank_table_2pcs.json -- python3 train.py\n"
          "         tessera launch -n 4 --restarts 2 --min-ranks 2 -- train my.yaml --set checkpoint.save_steps=100\n");
  return f == stderr ? 2 : 0;
}

/* ---- hosts ---- */

/* Writes the host file of t to a new private file <tmpdir>/tessera-hosts-<pid>-XXXXXX (path in
 * hf). TS_OK, or TS_EIO with no file left behind. */
static int write_hostfile(const ts_rank_table *t, char *hf, size_t hfcap) {
  size_t len = ts__rank_table_hostfile(t, NULL, 0);
  char *text = malloc(len + 1);
  if (!text) return ts_error_set(TS_ENOMEM, "launch: out of memory");
  ts__rank_table_hostfile(t, text, len + 1);
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  snprintf(hf, hfcap, "%s/tessera-hosts-%d-XXXXXX", dir, (int)getpid());
  int fd = mkstemp(hf);
  if (fd < 0) {
    free(text);
    int e = errno;
    int rc = ts_error_set(TS_EIO, "%s: cannot create the host file: %s", hf, strerror(e));
    hf[0] = 0;
    return rc;
  }
  size_t off = 0;
  int rc = TS_OK;
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      rc = ts_error_set(TS_EIO, "%s: cannot write the host file: %s", hf, strerror(errno));
      break;
    }
    off += (size_t)w;
  }
  if (close(fd) != 0 && !rc) rc = ts_error_set(TS_EIO, "%s: cannot write the host file: %s", hf, strerror(errno));
  free(text);
  if (rc) {
    unlink(hf);
    hf[0] = 0;
  }
  return rc;
}

/* Reads and validates the rank table `table` into t. Returns its number of ranks, or a negative
 * status. */
static int read_rank_table(const char *table, ts_rank_table *t) {
  char *buf = NULL;
  size_t n = 0;
  int rc = ts__file_read_all(table, "cannot open", &buf, &n);
  if (rc) return rc;
  rc = ts__rank_table_parse(table, buf, n, t);
  free(buf);
  return rc ? rc : t->nranks;
}

/* Whether `name` can be run: an executable file (a name with a '/'), or one found in PATH. */
static int find_program(const char *name) {
  if (strchr(name, '/')) return access(name, X_OK) == 0;
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  char buf[4096];
  for (const char *p = path;; p++) {
    const char *e = strchr(p, ':');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s/%s", len ? (int)len : 1, len ? p : ".", name);
    if (access(buf, X_OK) == 0) return 1;
    if (!e) return 0;
    p = e;
  }
}

/* ---- one attempt: mpirun as a child ---- */

/* What an attempt's stderr said about how it ended (read while it is passed through). */
enum { MAX_LOST = 64 };
typedef struct {
  char signal_reason[320];  /* mpirun: a rank ended by a signal */
  char tessera_reason[640]; /* the first "tessera: ..." error line */
  char last[320];           /* the last line with words (mpirun draws lines of dashes) */
  int lost[MAX_LOST];       /* world ranks killed or crashed, or named stuck by the watchdog */
  int nlost;
  int named[MAX_LOST];      /* of those, the ones only the watchdog named (alive or not: unknown) */
  int nnamed;
  char lost_host[8][128];   /* hosts whose daemon mpirun lost ("Remote daemon: ... on node X") */
  int nlost_host;
  double abort_at;          /* when a rank's watchdog said it ends the job (0: not seen) */
  int alive[MAX_LOST];      /* ranks that reported a timeout themselves: waiting, not lost */
  int nalive;
  int stopped_mpirun;       /* the launcher ended mpirun, which outlived that abort */
  char line[1024]; /* the line being read */
  size_t len;
} attempt_log;

static void add_lost(attempt_log *a, int r) {
  for (int i = 0; i < a->nlost; i++)
    if (a->lost[i] == r) return;
  if (a->nlost < MAX_LOST && r >= 0) a->lost[a->nlost++] = r;
}
static void add_named(attempt_log *a, int r) {
  add_lost(a, r);
  for (int i = 0; i < a->nnamed; i++)
    if (a->named[i] == r) return;
  if (a->nnamed < MAX_LOST && r >= 0) a->named[a->nnamed++] = r;
}
static int in_list(const int *v, int n, int r) {
  for (int i = 0; i < n; i++)
    if (v[i] == r) return 1;
  return 0;
}

/* The ranks of the watchdog's "...: rank 1 of 4 never reached it" or ": ranks 1 (waiting in
 * #12), 3 of the group of 4 never reached it" (the numbers before any parenthesis are world
 * ranks). */
static void scan_watchdog(attempt_log *a, const char *l) {
  const char *end = strstr(l, " never reached it");
  if (!end) return;
  const char *p = NULL;
  for (const char *q = l; (q = strstr(q, ": rank")) && q < end; q++) p = q;
  if (!p) return;
  p += 6;
  if (*p == 's') p++;
  while (p < end) {
    if (*p == '(') {
      while (p < end && *p != ')') p++;
      p++;
    } else if (*p >= '0' && *p <= '9') {
      add_named(a, (int)strtol(p, (char **)&p, 10));
    } else if (!strncmp(p, " of ", 4)) {
      break;
    } else {
      p++;
    }
  }
}

static void scan_line(attempt_log *a, const char *l) {
  if (strspn(l, "- \t") < strlen(l)) snprintf(a->last, sizeof a->last, "%s", l);
  const char *d = strstr(l, "Remote daemon:");
  if (d && (d = strstr(d, " on node ")) && a->nlost_host < 8) {
    char h[128] = "";
    if (sscanf(d, " on node %127s", h) == 1) {
      int seen = 0;
      for (int i = 0; i < a->nlost_host; i++) seen |= !strcmp(a->lost_host[i], h);
      if (!seen) snprintf(a->lost_host[a->nlost_host++], sizeof a->lost_host[0], "%s", h);
    }
    return;
  }
  if (strstr(l, "the watchdog ends the job") && a->abort_at == 0) a->abort_at = ts_time_now();
  int r = -1, sig = 0;
  char node[128] = "", name[64] = "";
  const char *m = strstr(l, "mpirun noticed that process rank ");
  if (m && sscanf(m, "mpirun noticed that process rank %d with PID %*d on node %127s exited on signal %d (%63[^)])",
                  &r, node, &sig, name) >= 3) {
    add_lost(a, r);
    if (!a->signal_reason[0])
      snprintf(a->signal_reason, sizeof a->signal_reason, "rank %d (node %s) ended by signal %d%s%s%s", r, node, sig,
               name[0] ? " (" : "", name, name[0] ? ")" : "");
    return;
  }
  /* a command's one-line error ("tessera: ..."), or the log's ("tessera error: ...": the watchdog
   * ending a job stuck in a blocking collective says so through the logging hook, then aborts) */
  size_t pre = !strncmp(l, "tessera: ", 9) ? 9 : !strncmp(l, "tessera error: ", 15) ? 15 : 0;
  if (!pre) return;
  scan_watchdog(a, l);
  /* "[rank 1 of 4] rank 1: allreduce ... did not complete": rank 1 was alive, waiting (it may be
   * named by another rank that waited in a later collective than the one it was stuck in) */
  int who = -1, who2 = -1;
  if (strstr(l, " never reached it") &&
      (sscanf(l + pre, "[rank %*d of %*d] rank %d:", &who) == 1 || sscanf(l + pre, "rank %d:", &who2) == 1)) {
    int r = who >= 0 ? who : who2;
    if (r >= 0 && a->nalive < MAX_LOST) a->alive[a->nalive++] = r;
  }
  if (!a->tessera_reason[0]) snprintf(a->tessera_reason, sizeof a->tessera_reason, "%s", l + pre);
}

static void scan(attempt_log *a, const char *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (buf[i] == '\n') {
      a->line[a->len] = 0;
      scan_line(a, a->line);
      a->len = 0;
    } else if (a->len < sizeof a->line - 1) {
      a->line[a->len++] = buf[i];
    }
  }
}

static void write_all(int fd, const char *buf, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, buf + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    off += (size_t)w;
  }
}

/* The child mpirun: SIGINT/SIGTERM/SIGHUP sent to the launcher by a process (kill) are passed on
 * to it; those from the terminal (si_code SI_KERNEL) reach it directly, in the same process
 * group, and are not sent twice (a second SIGINT makes mpirun kill the job without cleanup).
 * Either way the job was stopped on purpose: it is not restarted. */
static volatile sig_atomic_t g_child, g_stopped;
static void forward(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  g_stopped = 1;
  if (g_child > 0 && !(si && si->si_code == SI_KERNEL)) kill((pid_t)g_child, sig);
}

/* Runs av (mpirun) as a child and waits for it; the exit status to return (128+N when the child
 * was killed by signal N), or -1 with errno when it could not be started. With a, the child's
 * stderr goes through the launcher, which passes it on as it comes and reads it into a. */
#define ABORT_GRACE_S 5.0 /* how long mpirun may outlive a watchdog's abort */
static int run_child(const char *const *av, attempt_log *a) {
  int pfd[2], efd[2] = {-1, -1}; /* pfd reports a failed exec to the parent; efd: the child's stderr */
  if (pipe2(pfd, O_CLOEXEC) != 0) return -1;
  if (a && pipe2(efd, O_CLOEXEC) != 0) {
    close(pfd[0]);
    close(pfd[1]);
    return -1;
  }
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
    if (efd[1] >= 0) dup2(efd[1], 2); /* the copy is not close-on-exec */
    execvp(av[0], (char *const *)av);
    int e = errno;
    ssize_t w = write(pfd[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  int status = -1, e = 0;
  if (efd[1] >= 0) close(efd[1]);
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
    int ws = 0, reaped = 0;
    /* pass stderr on until it closes; once mpirun has ended, what is still buffered is read for
     * up to a second (a process of the job that outlives mpirun may hold the pipe open) */
    double grace_end = -1;
    while (efd[0] >= 0) {
      struct pollfd p = {efd[0], POLLIN, 0};
      int k = poll(&p, 1, 100);
      if (k > 0) {
        char buf[4096];
        ssize_t n = read(efd[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        write_all(2, buf, (size_t)n);
        scan(a, buf, (size_t)n);
        continue;
      }
      if (!reaped) {
        pid_t w = waitpid(pid, &ws, WNOHANG);
        if (w == pid) {
          reaped = 1;
          grace_end = ts_time_now() + 1;
        } else if (a && a->abort_at > 0 && ts_time_now() > a->abort_at + ABORT_GRACE_S) {
          /* a watchdog ended the job but mpirun is still waiting, typically for the daemon of a
           * host it can no longer reach (TCP gives up on unacknowledged data only after minutes):
           * stop it, and kill it if that does not do */
          kill(pid, a->stopped_mpirun ? SIGKILL : SIGTERM);
          if (!a->stopped_mpirun)
            ts_cli_note("launch: mpirun is still running %.0f s after a rank's watchdog ended the job (a host "
                        "unreachable?): stopping it", ABORT_GRACE_S);
          a->stopped_mpirun++;
          a->abort_at = ts_time_now() - ABORT_GRACE_S + 3; /* SIGKILL 3 s later if need be */
        }
      } else if (ts_time_now() > grace_end) {
        break;
      }
    }
    if (a && a->len) scan(a, "\n", 1);
    if (!reaped) {
      pid_t w;
      do w = waitpid(pid, &ws, 0);
      while (w < 0 && errno == EINTR);
      reaped = w == pid;
      if (!reaped && !e) e = errno;
    }
    g_child = 0;
    if (reaped) status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 1;
  }
  close(pfd[0]);
  if (pfd[1] >= 0) close(pfd[1]);
  if (efd[0] >= 0) close(efd[0]);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGHUP, &old_hup, NULL);
  if (e) {
    errno = e;
    return -1;
  }
  return status;
}

/* ---- restarts ---- */

/* The config of `train CONFIG [--set k=v]...` (args after "train"), read as the ranks will read
 * it, printing nothing. TS_OK, or a status with the reason in ts_last_error(). */
static int load_train_config(int argc, char **argv, ts_config *cfg) {
  const char *path = NULL;
  const char **sets = calloc((size_t)argc + 1, sizeof *sets);
  if (!sets) return ts_error_set(TS_ENOMEM, "launch: out of memory");
  int nsets = 0, rc = TS_OK;
  for (int i = 0; i < argc && !rc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--set") || !strncmp(a, "--set=", 6)) {
      const char *v = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v) rc = ts_error_set(TS_ECONFIG, "train: --set needs key=value");
      else sets[nsets++] = v;
    } else if (a[0] == '-' && a[1]) {
      rc = ts_error_set(TS_ECONFIG, "train: option '%s' (see tessera train --help)", a);
    } else if (!path) {
      path = a;
    } else {
      rc = ts_error_set(TS_ECONFIG, "train: unexpected argument '%s'", a);
    }
  }
  if (!rc && !path) rc = ts_error_set(TS_ECONFIG, "train: missing CONFIG.yaml");
  struct stat sb;
  if (!rc && stat(path, &sb) != 0 && errno == ENOENT)
    rc = ts_error_set(TS_ENOTFOUND, "%s: cannot read the config: %s", path, strerror(ENOENT));
  if (!rc) rc = ts_config_load(path, sets, nsets, cfg);
  free(sets);
  return rc;
}

/* Whether a data-parallel job of cfg runs on n ranks: the global batch and the micro-batch cut
 * evenly (the trainer's own check), and a hybrid shard group divides the ranks. */
static int ranks_fit(const ts_config *cfg, int n) {
  int b = cfg->train.batch_size, mb = cfg->train.micro_batch_size > 0 ? cfg->train.micro_batch_size : b;
  ts__compat_key k;
  ts__config_compat_key(cfg, &k);
  return ts__compat_ranks_fit(&k, b, mb, n); /* the compatibility table's (shard groups) */
}

/* The largest rank count in [lo, hi] that ranks_fit, or 0. */
static int fitting_ranks(const ts_config *cfg, int lo, int hi) {
  for (int k = hi; k >= lo; k--)
    if (ranks_fit(cfg, k)) return k;
  return 0;
}

/* The newest checkpoint of the config's series that reads whole (ts_ckpt_read_info: header,
 * sizes, CRC-32), as checkpoint.resume: auto will choose it; those skipped are noted. 1 with path
 * and step, 0 when the series is empty, -1 when it has checkpoints but none reads. */
static int newest_readable(const ts_config *cfg, char *path, size_t cap, int64_t *step) {
  int64_t before = INT64_MAX;
  int skipped = 0;
  for (;;) {
    if (ts_ckpt_find(cfg->checkpoint.dir, cfg->checkpoint.prefix, before, path, cap, step)) return skipped ? -1 : 0;
    ts_ckpt_info info;
    int rc = ts_ckpt_read_info(path, &info);
    ts_ckpt_info_free(&info);
    if (!rc) return 1;
    ts_cli_note("launch: skipping a checkpoint that cannot be read: %s", ts_last_error());
    skipped++;
    before = *step;
  }
}

int ts_cli_launch(int argc, char **argv) {
  int n = 0, threads = 1, dry = 0, cmd_at = -1, restarts = -1, min_ranks = 0;
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
    else if (!strcmp(a, "--restarts") || !strcmp(a, "--min-ranks")) {
      char *end = NULL;
      long x = strtol(v, &end, 10);
      int restart = a[2] == 'r';
      if (!*v || *end || x < (restart ? 0 : 1) || x > (restart ? 1000 : 1 << 20))
        return ts_cli_fail(2, "launch: %s needs a number %s, got '%s'", a, restart ? "from 0 to 1000" : "of ranks (1 or more)", v);
      if (restart) restarts = (int)x;
      else min_ranks = (int)x;
    } else return ts_cli_fail(2, "launch: unknown option '%s' (see tessera launch --help)", a);
    i++;
  }
  if (cmd_at < 0 || cmd_at >= argc) return ts_cli_fail(2, "launch: missing '-- COMMAND' (e.g. -- train config.yaml)");
  if (hostfile && table) return ts_cli_fail(2, "launch: --hostfile and --rank-table exclude each other");
  int ferr = 0; /* a file named that does not exist: exit 2, as every command */
  if ((hostfile && (ferr = ts_cli_check_exists(hostfile, "cannot open the host file"))) ||
      (table && (ferr = ts_cli_check_exists(table, "cannot open the rank table"))))
    return ferr;
  if (threads <= 0) return ts_cli_fail(2, "launch: --threads must be positive");
  if (n < 0) return ts_cli_fail(2, "launch: -n must be a positive number of ranks");

  /* COMMAND: a tessera command (train, profile, an option), the same after the program's own
   * name (`-- tessera profile ...`; a path to another tessera runs that one), or any other
   * program (`-- python3 train.py`), which each rank runs through `tessera __exec` */
  const char *tessera_exe = NULL;
  const char *base = strrchr(argv[cmd_at], '/');
  base = base ? base + 1 : argv[cmd_at];
  int program = 0;
  if (!strcmp(base, "tessera")) {
    if (strchr(argv[cmd_at], '/')) tessera_exe = argv[cmd_at];
    if (++cmd_at >= argc) return ts_cli_fail(2, "launch: missing the command after 'tessera' (e.g. -- tessera train config.yaml)");
  } else if (argv[cmd_at][0] != '-' && !ts_cli_is_command(argv[cmd_at])) {
    program = 1;
    if (!hostfile && !table && !find_program(argv[cmd_at]))
      return ts_cli_fail(2, "launch: '%s' is not a tessera command (train, profile, ...) and no such program was found%s",
                         argv[cmd_at], strchr(argv[cmd_at], '/') ? "" : " in PATH");
  }

  /* a training job's config: train.restarts, and what restarts need */
  int is_train = !program && !strcmp(argv[cmd_at], "train"), given = restarts >= 0;
  TS_CLI_CONFIG(cfg);
  int cfg_rc = is_train ? load_train_config(argc - cmd_at - 1, argv + cmd_at + 1, &cfg) : TS_ECONFIG;
  int have_cfg = cfg_rc == TS_OK;
  char cfg_missing[1200] = ""; /* the config file is not there: said once, before mpirun (not under --dry-run) */
  if (is_train && cfg_rc == TS_ENOTFOUND) snprintf(cfg_missing, sizeof cfg_missing, "%s", ts_last_error());
  if (restarts < 0) restarts = have_cfg ? cfg.train.restarts : 0; /* the ranks report a bad config themselves */
  const char *what = given ? "--restarts" : "train.restarts";
  if (min_ranks && restarts <= 0)
    return ts_cli_fail(2, "launch: --min-ranks is the rank count a restart may go down to: give --restarts K too");
  if (restarts > 0) {
    if (program)
      return ts_cli_fail(2, "launch: --restarts restarts `-- train CONFIG` from its checkpoints; a program ('%s') runs "
                         "once (resuming from its checkpoints is its own script's part)", argv[cmd_at]);
    if (!is_train)
      return ts_cli_fail(2, "launch: --restarts restarts `-- train CONFIG` from its checkpoints, not '%s'", argv[cmd_at]);
    if (!have_cfg) return ts_cli_fail(ts_cli_exit_code(cfg_rc), "launch: %s", ts_last_error());
    if (!cfg.checkpoint.dir[0])
      return ts_cli_fail(2, "launch: %s %d: checkpoint.dir is empty, so a restart would train again from step 0 (set "
                         "checkpoint.dir and checkpoint.save_steps)", what, restarts);
  }

  /* MindSpore's device_num: the ranks the job must have; it stands for -n when -n is absent */
  int dn = have_cfg ? cfg.parallel.device_num : 0, n_from_cfg = 0;
  const char *src = have_cfg && cfg.source[0] ? cfg.source : "config";
  if (dn > 0 && n == 0) n = dn, n_from_cfg = 1;
  if (dn > 0 && n != dn)
    return ts_cli_fail(2, "launch: %s: parallel.device_num is %d, but launch -n %d (give -n %d, or set "
                       "parallel.device_num: %d or 0)", src, dn, n, dn, n);
  if (dn > 0 && min_ranks && min_ranks < n)
    return ts_cli_fail(2, "launch: --min-ranks %d: %s sets parallel.device_num %d, so the job cannot go on with fewer "
                       "ranks (set parallel.device_num: 0 to allow it)", min_ranks, src, dn);

  ts_rank_table hosts;
  memset(&hosts, 0, sizeof hosts);
  int have_hosts = 0;
  if (table) {
    int r = read_rank_table(table, &hosts);
    if (r < 0) return ts_cli_fail(r == TS_EFORMAT || r == TS_EIO ? 2 : 1, "launch: %s", ts_last_error());
    have_hosts = 1;
    if (n == 0) n = r;
    if (n != r) {
      ts__rank_table_free(&hosts);
      if (n_from_cfg)
        return ts_cli_fail(2, "launch: %s: parallel.device_num is %d, but the rank table has %d ranks", src, n, r);
      return ts_cli_fail(2, "launch: -n %d but the rank table has %d ranks", n, r);
    }
  } else if (hostfile) { /* hosts known by their slots: a lost host's ranks go with it */
    char *buf = NULL;
    size_t len = 0;
    if (ts__file_read_all(hostfile, "cannot open the host file", &buf, &len) == TS_OK) {
      if (ts__hostfile_check(buf, len) != TS_OK) { /* before mpirun's multi-line parse error */
        free(buf);
        return ts_cli_fail(2, "launch: %s: %s", hostfile, ts_last_error());
      }
      have_hosts = ts__hostfile_parse(buf, len, &hosts) == TS_OK;
    }
    free(buf);
  }
  int rc = 0;
  if (n <= 0) rc = ts_cli_fail(2, "launch: -n N (number of ranks) is required (or parallel.device_num in the config)");
  if (!rc && !dry && cfg_missing[0]) rc = ts_cli_fail(2, "%s", cfg_missing);
  if (!rc && min_ranks > n) rc = ts_cli_fail(2, "launch: --min-ranks %d is more than the %d ranks (-n)", min_ranks, n);
  /* the ranks' own default (ts_cli_job_config): a config without parallel.mode is data_parallel
   * on several ranks, which restarts on fewer ranks may need to know */
  if (!rc && have_cfg && n > 1 && !ts_config_given(&cfg, "parallel.mode"))
    ts_config_set(&cfg, "parallel.mode", "data_parallel");
  if (!rc && min_ranks && min_ranks < n) {
    ts__compat_key key;
    char why[512];
    ts__config_compat_key(&cfg, &key);
    if (ts__compat_find(TS__COMPAT_ELASTIC, &key, why, sizeof why) >= 0) /* the layout is cut for n ranks */
      rc = ts_cli_fail(2, "launch: --min-ranks %d: %s for its %d ranks", min_ranks, why, n);
    else if (!fitting_ranks(&cfg, min_ranks, n - 1))
      rc = ts_cli_fail(2, "launch: --min-ranks %d: no rank count from %d to %d divides train.batch_size %d%s (the global "
                       "batch is kept, so each rank's share must be whole)", min_ranks, min_ranks, n - 1,
                       cfg.train.batch_size, ts__compat_fit_note(&key));
  }
  if (!min_ranks) min_ranks = n; /* restarts keep the rank count */
  char self[4096];
  ssize_t sl = rc ? 0 : readlink("/proc/self/exe", self, sizeof self - 1);
  if (!rc && sl <= 0) rc = ts_cli_fail(1, "launch: cannot find the tessera executable");
  char table_env[4200] = "";
  if (!rc && program && table) { /* the program may read it, as MindSpore's scripts do */
    char *abs = realpath(table, NULL);
    snprintf(table_env, sizeof table_env, "RANK_TABLE_FILE=%s", abs ? abs : table);
    free(abs);
  }
  char hf[4096] = "";
  if (!rc && table && write_hostfile(&hosts, hf, sizeof hf)) rc = ts_cli_fail(1, "launch: %s", ts_last_error());
  if (rc) {
    ts__rank_table_free(&hosts);
    return rc;
  }
  self[sl] = 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const char **av = calloc((size_t)(argc + 32), sizeof *av);
  if (!av) {
    if (hf[0]) unlink(hf);
    ts__rank_table_free(&hosts);
    return ts_cli_fail(1, "launch: out of memory");
  }
  int cur = n, attempt = 0, resume = 0, st = 0;
  double t_job = ts_time_now();
  for (;;) {
    char nbuf[16], tbuf[32], rbuf[32];
    snprintf(nbuf, sizeof nbuf, "%d", cur);
    snprintf(tbuf, sizeof tbuf, "OMP_NUM_THREADS=%d", threads);
    snprintf(rbuf, sizeof rbuf, "TESSERA_RESTART=%d", attempt);
    const char *hfile = hf[0] ? hf : hostfile;
    int k = 0;
    av[k++] = mpirun;
    if (geteuid() == 0) av[k++] = "--allow-run-as-root";
    if (!hfile && (long)cur * threads > cores) av[k++] = "--oversubscribe";
    if (threads > 1) { av[k++] = "--bind-to"; av[k++] = "none"; }
    av[k++] = "-n"; av[k++] = nbuf;
    if (hfile) { av[k++] = "--hostfile"; av[k++] = hfile; }
    av[k++] = "-x"; av[k++] = tbuf;
    av[k++] = "-x"; av[k++] = "OMP_WAIT_POLICY=passive";
    av[k++] = "-x"; av[k++] = rbuf; /* the restart number: TESSERA_FAULT fires only in attempt 0 */
    if (table_env[0]) { av[k++] = "-x"; av[k++] = table_env; }
    if (getenv("TESSERA_MAX_STEPS")) { av[k++] = "-x"; av[k++] = "TESSERA_MAX_STEPS"; } /* to every host's ranks */
    if (isatty(STDOUT_FILENO)) { av[k++] = "-x"; av[k++] = "TESSERA_TTY=1"; } /* rank 0 may draw its bar here */
    av[k++] = tessera_exe ? tessera_exe : self;
    if (program) av[k++] = "__exec"; /* sets RANK_ID, RANK_SIZE, DEVICE_ID, ..., then runs it */
    for (int i = cmd_at; i < argc; i++) av[k++] = argv[i];
    if (resume) { av[k++] = "--set"; av[k++] = "checkpoint.resume=auto"; }
    av[k] = NULL;
    if (dry) {
      for (int i = 0; i < k; i++) printf("%s%s", i ? " " : "", av[i]);
      printf("\n");
      if (table) { /* the host file is removed again: show what it would hold */
        char line[1024];
        for (int s = 0; s < hosts.nservers; s++) {
          snprintf(line, sizeof line, "%s slots=%d", hosts.servers[s].host, hosts.servers[s].slots);
          printf("# %s: %s\n", hf, line);
        }
      }
      if (restarts > 0)
        printf("# up to %d restart%s from the newest readable checkpoint in %s, on %d to %d ranks\n", restarts,
               restarts == 1 ? "" : "s", cfg.checkpoint.dir, min_ranks, n);
      break;
    }
    attempt_log log;
    memset(&log, 0, sizeof log);
    double t0 = ts_time_now();
    st = run_child(av, &log);
    if (log.stopped_mpirun && st != 0) st = TS_COMM_EXIT_TIMEOUT; /* what the watchdog's abort would have returned */
    /* a host whose daemon mpirun lost: its ranks are lost (named in the note below) */
    char lost_hosts[512] = "";
    for (int h = 0; h < log.nlost_host; h++) {
      size_t len = strlen(lost_hosts);
      snprintf(lost_hosts + len, sizeof lost_hosts - len, "%s%s", h ? ", " : "", log.lost_host[h]);
      for (int s = 0; have_hosts && s < hosts.nservers; s++)
        if (!strcmp(hosts.servers[s].host, log.lost_host[h]))
          for (int r = 0; r < hosts.servers[s].slots; r++) add_lost(&log, hosts.servers[s].first_rank + r);
    }
    /* a rank that reported its own timeout was waiting, not lost; so, on a job over hosts, was
     * a rank only the watchdog named whose host is up (another of its ranks reported) while a
     * whole other host went silent: it waited in an earlier collective behind that host (seen in
     * CI: link to node1 down, node0's rank 1 still in the ring step that needed node1) */
    int host_gone = 0; /* a host none of whose ranks reported */
    for (int s = 0; have_hosts && s < hosts.nservers; s++) {
      int any = 0;
      for (int r = 0; r < hosts.servers[s].slots; r++) any |= in_list(log.alive, log.nalive, hosts.servers[s].first_rank + r);
      int all_lost = 1;
      for (int r = 0; r < hosts.servers[s].slots; r++) all_lost &= in_list(log.lost, log.nlost, hosts.servers[s].first_rank + r);
      host_gone |= !any && all_lost;
    }
    for (int i = 0; i < log.nlost;) {
      int r = log.lost[i], waiting = in_list(log.alive, log.nalive, r);
      for (int s = 0; !waiting && host_gone && in_list(log.named, log.nnamed, r) && s < hosts.nservers; s++) {
        const ts_rt_server *sv = &hosts.servers[s];
        if (r < sv->first_rank || r >= sv->first_rank + sv->slots) continue;
        for (int q = 0; q < sv->slots; q++) waiting |= in_list(log.alive, log.nalive, sv->first_rank + q);
      }
      if (waiting && log.nlost > 1) log.lost[i] = log.lost[--log.nlost];
      else i++;
    }
    /* in rank order, as the notes list them */
    for (int i = 1; i < log.nlost; i++)
      for (int j = i; j > 0 && log.lost[j] < log.lost[j - 1]; j--) {
        int x = log.lost[j];
        log.lost[j] = log.lost[j - 1];
        log.lost[j - 1] = x;
      }
    if (st != 0 && lost_hosts[0]) ts_cli_note("launch: mpirun lost the host%s %s (its daemon unreachable or killed)",
                                              log.nlost_host > 1 ? "s" : "", lost_hosts);
    double ran = ts_time_now() - t0;
    if (st < 0) {
      st = ts_cli_fail(1, "launch: cannot run %s: %s (install openmpi-bin)", mpirun, strerror(errno));
      break;
    }
    if (st == 0) {
      if (attempt)
        ts_cli_note("launch: the job completed after %d restart%s, %.1f s in all", attempt, attempt == 1 ? "" : "s",
                    ts_time_now() - t_job);
      break;
    }
    if (restarts <= 0) break;
    char why[1024];
    if (log.signal_reason[0] || log.tessera_reason[0])
      snprintf(why, sizeof why, "exit status %d: %s", st, log.signal_reason[0] ? log.signal_reason : log.tessera_reason);
    else if (log.last[0])
      snprintf(why, sizeof why, "exit status %d, after \"%s\"", st, log.last);
    else
      snprintf(why, sizeof why, "exit status %d", st);
    if (g_stopped) {
      ts_cli_note("launch: not restarting: the job was stopped by a signal to it (%s)", why);
      break;
    }
    if (st == 2) {
      ts_cli_note("launch: not restarting: exit status 2 is a usage or configuration error, which a restart would repeat");
      break;
    }
    if (attempt == restarts) {
      ts_cli_note("launch: giving up: the job failed %d times (%d restart%s allowed); the last failure: %s", attempt + 1,
                  restarts, restarts == 1 ? "" : "s", why);
      break;
    }
    /* the ranks of the next attempt */
    int next = cur, dropped = 0;
    char lost[256] = "";
    if (log.nlost) {
      size_t len = 0;
      for (int i = 0; i < log.nlost; i++) len += (size_t)snprintf(lost + len, len < sizeof lost ? sizeof lost - len : 0,
                                                                  "%s%d", i ? ", " : "", log.lost[i]);
    }
    if (min_ranks < cur && log.nlost) {
      if (have_hosts) {
        dropped = ts__rank_table_drop(&hosts, log.lost, log.nlost);
        next = hosts.nranks < cur ? hosts.nranks : cur;
      } else {
        next = cur - log.nlost;
      }
      int fit = next >= min_ranks ? fitting_ranks(&cfg, min_ranks, next) : 0;
      if (!fit) {
        ts_cli_note("launch: not restarting: after losing rank%s %s, %d rank%s would be left, and no count from "
                    "--min-ranks %d up to that divides train.batch_size %d (%s)", log.nlost > 1 ? "s" : "", lost, next,
                    next == 1 ? "" : "s", min_ranks, cfg.train.batch_size, why);
        break;
      }
      next = fit;
    }
    char path[4200];
    int64_t step = 0;
    int found = newest_readable(&cfg, path, sizeof path, &step);
    if (found < 0) {
      ts_cli_note("launch: not restarting: none of the checkpoints in %s can be read (%s)", cfg.checkpoint.dir, why);
      break;
    }
    resume = found > 0; /* none yet: the command as it was given (from step 0, or its own resume) */
    if (dropped && hf[0]) {
      unlink(hf);
      hf[0] = 0;
    }
    if (dropped && write_hostfile(&hosts, hf, sizeof hf)) {
      st = ts_cli_fail(1, "launch: %s", ts_last_error());
      break;
    }
    char from[4400];
    if (found) snprintf(from, sizeof from, "resuming from %s (step %lld)", path, (long long)step);
    else snprintf(from, sizeof from, "no checkpoint yet: starting again");
    char ranks_note[320] = "";
    if (next != cur)
      snprintf(ranks_note, sizeof ranks_note, " (rank%s %s lost%s)", log.nlost > 1 ? "s" : "", lost,
               dropped ? ", with their hosts" : "");
    ts_cli_note("launch: restart %d of %d after %.1f s, %s; %s on %d rank%s%s", attempt + 1, restarts, ran, why, from,
                next, next == 1 ? "" : "s", ranks_note);
    attempt++;
    cur = next;
  }
  if (hf[0]) unlink(hf);
  ts__rank_table_free(&hosts);
  free(av);
  return st;
}
