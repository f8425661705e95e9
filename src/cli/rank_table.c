/* MindSpore/HCCL rank tables: parsing and validation (see rank_table.h). */
#include "rank_table.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/base.h"

enum { RT_MAX_RANKS = 1 << 20 };

void ts__escape(const char *s, size_t n, char *buf, size_t cap) {
  size_t o = 0;
  if (cap < 8) {
    if (cap) buf[0] = 0;
    return;
  }
  size_t limit = cap - 6 < 64 ? cap - 6 : 64; /* room for the closing quote, "..." and NUL */
  buf[o++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    char e[8];
    if (ch == '\n') snprintf(e, sizeof e, "\\n");
    else if (ch == '\t') snprintf(e, sizeof e, "\\t");
    else if (ch == '\r') snprintf(e, sizeof e, "\\r");
    else if (ch == '"' || ch == '\\') snprintf(e, sizeof e, "\\%c", ch);
    else if (ch < 0x20 || ch >= 0x7f) snprintf(e, sizeof e, "\\x%02x", ch);
    else snprintf(e, sizeof e, "%c", ch);
    size_t el = strlen(e);
    if (o + el > limit) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    memcpy(buf + o, e, el);
    o += el;
  }
  buf[o++] = '"';
  buf[o] = 0;
}

/* A JSON value as it appears in the file, escaped and cut: for messages. */
static void show(const cJSON *v, char *buf, size_t cap) {
  if (!v) {
    snprintf(buf, cap, "(missing)");
    return;
  }
  if (cJSON_IsString(v)) {
    ts__escape(v->valuestring, strlen(v->valuestring), buf, cap);
    return;
  }
  char *p = cJSON_PrintUnformatted(v);
  if (!p) {
    snprintf(buf, cap, "(a JSON value)");
    return;
  }
  char e[96];
  ts__escape(p, strlen(p), e, sizeof e);
  /* drop the quotes: it was not a string */
  size_t l = strlen(e);
  snprintf(buf, cap, "%.*s", (int)(l >= 2 ? l - 2 : 0), e + 1);
  free(p);
}

/* A non-negative integer: an integral JSON number, or a string of 1-9 digits. -1 otherwise. */
static long nonneg_int(const cJSON *v) {
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > (double)INT32_MAX || d != floor(d)) return -1;
    return (long)d;
  }
  if (cJSON_IsString(v)) {
    const char *s = v->valuestring;
    size_t l = strlen(s);
    if (l == 0 || l > 9) return -1;
    long x = 0;
    for (size_t i = 0; i < l; i++) {
      if (s[i] < '0' || s[i] > '9') return -1;
      x = 10 * x + (s[i] - '0');
    }
    return x;
  }
  return -1;
}

static int is_ipv4_shaped(const char *s) {
  for (; *s; s++)
    if (!(*s == '.' || (*s >= '0' && *s <= '9'))) return 0;
  return 1;
}

static int valid_ipv4(const char *s) {
  int parts = 0;
  while (*s) {
    int digits = 0, v = 0;
    while (*s >= '0' && *s <= '9') {
      v = v * 10 + (*s - '0');
      if (++digits > 3) return 0;
      s++;
    }
    if (digits == 0 || v > 255) return 0;
    parts++;
    if (*s == '.') {
      s++;
      if (!*s) return 0;
    } else if (*s) {
      return 0;
    }
  }
  return parts == 4;
}

/* NULL if s is a valid host name or IPv4 address, else why not. */
static const char *host_problem(const char *s) {
  size_t total = strlen(s);
  if (total == 0) return "is empty";
  if (total > 253) return "is longer than 253 characters";
  if (is_ipv4_shaped(s)) return valid_ipv4(s) ? NULL : "is not a valid IPv4 address (four numbers 0-255)";
  size_t lab = 0;
  for (size_t i = 0; i <= total; i++) {
    char ch = s[i];
    if (ch == '.' || ch == 0) {
      if (lab == 0) return "has an empty label (a leading, trailing or double dot)";
      if (s[i - 1] == '-') return "has a label ending with a hyphen";
      lab = 0;
      continue;
    }
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
    if (!ok) return "may contain only letters, digits, hyphens and dots (RFC 1123 host name or IPv4 address)";
    if (lab == 0 && ch == '-') return "has a label starting with a hyphen";
    if (++lab > 63) return "has a label longer than 63 characters";
  }
  return NULL;
}

