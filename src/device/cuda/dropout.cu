// Dropout with the CPU's counter-based mask, bit for bit (src/kernels/dropout.h): element i is
// kept iff (w >> 8) >= ceil(p 2^24), w = word (i / 16) % 4 of Philox-4x32-10(seed; step,
// (i / 64) * 16 + i % 16); kept elements scaled by 1 / (1 - p). The mask is never stored: the
// backward is this kernel on dy with the same seed and step.
#include "ts_cuda.h"


// x (n) -> y (n), elements numbered from `offset`; thr = ceil(p 2^24) (host), scale = 1/(1-p)
template <typename T>
DEV void dropout(const T *x, T *y, i64 n, unsigned thr, float scale, unsigned long long seed, unsigned long long step,
                 unsigned long long offset) {
  for (i64 e = gidx(); e < n; e += gstride()) {
    unsigned long long i = offset + (unsigned long long)e;
    unsigned w = philox_word(seed, step, (i / 64) * 16 + i % 16, (int)((i / 16) % 4));
    st(y, e, (w >> 8) >= thr ? ld(x, e) * scale : 0.0f);
  }
}
KERNEL ts_k_dropout_f32(const float *x, float *y, i64 n, unsigned thr, float scale, unsigned long long seed,
                        unsigned long long step, unsigned long long offset) {
  dropout(x, y, n, thr, scale, seed, step, offset);
}
KERNEL ts_k_dropout_bf16(const bf16 *x, bf16 *y, i64 n, unsigned thr, float scale, unsigned long long seed,
                         unsigned long long step, unsigned long long offset) {
  dropout(x, y, n, thr, scale, seed, step, offset);
}
