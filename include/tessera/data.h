/* Tessera data layer (sources, samplers, transforms, pipelines). */
#ifndef TESSERA_DATA_H
#define TESSERA_DATA_H

#include "tessera/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default location of Debian's dataset-fashion-mnist package. */
#define TS_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Reads an IDX file (MNIST format), gzip-compressed or plain, into a new u8 tensor whose shape is
 * the file's dimensions. Errors name the file and what is wrong (magic, dtype, truncation). */
int ts_idx_load(const char *path, ts_tensor *out);

/* Loads an MNIST-style split from dir: "<split>-images-idx3-ubyte[.gz]" and
 * "<split>-labels-idx1-ubyte[.gz]" (split "train" or "t10k"). Images (N,28,28) u8, labels (N) u8.
 * Checks the counts agree and labels are < 10. */
int ts_mnist_load(const char *dir, const char *split, ts_tensor *images, ts_tensor *labels);

#ifdef __cplusplus
}
#endif
#endif