void ts__rank_table_free(ts_rank_table *t) {
  if (!t) return;
  for (int i = 0; i < t->nservers; i++) free(t->servers[i].host);
  free(t->servers);
  memset(t, 0, sizeof *t);
}

static int cmp_server(const void *a, const void *b) {
  const ts_rt_server *x = a, *y = b;
  return (x->first_rank > y->first_rank) - (x->first_rank < y->first_rank);
}

int ts__rank_table_parse(const char *name, const char *text, size_t len, ts_rank_table *out) {
  memset(out, 0, sizeof *out);
  if (!text || len == 0) return ts_error_set(TS_EFORMAT, "%s: empty file", name);
  cJSON *j = cJSON_ParseWithLength(text, len);
  if (!j) return ts_error_set(TS_EFORMAT, "%s: not valid JSON", name);
  int rc = TS_OK;
  char vb[128];
  int *rank_server = NULL; /* rank -> server index, -1 unseen */
  int *dev_seen = NULL;
  ts_rank_table t = {0};
  const cJSON *servers = cJSON_GetObjectItemCaseSensitive(j, "server_list");
  if (!cJSON_IsObject(j) || !cJSON_IsArray(servers) || cJSON_GetArraySize(servers) == 0) {
    rc = ts_error_set(TS_EFORMAT, "%s: server_list: expected a non-empty array", name);
    goto done;
  }
  int ns = cJSON_GetArraySize(servers);
  const cJSON *count = cJSON_GetObjectItemCaseSensitive(j, "server_count");
  if (count) {
    long c = nonneg_int(count);
    if (c < 0 || c != ns) {
      show(count, vb, sizeof vb);
      rc = ts_error_set(TS_EFORMAT, "%s: server_count %s: expected the number of servers listed (%d)", name, vb, ns);
      goto done;
    }
  }
  t.servers = calloc((size_t)ns, sizeof *t.servers);
  if (!t.servers) {
    rc = ts_error_set(TS_ENOMEM, "%s: out of memory", name);
    goto done;
  }
  /* first pass: servers, hosts, device counts */
  int total = 0, s = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, servers) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "server_id");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(e, "device");
    if (!cJSON_IsObject(e)) {
      show(e, vb, sizeof vb);
      rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d]: expected an object, got %s", name, s, vb);
      goto done;
    }
    if (!cJSON_IsString(id)) {
      show(id, vb, sizeof vb);
      rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d]: server_id: expected a host name (string), got %s", name, s, vb);
      goto done;
    }
    const char *why = host_problem(id->valuestring);
    if (why) {
      show(id, vb, sizeof vb);
      rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d]: server_id %s %s", name, s, vb, why);
      goto done;
    }
    for (int p = 0; p < s; p++)
      if (!strcmp(t.servers[p].host, id->valuestring)) {
        show(id, vb, sizeof vb);
        rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d]: server_id %s is already server_list[%d]", name, s, vb, p);
        goto done;
      }
    int nd = cJSON_GetArraySize(dev);
    if (!cJSON_IsArray(dev) || nd == 0) {
      show(dev, vb, sizeof vb);
      rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d] (%s): device: expected a non-empty array, got %s", name, s,
                        id->valuestring, vb);
      goto done;
    }
    if (nd > RT_MAX_RANKS - total) {
      rc = ts_error_set(TS_EFORMAT, "%s: more than %d devices", name, RT_MAX_RANKS);
      goto done;
    }
    t.servers[s].host = strdup(id->valuestring);
    if (!t.servers[s].host) {
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory", name);
      goto done;
    }
    t.servers[s].slots = nd;
    t.nservers = ++s;
    total += nd;
  }
  rank_server = malloc(sizeof *rank_server * (size_t)total);
  dev_seen = malloc(sizeof *dev_seen * (size_t)total);
  if (!rank_server || !dev_seen) {
    rc = ts_error_set(TS_ENOMEM, "%s: out of memory", name);
    goto done;
  }
  for (int r = 0; r < total; r++) rank_server[r] = -1;
  /* second pass: ranks and device ids */
  s = 0;
  cJSON_ArrayForEach(e, servers) {
    const char *host = t.servers[s].host;
    int nd = t.servers[s].slots, lo = total, hi = -1, k = 0;
    const cJSON *d;
    for (int i = 0; i < nd; i++) dev_seen[i] = -1;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(e, "device")) {
      if (!cJSON_IsObject(d)) {
        show(d, vb, sizeof vb);
        rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d] (%s): device[%d]: expected an object, got %s", name, s,
                          host, k, vb);
        goto done;
      }
      const cJSON *rk = cJSON_GetObjectItemCaseSensitive(d, "rank_id");
      long r = nonneg_int(rk);
      if (r < 0) {
        show(rk, vb, sizeof vb);
        rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d] (%s): device[%d]: rank_id %s: expected a non-negative "
                          "integer", name, s, host, k, vb);
        goto done;
      }
      if (r >= total) {
        rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d] (%s): device[%d]: rank_id %ld: the table has %d devices, "
                          "so ranks must be 0..%d", name, s, host, k, r, total, total - 1);
        goto done;
      }
      if (rank_server[r] >= 0) {
        rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d] (%s): device[%d]: rank_id %ld appears twice (also in "
                          "server_list[%d])", name, s, host, k, r, rank_server[r]);
        goto done;
      }
      rank_server[r] = s;
      if (r < lo) lo = (int)r;
      if (r > hi) hi = (int)r;
      const cJSON *di = cJSON_GetObjectItemCaseSensitive(d, "device_id");
      if (di) {
        long v = nonneg_int(di);
        if (v < 0) {
          show(di, vb, sizeof vb);
          rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d] (%s): device[%d] (rank %ld): device_id %s: expected a "
                            "non-negative integer", name, s, host, k, r, vb);
          goto done;
        }
        for (int q = 0; q < k; q++)
          if (dev_seen[q] == v) {
            rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d] (%s): device[%d] (rank %ld): device_id %ld appears "
                              "twice on this server (also device[%d])", name, s, host, k, r, v, q);
            goto done;
          }
        dev_seen[k] = (int)v;
      }
      k++;
    }
    if (hi - lo + 1 != nd) {
      rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d] (%s): ranks %d..%d are not consecutive (%d devices): "
                        "mpirun places consecutive ranks on each host", name, s, host, lo, hi, nd);
      goto done;
    }
    t.servers[s].first_rank = lo;
    s++;
  }
  /* every rank 0..total-1 was seen: total ranks, all distinct, all < total */
  qsort(t.servers, (size_t)t.nservers, sizeof *t.servers, cmp_server);
  t.nranks = total;
  *out = t;
  t.servers = NULL;
  t.nservers = 0;
