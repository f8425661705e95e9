/* The rank-table parser of `tessera launch --rank-table` (src/cli/rank_table.c) over the corpus
 * of bad tables in tests/fixtures/cli/rank_tables/: every one is refused with TS_EFORMAT and a
 * one-line message naming the file and the part at fault; good tables give the host file. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "cli/rank_table.h"
#include "test_util.h"

static const struct { const char *file, *want; } k_bad[] = {
    {"host_newline", "server_list[0]: server_id \"localhost\\nevil slots=99\" may contain only letters"},
    {"host_space", "server_id \"node 1\" may contain only"},
    {"host_empty", "server_id \"\" is empty"},
    {"host_number", "server_id: expected a host name (string), got 10"},
    {"host_hyphen", "label starting with a hyphen"},
    {"host_label64", "label longer than 63"},
    {"host_ipv4", "\"10.0.0.256\" is not a valid IPv4 address"},
    {"host_dots", "empty label"},
    {"host_option", "\"n1 --mca x\" may contain only"},
    {"host_twice", "server_list[1]: server_id \"n1\" is already server_list[0]"},
    {"rank_word", "server_list[0] (n1): device[0]: rank_id \"zero\": expected a non-negative integer"},
    {"rank_half", "rank_id 0.5: expected a non-negative integer"},
    {"rank_negative", "rank_id -1: expected"},
    {"rank_signed_string", "rank_id \"+0\": expected"},
    {"rank_huge", "device[0]: rank_id 1e+300: expected"},
    {"rank_missing", "rank_id (missing): expected"},
    {"rank_bool", "rank_id true: expected"},
    {"rank_twice", "device[1]: rank_id 0 appears twice"},
    {"rank_gap", "rank_id 2: the table has 2 devices, so ranks must be 0..1"},
    {"rank_interleaved", "server_list[0] (n1): ranks 0..2 are not consecutive"},
    {"device_id_word", "device_id \"first\": expected a non-negative integer"},
    {"device_id_twice", "device_id 1 appears twice on this server"},
    {"device_empty", "server_list[0] (n1): device: expected a non-empty array, got []"},
    {"device_not_object", "device[0]: expected an object, got 3"},
    {"server_not_object", "server_list[0]: expected an object, got \"n1\""},
    {"server_list_empty", "server_list: expected a non-empty array"},
    {"server_list_missing", "server_list: expected a non-empty array"},
    {"server_count_wrong", "server_count \"2\": expected the number of servers listed (1)"},
    {"not_json", "not valid JSON"},
    {"empty", "empty file"},
    {"top_array", "server_list: expected a non-empty array"},
};

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b = malloc(1 << 16);
  *n = b ? fread(b, 1, 1 << 16, f) : 0;
  fclose(f);
  return b;
}

static int parse_text(const char *text, ts_rank_table *t) {
  return ts__rank_table_parse("t.json", text, strlen(text), t);
}

int main(void) {
  const char *dir = TS_FIXTURE_DIR "/cli/rank_tables";
  size_t nb = sizeof k_bad / sizeof k_bad[0];
  for (size_t i = 0; i < nb; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", dir, k_bad[i].file);
    size_t n = 0;
    char *b = slurp(path, &n);
    CHECK_MSG(b != NULL, "%s: cannot read", path);
    if (!b) continue;
    ts_rank_table t;
    int rc = ts__rank_table_parse(path, b, n, &t);
    const char *m = ts_last_error();
    CHECK_MSG(rc == TS_EFORMAT, "%s: rc %d, want TS_EFORMAT", k_bad[i].file, rc);
    CHECK_MSG(strstr(m, path) == m, "%s: message does not start with the file: %s", k_bad[i].file, m);
    CHECK_MSG(strstr(m, k_bad[i].want) != NULL, "%s: message '%s' lacks '%s'", k_bad[i].file, m, k_bad[i].want);
    CHECK_MSG(!strchr(m, '\n') && !strchr(m, '\r'), "%s: message not one line: %s", k_bad[i].file, m);
    if (rc == TS_OK) ts__rank_table_free(&t);
    free(b);
  }
  /* every file of the corpus is in the table above */
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  int files = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    files++;
    int known = 0;
    for (size_t i = 0; i < nb; i++)
      if (!strncmp(e->d_name, k_bad[i].file, strlen(k_bad[i].file)) && !strcmp(e->d_name + strlen(k_bad[i].file), ".json"))
        known = 1;
    CHECK_MSG(known, "%s: not listed in test_rank_table.c", e->d_name);
  }
  if (d) closedir(d);
  CHECK(files == (int)nb);

  /* the example table: servers in rank order, one line each */
  char path[512];
  snprintf(path, sizeof path, "%s/cli/rank_table_4.json", TS_FIXTURE_DIR);
  size_t n = 0;
  char *b = slurp(path, &n);
  ts_rank_table t;
  CHECK_OK(ts__rank_table_parse(path, b, n, &t));
  CHECK(t.nranks == 4 && t.nservers == 2);
  char hosts[256];
  CHECK(ts__rank_table_hostfile(&t, hosts, sizeof hosts) == strlen("10.0.0.1 slots=2\n10.0.0.2 slots=2\n"));
  CHECK_MSG(!strcmp(hosts, "10.0.0.1 slots=2\n10.0.0.2 slots=2\n"), "host file: %s", hosts);
  ts__rank_table_free(&t);
  free(b);
  /* good forms: numbers and digit strings, host names with hyphens, device ids not from 0 */
  CHECK_OK(parse_text("{\"server_count\":2,\"server_list\":[{\"server_id\":\"node-2.cluster.local\",\"device\":"
                      "[{\"rank_id\":2,\"device_id\":4},{\"rank_id\":\"3\",\"device_id\":\"5\"}]},"
                      "{\"server_id\":\"n1\",\"device\":[{\"rank_id\":1.0},{\"rank_id\":\"0\"}]}]}", &t));
  CHECK(t.nranks == 4 && t.nservers == 2 && !strcmp(t.servers[0].host, "n1") && t.servers[1].first_rank == 2);
  ts__rank_table_free(&t);
  /* escaping keeps a message one line and bounded */
  char esc[80];
  ts__escape("a\nb\"\x01", 5, esc, sizeof esc);
  CHECK_MSG(!strcmp(esc, "\"a\\nb\\\"\\x01\""), "%s", esc);
  char longs[300];
  memset(longs, 'x', sizeof longs);
  ts__escape(longs, sizeof longs, esc, sizeof esc);
  CHECK(strlen(esc) < sizeof esc && strstr(esc, "...\""));
  /* OpenMPI host files (launch --min-ranks): hosts with slots, comments, other options */
  const char *hf = "# cluster\nnodeA slots=2 max_slots=4\n\n  nodeB\tslots=4   # gpu\nnodeC slots=2\n";
  CHECK_OK(ts__hostfile_parse(hf, strlen(hf), &t));
  CHECK(t.nservers == 3 && t.nranks == 8 && !strcmp(t.servers[1].host, "nodeB") && t.servers[1].slots == 4 &&
        t.servers[1].first_rank == 2 && t.servers[2].first_rank == 6);
  /* rank 3 lived on nodeB: the host goes, the others are renumbered in order; ranks past the
   * table are ignored */
  int lost[] = {3, 5, 99};
  CHECK(ts__rank_table_drop(&t, lost, 3) == 1);
  CHECK(t.nservers == 2 && t.nranks == 4 && !strcmp(t.servers[1].host, "nodeC") && t.servers[1].first_rank == 2);
  CHECK(ts__rank_table_hostfile(&t, hosts, sizeof hosts) > 0 && !strcmp(hosts, "nodeA slots=2\nnodeC slots=2\n"));
  int first[] = {0};
  CHECK(ts__rank_table_drop(&t, first, 1) == 1 && t.nranks == 2 && t.servers[0].first_rank == 0);
  ts__rank_table_free(&t);
  /* a host without slots: the ranks cannot be placed (mpirun would count its cores) */
  CHECK(ts__hostfile_parse("a slots=2\nb\n", 12, &t) == TS_ENOTFOUND && t.nservers == 0 && !t.servers);
  CHECK_MSG(strstr(ts_last_error(), "host b has no slots=K"), "%s", ts_last_error());
  CHECK(ts__hostfile_parse("a slots=x\n", 10, &t) == TS_EFORMAT && strstr(ts_last_error(), "'slots=x'"));
  CHECK(ts__hostfile_parse("a slots=0\n", 10, &t) == TS_EFORMAT);
  CHECK(ts__hostfile_parse("# nothing\n\n", 11, &t) == TS_ENOTFOUND);
  /* the syntax check before mpirun (whose parse error is a multi-line box, issue 33): OpenMPI's
   * lines pass, a host without slots included; garbage is refused naming its line and token */
  const char *good = "# hosts\nnode-1.example slots=4 max_slots=8\n10.0.0.2\nuser@gpu_b slots=2 # spare\n[fe80::1] slots=1\n";
  CHECK_MSG(ts__hostfile_check(good, strlen(good)) == TS_OK, "%s", ts_last_error());
  const char *bad = "a slots=2\nthis is : not a hostfile ===\n";
  CHECK(ts__hostfile_check(bad, strlen(bad)) == TS_EFORMAT);
  CHECK_MSG(strstr(ts_last_error(), "line 2: 'is' after host this is not KEY=N"), "%s", ts_last_error());
  CHECK(ts__hostfile_check("n slots=abc\n", 12) == TS_EFORMAT && strstr(ts_last_error(), "'slots=abc'"));
  CHECK(ts__hostfile_check("n slots=\n", 9) == TS_EFORMAT);
  CHECK(ts__hostfile_check("n =3\n", 5) == TS_EFORMAT);
  CHECK(ts__hostfile_check("ho$t slots=1\n", 13) == TS_EFORMAT && strstr(ts_last_error(), "line 1: 'ho$t'"));
  CHECK(ts__hostfile_check("# only a comment\n", 17) == TS_ENOTFOUND);
  return ts_test_finish("test_rank_table");
}
