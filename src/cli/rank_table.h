/* MindSpore/HCCL rank tables (`tessera launch --rank-table`): parsed and validated from memory,
 * so the parser can be fuzzed (tests/fuzz/fuzz_rank_table.c) and tested on a corpus of bad
 * tables (tests/cli/test_rank_table.c). */
#ifndef TS_CLI_RANK_TABLE_H
#define TS_CLI_RANK_TABLE_H

#include <stddef.h>

typedef struct {
  char *host;     /* server_id: an RFC 1123 host name or an IPv4 address */
  int slots;      /* devices (ranks) on this server */
  int first_rank; /* its ranks are first_rank .. first_rank + slots - 1 */
} ts_rt_server;

typedef struct {
  ts_rt_server *servers; /* in rank order */
  int nservers;
  int nranks;
} ts_rank_table;

/* Parses the JSON text `text` (len bytes) of the rank table `name` (used in messages). Checks:
 * server_list a non-empty array of objects; server_id a host name (letters, digits, hyphens,
 * dots; labels 1-63 characters not starting or ending with a hyphen, at most 253 in all) or an
 * IPv4 address, each server listed once; device a non-empty array of objects; rank_id a
 * non-negative integer (an integral JSON number or a string of digits), unique, all of 0..N-1,
 * consecutive within a server (mpirun places ranks on hosts in blocks); device_id, where given,
 * a non-negative integer unique within its server; server_count, where given, the number of
 * servers. TS_OK with *out filled (free with ts__rank_table_free), or TS_EFORMAT / TS_ENOMEM with
 * a one-line message naming `name`, the server index or rank and the bad value (escaped). */
int ts__rank_table_parse(const char *name, const char *text, size_t len, ts_rank_table *out);
void ts__rank_table_free(ts_rank_table *t);

/* Writes the host file text ("host slots=K\n" per server, in rank order) into buf[cap]; returns
 * the length it needs (like snprintf). */
size_t ts__rank_table_hostfile(const ts_rank_table *t, char *buf, size_t cap);

/* Reads the text (len bytes) of an OpenMPI host file: one host a line ("name slots=K", other
 * options ignored, '#' starts a comment, blank lines skipped), its ranks placed in blocks in file
 * order as mpirun's default by-slot mapping places them. TS_OK with *out (free with
 * ts__rank_table_free); TS_ENOTFOUND when a host gives no slots=K (mpirun then counts its cores,
 * which the launcher cannot know) or there is no host; TS_EFORMAT for a bad slots=; TS_ENOMEM.
 * Nothing is left in *out on error. */
int ts__hostfile_parse(const char *text, size_t len, ts_rank_table *out);
/* Checks an OpenMPI host file's syntax before mpirun reads it (mpirun's own parse error is a
 * multi-line box): every line "HOST [KEY=N ...]" (a comment after '#'), HOST a host name or
 * address (letters, digits, '.', '-', '_', ':', '@', '[', ']'), each KEY a word of letters, '_'
 * and '-' with a whole number. TS_EFORMAT naming the line and token, or TS_ENOTFOUND for a file
 * with no host. */
int ts__hostfile_check(const char *text, size_t len);

/* Removes from t every host that holds one of the ranks lost[0..nlost) (ranks beyond the table
 * are ignored) and renumbers the others' ranks, in order. Returns the number of hosts removed. */
int ts__rank_table_drop(ts_rank_table *t, const int *lost, int nlost);

/* Writes s (n bytes) into buf[cap] as printable ASCII in double quotes (\n, \t, \", \\, \xNN),
 * cut with "..." past about 60 characters: a value from a user's file that stays on one line. */
void ts__escape(const char *s, size_t n, char *buf, size_t cap);

#endif
