/* Private to the data layer and its tests: the random decisions ts_transforms_apply made, so a
 * test can call the deterministic reference operation (torchvision's functional crop, erase, ...)
 * with exactly the same parameters. Not installed. */
#ifndef TS_DATA_TRANSFORM_INTERNAL_H
#define TS_DATA_TRANSFORM_INTERNAL_H

#include "tessera/data.h"

/* What transform j did to one sample. */
typedef struct {
  int applied; /* flips, random erasing: the probability test passed; others: 1 */
  /* random_crop: (top, left) in the padded image, as torchvision's F.crop(F.pad(img, pad), top,
   * left, h, w); center_crop: the same in the unpadded image (may be negative when padding);
   * random_erasing: (top, left, h, w) of the erased box as F.erase(img, top, left, h, w, 0)
   * (h = w = 0 when all 10 attempts failed and nothing was erased). */
  int top, left, h, w;
} ts_tf_draw;

/* ts_transforms_apply that also records the decision of every transform in draws[0..n) (may be
 * NULL). */
int ts__transforms_apply_traced(const ts_transform *t, int n, ts_sample *s, uint64_t key,
                                ts_tf_draw *draws);

/* The key a pipeline with this seed passes to ts_transforms_apply for sample `index` (a dataset
 * index, not a position) in `epoch` (pipeline.c). */
uint64_t ts__sample_key(uint64_t seed, int64_t epoch, int64_t index);

#endif
