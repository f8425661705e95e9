/* ckpt_compare A B [TOL]: compares two tessera checkpoints tensor by tensor (parameters, buffers
 * and optimizer state) and their training position (tessera.step, epoch, batch_index), ignoring
 * the rest of the metadata (the config text, which names other folders). Without TOL every tensor
 * must be bitwise equal; with TOL each f32 element must satisfy |a - b| <= TOL * max(1, |b|)
 * (other dtypes bitwise). Prints one line: the tensors compared and the largest difference.
 * Exit 0 equal, 1 different, 2 unreadable. Used by tests/cli/elastic_test.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/io.h"

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: ckpt_compare A.safetensors B.safetensors [TOL]\n");
    return 2;
  }
  double tol = argc == 4 ? atof(argv[3]) : -1;
  ts_st_file *a = NULL, *b = NULL;
  if (ts_st_open(argv[1], &a) || ts_st_open(argv[2], &b)) {
    fprintf(stderr, "ckpt_compare: %s\n", ts_last_error());
    ts_st_close(a);
    return 2;
  }
  int bad = 0, nbit = 0;
  double worst = 0, worst_rel = 0;
  const char *worst_name = "";
  static const char *const pos[] = {"tessera.step", "tessera.epoch", "tessera.batch_index"};
  for (int i = 0; i < 3; i++) {
    const char *x = ts_st_meta(a, pos[i]), *y = ts_st_meta(b, pos[i]);
    if (!x || !y || strcmp(x, y)) {
      printf("%s: %s vs %s\n", pos[i], x ? x : "(none)", y ? y : "(none)");
      bad = 1;
    }
  }
  if (ts_st_count(a) != ts_st_count(b)) {
    printf("%d tensors vs %d\n", ts_st_count(a), ts_st_count(b));
    bad = 1;
  }
  for (int i = 0; i < ts_st_count(a) && !bad; i++) {
    const char *name = ts_st_name(a, i);
    ts_tensor x, y;
    if (ts_st_get(a, i, &x) || ts_st_find(b, name, &y)) {
      printf("%s: not in %s\n", name, argv[2]);
      bad = 1;
      break;
    }
    size_t nb = ts_tensor_nbytes(&x);
    if (x.dtype != y.dtype || !ts_shape_equal(&x.shape, &y.shape)) {
      printf("%s: another dtype or shape\n", name);
      bad = 1;
      break;
    }
    if (!memcmp(x.data, y.data, nb)) {
      nbit++;
      continue;
    }
    if (tol < 0 || x.dtype != TS_F32) {
      printf("%s: not bitwise equal\n", name);
      bad = 1;
      break;
    }
    const float *p = x.data, *q = y.data;
    for (int64_t k = 0; k < ts_tensor_numel(&x); k++) {
      double d = fabs((double)p[k] - (double)q[k]), lim = tol * fmax(1.0, fabs((double)q[k]));
      if (!(d <= lim)) bad = 1;
      if (d > worst || d != d) {
        worst = d;
        worst_rel = d / fmax(1.0, fabs((double)q[k]));
        worst_name = name;
      }
    }
  }
  if (!bad)
    printf("equal: %d tensors, %d bitwise; largest difference %.3g (%.3g relative) in %s\n", ts_st_count(a), nbit, worst,
           worst_rel, worst > 0 ? worst_name : "none");
  else if (worst > 0)
    printf("different: largest difference %.3g (%.3g relative) in %s (tolerance %g)\n", worst, worst_rel, worst_name, tol);
  ts_st_close(a);
  ts_st_close(b);
  return bad;
}