done:
  ts__rank_table_free(&t);
  free(rank_server);
  free(dev_seen);
  cJSON_Delete(j);
  return rc;
}

size_t ts__rank_table_hostfile(const ts_rank_table *t, char *buf, size_t cap) {
  size_t n = 0;
  for (int s = 0; s < t->nservers; s++) {
    int w = snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0, "%s slots=%d\n", t->servers[s].host,
                     t->servers[s].slots);
    if (w > 0) n += (size_t)w;
  }
  if (cap && n >= cap) buf[cap - 1] = 0;
  return n;
}

int ts__hostfile_check(const char *text, size_t len) {
  int hosts = 0, lineno = 0;
  for (size_t i = 0; i < len;) {
    size_t e = i;
    while (e < len && text[e] != '\n') e++;
    char line[1024];
    size_t l = e - i < sizeof line - 1 ? e - i : sizeof line - 1;
    memcpy(line, text + i, l);
    line[l] = 0;
    i = e + 1;
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *save = NULL, *host = strtok_r(line, " \t\r", &save);
    if (!host) continue;
    for (const char *c = host; *c; c++)
      if (!isalnum((unsigned char)*c) && !strchr(".-_:@[]", *c))
        return ts_error_set(TS_EFORMAT, "line %d: '%s' is not a host name or address", lineno, host);
    for (char *tok = strtok_r(NULL, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save)) {
      const char *eq = strchr(tok, '=');
      int ok = eq && eq > tok && eq[1];
      for (const char *c = tok; ok && c < eq; c++) ok = isalpha((unsigned char)*c) || *c == '_' || *c == '-';
      for (const char *c = eq ? eq + 1 : tok; ok && *c; c++) ok = isdigit((unsigned char)*c);
      if (!ok)
        return ts_error_set(TS_EFORMAT, "line %d: '%s' after host %s is not KEY=N (slots=N, max_slots=N, ...)", lineno,
                            tok, host);
    }
    hosts++;
  }
  return hosts ? TS_OK : ts_error_set(TS_ENOTFOUND, "no host in it");
}

