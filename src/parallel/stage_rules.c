/* A stage cut written as parallel.stages rules (src/parallel/stage.h: ts_stage_rules_of): the
 * fewest operator-name prefixes that pin every node to the piece it has, so that a cut decided
 * once (the balanced cut of a searched plan) travels as a value and is rebuilt exactly. Pure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pass_impl.h"
#include "parallel/stage.h"

/* One prefix of one node's operator key: its first `parts` dot-parts. */
typedef struct {
  const char *key; /* the node's key (not owned) */
  size_t len;      /* the prefix's length in key */
  int node, piece;
  int uniform;     /* every node under the prefix is on one piece */
  int emitted;
} pfx;

static int pfx_cmp(const void *a, const void *b) {
  const pfx *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->key, y->key, n);
  if (c) return c;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->node - y->node;
}

static int pfx_same(const pfx *x, const pfx *y) { return x->len == y->len && !memcmp(x->key, y->key, x->len); }

/* The entry of (node j's key cut to len) in the sorted array, or NULL. */
static pfx *pfx_find(pfx *v, size_t n, const char *key, size_t len) {
  size_t lo = 0, hi = n;
  pfx want = {key, len, -1, 0, 0, 0};
  while (lo < hi) { /* the first entry not below want (node -1 sorts before every node) */
    size_t mid = (lo + hi) / 2;
    if (pfx_cmp(&v[mid], &want) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && pfx_same(&v[lo], &want) ? &v[lo] : NULL;
}

int ts_stage_rules_of(const ts_graph *g, const int *piece, int npieces, ts_op_text **rules, int *nrules) {
  *rules = NULL;
  *nrules = 0;
  int n = ts_graph_num_nodes(g), rc = TS_OK;
  if (npieces <= 1) return TS_OK;
  char **keys = calloc((size_t)(n ? n : 1), sizeof *keys);
  if (!keys) return ts_error_set(TS_ENOMEM, "stage rules: out of memory");
  size_t np = 0, cap = 0;
  pfx *v = NULL;
  ts_op_text *out = NULL;
  int nout = 0;
  ts_stage_rule *check = NULL;
  int *again = NULL;
  if ((rc = ts__parallel_op_keys(g, n, keys))) goto done;
  for (int j = 0; j < n; j++) { /* a prefix per dot-part */
    cap++;
    for (const char *c = keys[j]; *c; c++) cap += *c == '.';
  }
  v = malloc(sizeof *v * (cap ? cap : 1));
  if (!v) {
    rc = ts_error_set(TS_ENOMEM, "stage rules: out of memory");
    goto done;
  }
  for (int j = 0; j < n; j++) {
    const char *k = keys[j];
    for (size_t i = 0;; i++)
      if (!k[i] || k[i] == '.') {
        if (i > 0 && np < cap) v[np++] = (pfx){k, i, j, piece[j], 1, 0};
        if (!k[i]) break;
      }
  }
  qsort(v, np, sizeof *v, pfx_cmp);
  for (size_t a = 0, b; a < np; a = b) { /* a group: one prefix, its nodes */
    int uni = 1;
    for (b = a + 1; b < np && pfx_same(&v[a], &v[b]); b++) uni &= v[b].piece == v[a].piece;
    for (size_t i = a; i < b; i++) v[i].uniform = uni;
  }
  /* each node's shortest uniform prefix, once, in node order */
  out = malloc(sizeof *out * (size_t)(n ? n : 1));
  if (!out) {
    rc = ts_error_set(TS_ENOMEM, "stage rules: out of memory");
    goto done;
  }
  for (int j = 0; j < n; j++) {
    const char *k = keys[j];
    for (size_t i = 0;; i++) {
      if (k[i] && k[i] != '.') continue;
      pfx *e = i > 0 ? pfx_find(v, np, k, i) : NULL;
      if (e && e->uniform) {
        if (!e->emitted) {
          e->emitted = 1;
          if (i >= sizeof out[0].op) {
            rc = ts_error_set(TS_ERANGE, "stage rules: operator name %.60s... is longer than %zu bytes", k,
                              sizeof out[0].op - 1);
            goto done;
          }
          memset(&out[nout], 0, sizeof out[nout]);
          memcpy(out[nout].op, k, i);
          snprintf(out[nout].text, sizeof out[nout].text, "%d", e->piece);
          nout++;
        }
        break;
      }
      if (!k[i]) { /* a whole key is its own group: uniform unless two nodes share the name */
        rc = ts_error_set(TS_ECONFIG, "stage rules: two operators are named %s and sit on different stages", k);
        goto done;
      }
    }
  }
  /* the rules must rebuild exactly this cut */
  check = malloc(sizeof *check * (size_t)(nout ? nout : 1));
  again = malloc(sizeof *again * (size_t)(n ? n : 1));
  if (!check || !again) {
    rc = ts_error_set(TS_ENOMEM, "stage rules: out of memory");
    goto done;
  }
  for (int r = 0; r < nout; r++) check[r] = (ts_stage_rule){out[r].op, atoi(out[r].text)};
  if ((rc = ts_stage_assign(g, npieces, check, nout, again))) goto done;
  for (int j = 0; j < n; j++)
    if (again[j] != piece[j]) {
      rc = ts_error_set(TS_ECONFIG, "stage rules: the rules put op %s on stage %d, the cut on %d", keys[j], again[j],
                        piece[j]);
      goto done;
    }
  *rules = out;
  *nrules = nout;
  out = NULL;
done:
  for (int j = 0; j < n; j++) free(keys[j]);
  free(keys);
  free(v);
  free(out);
  free(check);
  free(again);
  return rc;
}
