/* The `tessera` command. Exit status: 0 success, 2 usage/configuration errors, 1 runtime errors. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "../base/rfile.h"
#include "../base/text.h"
#include "tessera/checkpoint.h"
#include "tessera/comm.h"
#include "tessera/tessera.h"

static void vwrite_line(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

int ts_cli_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite_line(fmt, ap);
  va_end(ap);
  return code;
}

void ts_cli_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite_line(fmt, ap);
  va_end(ap);
}

/* "tessera: [rank r of N] <message>\n" to stderr in one write. */
static void vwrite_line(const char *fmt, va_list ap) {
  /* The rank from MPI when it is up, else from the launcher's environment: a job's ranks are
   * prefixed before MPI starts too (a config error seen by every rank). */
  int r = 0, n = 1;
  ts_comm *w = NULL;
  if (ts_comm_initialized() && ts_comm_world(&w) == TS_OK) {
    r = ts_comm_rank(w);
    n = ts_comm_size(w);
  } else {
    ts_job_rank(&r, &n);
  }
  char line[4096];
  size_t len = 0;
  ts__app(line, sizeof line, &len, "tessera: ");
  if (n > 1) ts__app(line, sizeof line, &len, "[rank %d of %d] ", r, n);
  if (len < sizeof line) {
    char buf[4096];
    vsnprintf(buf, sizeof buf, fmt, ap);
    /* one line whatever the message holds: control characters (a newline in a --set value, a
     * file name, a key) are written escaped */
    for (const unsigned char *p = (const unsigned char *)buf; *p; p++) {
      if (*p == '\n') ts__app(line, sizeof line, &len, "\\n");
      else if (*p == '\t') ts__app(line, sizeof line, &len, "\\t");
      else if (*p == '\r') ts__app(line, sizeof line, &len, "\\r");
      else if (*p < 0x20 || *p == 0x7f) ts__app(line, sizeof line, &len, "\\x%02x", *p);
      else ts__app(line, sizeof line, &len, "%c", *p);
    }
  }
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  /* the whole line in one write: the lines of ranks sharing stderr do not interleave */
  fflush(stderr);
  for (size_t off = 0; off < len;) {
    ssize_t k = write(2, line + off, len - off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    off += (size_t)k;
  }
}

int ts_cli_check_input(const char *path, const char *what) {
  int fd;
  if (ts__file_open_read(path, what, &fd, NULL)) return ts_cli_fail(2, "%s", ts_last_error());
  close(fd);
  return 0;
}

int ts_cli_check_exists(const char *path, const char *what) {
  struct stat sb;
  if (stat(path, &sb) == 0) return 0;
  int e = errno;
  if (e == ENOENT || e == ENOTDIR) return ts_cli_fail(2, "%s: %s: %s", path, what, strerror(ENOENT));
  return ts_cli_fail(2, "%s: %s: %s", path, what, strerror(e));
}

int ts_cli_resolve_ckpt(const char *path, char *buf, size_t cap) {
  int r = ts_ckpt_resolve(path, buf, cap);
  if (r < 0) return ts_cli_fail(r == TS_ENOTFOUND ? 2 : 1, "%s", ts_last_error());
  int rank = 0, n = 1;
  ts_job_rank(&rank, &n);
  if (r == 1 && rank == 0) ts_cli_note("%s: the checkpoint saved last, %s", path, buf);
  return 0;
}

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera <command> [options]\n"
          "commands:\n"
          "  train   train a model from a YAML config (tessera train --help)\n"
          "  eval    evaluate a checkpoint on the test data (tessera eval --help)\n"
          "  plan    show how a layout cuts a model on N devices, and with --cluster its predicted step\n"
          "          time (tessera plan --help)\n"
          "  calibrate measure this machine for the cost model (tessera calibrate --help)\n"
          "  profile train a few steps with the profiler: step breakdown, per-op table, trace\n"
          "          (tessera profile --help)\n"
          "  plot    draw loss, accuracy and learning-rate curves from a metrics file (tessera plot --help)\n"
          "  launch  run a command on N ranks through mpirun (tessera launch --help)\n"
          "  ckpt    inspect a checkpoint or export its parameters (tessera ckpt --help)\n"
          "  data    convert data sets to record shards, inspect shards (tessera data --help)\n"
          "  --version, --help\n");
  return f == stderr ? 2 : 0;
}

/* The subcommands main() dispatches (tessera launch runs anything else as a program). */
static const char *const k_commands[] = {"train", "eval", "plan", "calibrate", "profile", "plot", "launch", "ckpt",
                                          "data", NULL};

