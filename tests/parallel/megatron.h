/* Megatron-style strategies for the zoo GPT as tensor parallel t x data parallel d (d*t
 * devices): vocabulary-parallel embedding, head and loss, column- then row-parallel MLP,
 * attention split by heads (the fused q|k|v projections column-parallel), layer norms
 * replicated over the tensor-parallel ranks. Shared by test_pass and test_pass_mpi. */
#ifndef TS_TEST_MEGATRON_H
#define TS_TEST_MEGATRON_H

#include <stdio.h>

#include "tessera/strategy.h"
#include "test_util.h"

static inline ts_strategy_set *ts_test_megatron(int d, int t) {
  static const char *const names[] = {
      "transformer.embedding",             "transformer.h.*.ln_*.layernorm",
      "transformer.h.*.attn.c_attn.dense*", "transformer.h.*.attn.attention",
      "transformer.h.*.attn.c_proj.dense", "transformer.h.*.mlp.c_fc.dense",
      "transformer.h.*.mlp.c_proj.dense",  "transformer.ln_f.layernorm",
      "dense",                             "softmax_ce"};
  char b[10][64];
  snprintf(b[0], 64, "((%d,1),(%d,1))", d, t);
  snprintf(b[1], 64, "((%d,1,1),(1,),(1,))", d);
  snprintf(b[2], 64, "((%d,1,1),(%d,1),(%d,))", d, t, t);
  snprintf(b[3], 64, "((%d,%d,1,1),(%d,%d,1,1),(%d,%d,1,1))", d, t, d, t, d, t);
  snprintf(b[4], 64, "((%d,1,%d),(1,%d))", d, t, t);
  snprintf(b[5], 64, "((%d,1,1),(%d,1))", d, t);
  snprintf(b[6], 64, "((%d,1,%d),(1,%d))", d, t, t);
  snprintf(b[7], 64, "((%d,1,1),(1,),(1,))", d);
  snprintf(b[8], 64, "((%d,1,1),(%d,1))", d, t);
  snprintf(b[9], 64, "((%d,%d),(%d,))", d, t, d);
  ts_strategy_set *s = NULL;
  CHECK_OK(ts_strategy_set_create(d * t, 0, &s));
  for (int i = 0; s && i < 10; i++) CHECK_OK(ts_strategy_set_put_text(s, names[i], b[i]));
  return s;
}

#endif
