/* Operator-name patterns (ts__name_match, src/base/text.c: parallel.strategies rules, stage rules,
 * recompute layers): '*' matches a run of characters other than '.'.
 *  - the cases the docs promise, and the same answers as the plain recursive definition (kept
 *    here as the reference) on every pattern and name of up to 6 characters over {a, b, ., *};
 *  - many stars against a long name that does not match answer at once: the recursive matcher
 *    took time exponential in the stars (tests/fuzz/fuzz_strategy found it with a rule of ~100
 *    stars in a strategy file; the input is in tests/fuzz/corpus/strategy/). */
#include <string.h>
#include <time.h>

#include "base/text.h"
#include "test_util.h"

static int reference(const char *pat, const char *s) {
  while (*pat) {
    if (*pat == '*') {
      pat++;
      for (const char *t = s;; t++) {
        if (reference(pat, t)) return 1;
        if (!*t || *t == '.') return 0;
      }
    }
    if (*pat != *s) return 0;
    pat++;
    s++;
  }
  return *s == 0;
}

/* The n-th string of length len over the alphabet. */
static void nth(char *out, int len, long n, const char *alpha, int na) {
  for (int i = 0; i < len; i++, n /= na) out[i] = alpha[n % na];
  out[len] = 0;
}

int main(void) {
  CHECK(ts__name_match("blocks.*.mlp.fc1", "blocks.0.mlp.fc1"));
  CHECK(ts__name_match("blocks.*.mlp.fc1", "blocks.11.mlp.fc1"));
  CHECK(!ts__name_match("blocks.*.mlp.fc1", "blocks.0.x.mlp.fc1"));
  CHECK(ts__name_match("transformer.h.*.ln_*.layernorm", "transformer.h.3.ln_2.layernorm"));
  CHECK(ts__name_match("dense*", "dense"));
  CHECK(ts__name_match("*", ""));
  CHECK(!ts__name_match("*", "a.b"));
  CHECK(ts__name_match("*.*", "a."));
  CHECK(!ts__name_match("a", "a."));
  CHECK(!ts__name_match("a.", "a"));

  /* the recursive definition, exhaustively on short strings */
  static const char pa[] = "ab.*", sa[] = "ab.";
  char p[8], s[8];
  int differ = 0;
  for (int pl = 0; pl <= 6; pl++) {
    long np = 1;
    for (int i = 0; i < pl; i++) np *= 4;
    for (long i = 0; i < np; i++) {
      nth(p, pl, i, pa, 4);
      for (int sl = 0; sl <= 6; sl++) {
        long ns = 1;
        for (int k = 0; k < sl; k++) ns *= 3;
        for (long k = 0; k < ns; k++) {
          nth(s, sl, k, sa, 3);
          if (ts__name_match(p, s) != reference(p, s) && differ++ < 5)
            fprintf(stderr, "'%s' against '%s': %d, the definition says %d\n", p, s, ts__name_match(p, s),
                    reference(p, s));
        }
      }
    }
  }
  CHECK_MSG(!differ, "%d pattern/name pairs answered otherwise than the definition", differ);

  /* 60 stars against 200 characters that do not match: at once (the recursion: forever) */
  char pat[128], name[256];
  memset(pat, 0, sizeof pat);
  pat[0] = 'x';
  for (int i = 1; i <= 60; i++) pat[i] = i % 2 ? '*' : 'a';
  pat[61] = 'b';
  memset(name, 'a', 200);
  name[0] = 'x';
  name[200] = 0;
  clock_t t0 = clock();
  CHECK(!ts__name_match(pat, name));
  name[199] = 'b';
  CHECK(ts__name_match(pat, name));
  double sec = (double)(clock() - t0) / CLOCKS_PER_SEC;
  CHECK_MSG(sec < 1, "%.2f s for two matches", sec);
  return ts_test_finish("test_name_match");
}
