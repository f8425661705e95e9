/* Internal declarations of the `tessera` command. */
#ifndef TS_CLI_H
#define TS_CLI_H
#include <math.h>

#include "tessera/config.h"
/* Prints "tessera: <message>" to stderr and returns `code` (the process exit status). */
int ts_cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same line for what is not an error (the launcher's restarts). */
void ts_cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Checks a file named on the command line can be read (exists, is a regular file: a FIFO or a
 * folder fails at once instead of hanging or failing later). 0, or ts_cli_fail(2, ...) with
 * "<path>: <what>: <reason>". */
int ts_cli_check_input(const char *path, const char *what);
/* Checks that a file or folder named on the command line (or by a config key) exists: 0, or
 * ts_cli_fail(2, "<path>: <what>: No such file or directory"). Every subcommand exits 2 with one
 * line naming the path when a file it is given does not exist. */
int ts_cli_check_exists(const char *path, const char *what);
/* buf = the checkpoint a path given on the command line names: "DIR/latest" (the pointer every
 * save writes) resolved to DIR/<the name in it>, with a note naming it (rank 0); any other path as
 * it is. 0, or the exit status after printing the error (2: the pointer names nothing). */
int ts_cli_resolve_ckpt(const char *path, char *buf, size_t cap);
/* Parses CONFIG [--set k=v]... (and --checkpoint FILE when ckpt is not NULL) and loads the
 * config; 0, or the exit status after printing the error. */
int ts_cli_load_config(const char *cmd, int argc, char **argv, ts_config *cfg, const char **ckpt,
                       const char **plot_out);
/* The job's layout, for commands that train (train, profile), before the trainer starts: the
 * environment's RANK_ID/RANK_SIZE and RANK/WORLD_SIZE checked against the launcher's rank and
 * size (ts_comm_check_env; refused when they disagree, or set on a process started alone); on
 * several ranks, a config that sets no parallel.mode runs data_parallel (said once, on rank 0)
 * and one that sets stand_alone is refused. 0, or the exit status after printing the error. */
int ts_cli_job_config(ts_config *cfg);
/* A command's config, freed (its lists: ts_config_free) on every return path of the block that
 * declares it; starts zeroed (owning nothing) so an early return frees nothing:
 *   TS_CLI_CONFIG(cfg);  ... ts_cli_load_config(..., &cfg, ...) ... */
void ts_cli_config_release(ts_config *cfg);
#define TS_CLI_CONFIG(name) \
  ts_config name __attribute__((cleanup(ts_cli_config_release))); \
  memset(&name, 0, sizeof name)
/* Exit status for a library status: configuration problems are usage errors (2), others 1. */
int ts_cli_exit_code(int rc);
int ts_cli_train(int argc, char **argv);
int ts_cli_profile(int argc, char **argv);
int ts_cli_plan(int argc, char **argv);
int ts_cli_calibrate(int argc, char **argv);
int ts_cli_ckpt(int argc, char **argv);
int ts_cli_eval(int argc, char **argv);
int ts_cli_plot(int argc, char **argv);
int ts_cli_launch(int argc, char **argv);
/* 1 when name is one of the `tessera` command's subcommands (train, plan, ...). */
int ts_cli_is_command(const char *name);
int ts_cli_data(int argc, char **argv);
#endif
