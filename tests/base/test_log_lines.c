/* The default logging hook: one whole line per message, "[rank r of N] " when the launcher's
 * environment says the job has several ranks (ts_job_rank), none otherwise. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

/* Runs ts_log(WARN, msg) with fd 2 on a pipe; returns what was written. */
static void capture(const char *msg, char *out, size_t cap) {
  int p[2];
  if (pipe(p) != 0) { out[0] = 0; return; }
  int saved = dup(2);
  dup2(p[1], 2);
  ts_log(TS_LOG_WARN, "%s", msg);
  dup2(saved, 2);
  close(saved);
  close(p[1]);
  ssize_t n = read(p[0], out, cap - 1);
  out[n > 0 ? n : 0] = 0;
  close(p[0]);
}

int main(void) {
  char out[4096];
  unsetenv("OMPI_COMM_WORLD_RANK"); unsetenv("PMIX_RANK"); unsetenv("PMI_RANK"); unsetenv("SLURM_PROCID");
  capture("alone", out, sizeof out);
  CHECK_MSG(!strcmp(out, "tessera warning: alone\n"), "%s", out);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  int r = -1, n = -1;
  ts_job_rank(&r, &n);
  CHECK(r == 1 && n == 2);
  capture("in a job", out, sizeof out);
  CHECK_MSG(!strcmp(out, "tessera warning: [rank 1 of 2] in a job\n"), "%s", out);
  setenv("OMPI_COMM_WORLD_SIZE", "x", 1);
  ts_job_rank(&r, &n);
  CHECK(r == 0 && n == 1);
  unsetenv("OMPI_COMM_WORLD_RANK");
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  ts_job_rank(&r, &n);
  CHECK(r == 3 && n == 4);
  /* a long message is cut but still one line */
  char big[3000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  capture(big, out, sizeof out);
  CHECK(strchr(out, '\n') == out + strlen(out) - 1);
  return ts_test_finish("test_log_lines");
}