int ts__hostfile_parse(const char *text, size_t len, ts_rank_table *out) {
  memset(out, 0, sizeof *out);
  int rc = TS_OK, cap = 0;
  size_t i = 0;
  while (i < len && rc == TS_OK) {
    size_t e = i;
    while (e < len && text[e] != '\n') e++;
    char line[1024];
    size_t l = e - i < sizeof line - 1 ? e - i : sizeof line - 1;
    memcpy(line, text + i, l);
    line[l] = 0;
    i = e + 1;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *save = NULL, *host = strtok_r(line, " \t\r", &save);
    if (!host) continue;
    long slots = -1;
    for (char *tok = strtok_r(NULL, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save)) {
      if (strncmp(tok, "slots=", 6)) continue;
      char *end = NULL;
      slots = strtol(tok + 6, &end, 10);
      if (!tok[6] || *end || slots < 1 || slots > RT_MAX_RANKS) {
        rc = ts_error_set(TS_EFORMAT, "host %s: '%s' is not slots=K with K from 1 to %d", host, tok, RT_MAX_RANKS);
        break;
      }
    }
    if (rc) break;
    if (slots < 0) {
      rc = ts_error_set(TS_ENOTFOUND, "host %s has no slots=K", host);
      break;
    }
    if (out->nservers == cap) {
      int nc = cap ? 2 * cap : 8;
      ts_rt_server *s = realloc(out->servers, sizeof *s * (size_t)nc);
      if (!s) {
        rc = ts_error_set(TS_ENOMEM, "host file: out of memory");
        break;
      }
      out->servers = s;
      cap = nc;
    }
    ts_rt_server *s = &out->servers[out->nservers];
    if (!(s->host = strdup(host))) {
      rc = ts_error_set(TS_ENOMEM, "host file: out of memory");
      break;
    }
    s->slots = (int)slots;
    s->first_rank = out->nranks;
    if (out->nranks > RT_MAX_RANKS - (int)slots) {
      free(s->host);
      rc = ts_error_set(TS_EFORMAT, "host file: more than %d slots", RT_MAX_RANKS);
      break;
    }
    out->nranks += (int)slots;
    out->nservers++;
  }
  if (!rc && !out->nservers) rc = ts_error_set(TS_ENOTFOUND, "host file: no host");
  if (rc) ts__rank_table_free(out);
  return rc;
}

int ts__rank_table_drop(ts_rank_table *t, const int *lost, int nlost) {
  int kept = 0, dropped = 0;
  for (int s = 0; s < t->nservers; s++) {
    ts_rt_server *sv = &t->servers[s];
    int hit = 0;
    for (int k = 0; k < nlost; k++) hit |= lost[k] >= sv->first_rank && lost[k] < sv->first_rank + sv->slots;
    if (hit) {
      free(sv->host);
      dropped++;
    } else {
      t->servers[kept++] = *sv;
    }
  }
  t->nservers = kept;
  t->nranks = 0;
  for (int s = 0; s < kept; s++) {
    t->servers[s].first_rank = t->nranks;
    t->nranks += t->servers[s].slots;
  }
  return dropped;
}