int ts_cli_is_command(const char *name) {
  for (int i = 0; name && k_commands[i]; i++)
    if (!strcmp(name, k_commands[i])) return 1;
  return 0;
}

/* A decimal environment variable >= 0, or -1. */
static long env_index(const char *name) {
  const char *e = getenv(name);
  if (!e || !*e) return -1;
  char *end = NULL;
  errno = 0;
  long v = strtol(e, &end, 10);
  return errno || *end || v < 0 ? -1 : v;
}

/* `tessera __exec PROGRAM ARGS...`, what `tessera launch` runs on each rank for a program that is
 * not a tessera command: puts the rank in MindSpore's and PyTorch's environment variables
 * (RANK_ID, RANK_SIZE, DEVICE_ID = the rank on its host; RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE), from mpirun's, then becomes PROGRAM. Returns only on failure (127). */
static int exec_rank(int argc, char **argv) {
  if (argc < 1) return ts_cli_fail(2, "__exec: missing PROGRAM");
  int r = 0, n = 1;
  ts_job_rank(&r, &n);
  static const char *const local_vars[][2] = {{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                              {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
                                              {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"}};
  long lr = -1, ln = -1;
  for (size_t i = 0; i < sizeof local_vars / sizeof local_vars[0] && lr < 0; i++) {
    lr = env_index(local_vars[i][0]);
    ln = env_index(local_vars[i][1]);
  }
  if (lr < 0) lr = r, ln = n;
  if (ln < 1) ln = n;
  char v[4][24];
  snprintf(v[0], sizeof v[0], "%d", r);
  snprintf(v[1], sizeof v[1], "%d", n);
  snprintf(v[2], sizeof v[2], "%ld", lr);
  snprintf(v[3], sizeof v[3], "%ld", ln);
  setenv("RANK_ID", v[0], 1);
  setenv("RANK_SIZE", v[1], 1);
  setenv("DEVICE_ID", v[2], 1);
  setenv("RANK", v[0], 1);
  setenv("WORLD_SIZE", v[1], 1);
  setenv("LOCAL_RANK", v[2], 1);
  setenv("LOCAL_WORLD_SIZE", v[3], 1);
  execvp(argv[0], argv);
  int e = errno;
  return ts_cli_fail(127, "launch: cannot run '%s': %s", argv[0], strerror(e));
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--version")) {
    printf("tessera %s\n", ts_version());
    return 0;
  }
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) return usage(stdout);
  int rc;
  if (!strcmp(cmd, "train")) rc = ts_cli_train(argc - 2, argv + 2);
  else if (!strcmp(cmd, "plan")) rc = ts_cli_plan(argc - 2, argv + 2);
  else if (!strcmp(cmd, "calibrate")) rc = ts_cli_calibrate(argc - 2, argv + 2);
  else if (!strcmp(cmd, "ckpt")) rc = ts_cli_ckpt(argc - 2, argv + 2);
  else if (!strcmp(cmd, "eval")) rc = ts_cli_eval(argc - 2, argv + 2);
  else if (!strcmp(cmd, "profile")) rc = ts_cli_profile(argc - 2, argv + 2);
  else if (!strcmp(cmd, "plot")) rc = ts_cli_plot(argc - 2, argv + 2);
  else if (!strcmp(cmd, "launch")) rc = ts_cli_launch(argc - 2, argv + 2);
  else if (!strcmp(cmd, "data")) rc = ts_cli_data(argc - 2, argv + 2);
  else if (!strcmp(cmd, "__exec")) return exec_rank(argc - 2, argv + 2);
  else {
    static const char *const cmds[] = {"train", "plan", "calibrate", "ckpt", "eval", "profile", "plot", "launch", "data"};
    const char *near = ts__text_closest(cmd, cmds, (int)(sizeof cmds / sizeof *cmds));
    if (near) return ts_cli_fail(2, "unknown command '%s' (did you mean '%s'? see tessera --help)", cmd, near);
    return ts_cli_fail(2, "unknown command '%s' (see tessera --help)", cmd);
  }
  if (ts_comm_initialized()) {
    ts_comm *w = NULL;
    /* A rank that failed ends the whole job now (its peers would otherwise wait in their next
     * collective until the timeout): MPI_Abort, whose code mpirun returns. When every rank failed
     * at the same point (an agreed error: each names it), up to 2 s for them all to have said so
     * first: the abort would otherwise cut off the slower ranks' lines. */
    if (rc && ts_comm_world(&w) == TS_OK && ts_comm_size(w) > 1) {
      fflush(stdout);
      fflush(stderr);
      ts_comm_abort_all(rc, 2.0);
    }
    ts_comm_finalize();
  }
  return rc;
}
