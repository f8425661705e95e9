/* Tessera data layer: sources, samplers (sharding), transforms, and a multi-threaded pipeline.
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   int rank = 0, size = 1;               // this process's shard of the data set
 *   ts_source *src;  ts_source_cifar("/data/cifar-10-batches-bin", 0, 1, &src);
 *   const float mean[] = {0.49f, 0.48f, 0.45f}, std[] = {0.25f, 0.24f, 0.26f};
 *   ts_transform tf[] = {ts_tf_random_crop(32, 32, 4), ts_tf_hflip(0.5f),
 *                        ts_tf_to_float(1.0f / 255), ts_tf_normalize(3, mean, std), ts_tf_hwc_to_chw()};
 *   ts_pipeline_config pc = ts_pipeline_config_default();
 *   pc.source = src; pc.transforms = tf; pc.ntransforms = 5; pc.batch_size = 64;
 *   pc.sampler.kind = TS_SAMPLER_DISTRIBUTED; pc.sampler.num_shards = size; pc.sampler.shard_id = rank;
 *   ts_pipeline *p;  ts_pipeline_create(&pc, &p);
 *   ts_batch b;
 *   while (ts_pipeline_next(p, &b) == TS_OK && b.size) { (void)b; }     // b.size samples
 *   ts_pipeline_free(p);  ts_source_free(src);
 *
 * Determinism: every random decision (shuffle order, crop offsets, flips) is drawn from Philox
 * keyed by (seed, epoch, sample index, transform position), never from a shared stream, so the
 * output for a given seed is identical whatever the number of worker threads. */
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

/* ---- samples ---- */
typedef struct {
  ts_tensor data;   /* images: u8 (H,W,C) as decoded; after transforms often f32 (C,H,W) */
  int64_t label;    /* class id, -1 if none */
  ts_tensor target; /* optional second tensor (text: next-token ids); data == NULL if none */
} ts_sample;
/* Frees owned tensors and resets the sample. */
void ts_sample_free(ts_sample *s);

/* ---- sources ----
 * A source is a random-access collection of samples behind a table of functions (like a ggml
 * backend). `get` must be safe to call from several threads at once. */
typedef struct {
  const char *kind;                                         /* "idx", "cifar10", ... */
  int64_t (*len)(void *self);
  int (*get)(void *self, int64_t index, ts_sample *out);    /* out is filled with owned tensors */
  int64_t (*label)(void *self, int64_t index);              /* optional: label without decoding */
  int (*num_classes)(void *self);                           /* optional: 0 if unknown */
  void (*destroy)(void *self);                              /* optional */
  /* optional: what sample `index` is for a person reading an error (the image's file, or
   * "<file>, record <i>"), written to buf (NUL-terminated, cut to cap); returns TS_OK, or an
   * error when it has no name. */
  int (*sample_name)(void *self, int64_t index, char *buf, size_t cap);
} ts_source_vtable;

typedef struct ts_source ts_source;

/* A user source (the C callback source): vt is copied; self is passed to every call. */
int ts_source_create(const ts_source_vtable *vt, void *self, ts_source **out);
/* Sources are reference-counted: a created source holds one reference, ts_source_ref adds one
 * (and returns s), ts_source_free drops one and destroys the source (vt.destroy) at the last.
 * Safe from any thread. */
ts_source *ts_source_ref(ts_source *s);
void ts_source_free(ts_source *s);

/* ---- named sources: a source of the program's own given to the trainer ----
 * A config's split "source:NAME" (data.train_split / data.test_split; TS_SOURCE_SCHEME) is the
 * source registered as NAME, whatever data.name and data.path say (ts_config_sources, the
 * trainer, tessera._C.Data). This is how a program hands the trainer a source with no file
 * behind it: the Python package's GeneratorDataset registers one over a Python object, a C
 * program its ts_source_create source.
 * Contract: ts_source_register takes a reference (the caller keeps its own) and fails with
 * TS_EINVAL if NAME is taken; a trainer or pipeline that looked the source up holds its own
 * reference, so ts_source_unregister (which drops the table's) never frees a source in use.
 * Names are 1..TS_SOURCE_NAME_MAX bytes; the table is process-wide and locked (any thread). The
 * source's get is called from the pipeline's worker threads, several at once. */
#define TS_SOURCE_SCHEME "source:"
#define TS_SOURCE_NAME_MAX 48
int ts_source_register(const char *name, ts_source *s);
int ts_source_unregister(const char *name); /* TS_ENOTFOUND if NAME is not registered */
/* A new reference to the source registered as NAME (*out; the caller frees it), or
 * TS_ENOTFOUND naming it. */
int ts_source_lookup(const char *name, ts_source **out);
int64_t ts_source_len(const ts_source *s);
const char *ts_source_kind(const ts_source *s);
int ts_source_get(ts_source *s, int64_t index, ts_sample *out);
/* Label of sample `index` (decoding it if the source has no label function); < 0 on error. */
int64_t ts_source_label(ts_source *s, int64_t index);
int ts_source_num_classes(ts_source *s);
/* Name of sample `index` for messages (see sample_name above): 1 if buf holds one, 0 if the
 * source names none (buf = ""); never sets the error message. */
int ts_source_sample_name(ts_source *s, int64_t index, char *buf, size_t cap);

/* MNIST / Fashion-MNIST split ("train" or "t10k"): samples u8 (28,28,1). Reads the header and
 * labels now and the images as they are asked for (up to the last one asked for; docs/data.md). */
int ts_source_mnist(const char *dir, const char *split, ts_source **out);
/* CIFAR binary format as distributed. CIFAR-10 (cifar100 = 0): dir/data_batch_1..5.bin (train) or
 * dir/test_batch.bin, records of 1 label byte + 3072 pixel bytes (R, G, B planes of 32x32).
 * CIFAR-100: dir/train.bin or dir/test.bin, 2 label bytes (coarse, fine; label = fine).
 * Samples u8 (32,32,3). */
int ts_source_cifar(const char *dir, int cifar100, int train, ts_source **out);
/* An image folder: root/<class>/<file>.{png,jpg,jpeg}; classes are the sub-folders in sorted
 * order. Samples u8 (H,W,C) decoded with libpng / libjpeg-turbo. */
int ts_source_image_folder(const char *root, ts_source **out);
/* The same with the classes given (another split of the same data: the training split's
 * ts_source_class_names): a sub-folder's label is the position of its name in classes; a
 * sub-folder whose name is not there is an error naming it and root; classes without a folder
 * have no samples. num_classes is nclasses. */
int ts_source_image_folder_classes(const char *root, const char *const *classes, int nclasses,
                                   ts_source **out);
/* The class names of an image-folder source (owned by it) and their count in *n; NULL (and *n 0)
 * for any other source. */
const char *const *ts_source_class_names(const ts_source *s, int *n);
/* Tessera record shards (see ts_records_write): the paths of every shard file of one set, in any
 * order. Sample i is record i / S of shard i % S, i.e. the order of the source that was written.
 * The files are memory-mapped; headers and indexes are verified here, each record's CRC32 when it
 * is read. Errors name the file and the record number. */
int ts_source_records(const char *const *paths, int npaths, ts_source **out);
/* Text for language models: the bytes of a file cut into sequences of seq_len tokens (byte ids
 * 0..255, i32), starting every `stride` bytes (stride = seq_len if 0); target = the next bytes. */
int ts_source_text(const char *path, int seq_len, int stride, ts_source **out);

/* ---- record format ----
 * Writes every sample of src into num_shards files "<prefix>-SSSSS-of-NNNNN.tsr" (sample i goes
 * to shard i % num_shards), each with a header, the records (each with its own CRC32) and an
 * index; written atomically. The names of the written files go to paths_out if not NULL (caller
 * frees each and the array). */
int ts_records_write(ts_source *src, const char *prefix, int num_shards, char ***paths_out);
/* What the header of one shard file says (verified: magic, version, header CRC, size, index CRC). */
typedef struct {
  int version;
  int shard, num_shards; /* this file is shard `shard` of a set of `num_shards` */
  int64_t count;         /* records in this file */
  int64_t total;         /* records in the whole set */
  int num_classes;       /* of the source it was written from (0 if unknown) */
  char kind[17];         /* kind of the source it was written from ("cifar10", ...) */
  int64_t file_size;
} ts_records_info;
int ts_records_info_read(const char *path, ts_records_info *out);
/* One shard file on its own (for inspection): its records in file order, i.e. the samples
 * shard, shard + num_shards, ... of the original source. */
int ts_source_records_shard(const char *path, ts_source **out);

/* ---- samplers: which sample indices a shard sees in an epoch ---- */
typedef enum {
  TS_SAMPLER_SEQUENTIAL = 0, /* 0..n-1 (of this shard's contiguous part if sharded) */
  TS_SAMPLER_RANDOM,         /* a permutation per epoch from (seed, epoch) */
  TS_SAMPLER_DISTRIBUTED,    /* like torch DistributedSampler: optional shuffle, then shard i takes
                                positions i, i+S, ...; remainder padded by wrapping or dropped */
  TS_SAMPLER_STRATIFIED,     /* distributed, with each shard getting the same class proportions */
} ts_sampler_kind;

typedef struct {
  ts_sampler_kind kind;
  uint64_t seed;
  int shuffle;   /* DISTRIBUTED / STRATIFIED: shuffle each epoch (default 1) */
  int num_shards, shard_id;
  int drop_last; /* 1: drop the remainder; 0: pad by wrapping so every shard has the same count */
} ts_sampler_config;

typedef struct ts_sampler ts_sampler;
/* src is needed for its length and (STRATIFIED) labels. */
int ts_sampler_create(const ts_sampler_config *cfg, ts_source *src, ts_sampler **out);
void ts_sampler_free(ts_sampler *s);
/* Samples per epoch for this shard (identical on every shard; computed without communication). */
int64_t ts_sampler_len(const ts_sampler *s);
/* Fills out[0..len) with this shard's sample indices for `epoch`. */
int ts_sampler_indices(ts_sampler *s, int64_t epoch, int64_t *out);

/* ---- transforms (applied to one sample in order) ---- */
typedef enum {
  TS_TF_RANDOM_CROP,   /* pad by `pad` (zeros) then crop (h,w) at a random offset */
  TS_TF_CENTER_CROP,   /* (h,w) */
  TS_TF_RESIZE,        /* bilinear to (h,w), half-pixel centres as torchvision (antialias off) */
  TS_TF_HFLIP,         /* with probability p */
  TS_TF_VFLIP,         /* with probability p */
  TS_TF_TO_FLOAT,      /* u8 -> f32 times `scale` (rescale), plus `shift` */
  TS_TF_NORMALIZE,     /* per channel (x - mean[c]) / std[c] on f32 (HWC or CHW per `chw`) */
  TS_TF_HWC_TO_CHW,
  TS_TF_CAST,          /* to dtype */
  TS_TF_RANDOM_ERASING /* torchvision RandomErasing(p, scale, ratio, value 0) on f32 CHW */
} ts_transform_kind;

typedef struct {
  ts_transform_kind kind;
  int h, w, pad;
  float p, scale, shift;
  int nch, chw;
  float mean[8], std[8];
  float erase_scale[2], erase_ratio[2];
  ts_dtype dtype;
  /* optional, for messages: the config list this transform comes from and its position there
   * ("data.transforms", 2 -> "data.transforms[2] (resize): ..."); NULL: "transform <j>" */
  const char *list;
  int list_index;
  int reserved; /* 0: the struct has no padding, so copies carry every byte (configs compare bytewise) */
} ts_transform;

ts_transform ts_tf_random_crop(int h, int w, int pad);
ts_transform ts_tf_center_crop(int h, int w);
ts_transform ts_tf_resize(int h, int w);
ts_transform ts_tf_hflip(float p);
ts_transform ts_tf_vflip(float p);
ts_transform ts_tf_to_float(float scale);
ts_transform ts_tf_normalize(int nch, const float *mean, const float *std); /* on HWC */
ts_transform ts_tf_hwc_to_chw(void);
ts_transform ts_tf_cast(ts_dtype dt);
ts_transform ts_tf_random_erasing(float p);
/* Applies transforms[0..n) to s in place; `key` seeds this sample's random draws (the pipeline
 * derives it with Philox from (seed, epoch, dataset index), so a sample's augmentation does not
 * depend on the shard count or the worker count). Errors name the transform and the sample shape. */
int ts_transforms_apply(const ts_transform *t, int n, ts_sample *s, uint64_t key);

/* ---- pipeline: sample -> map (N worker threads) -> shuffle buffer -> batch -> repeat/prefetch ---- */
typedef struct {
  ts_source *source;
  ts_sampler_config sampler; /* its seed is replaced by the pipeline's `seed` */
  const ts_transform *transforms;
  int ntransforms;
  int num_workers;    /* map threads (0 = in the calling thread) */
  int batch_size;
  int drop_remainder; /* drop the last partial batch of an epoch */
  int shuffle_buffer; /* 0 = off; else a seeded reservoir of this many samples */
  int prefetch;       /* batches prepared ahead (default 2) */
  int64_t epochs;     /* repeat count; -1 = forever */
  uint64_t seed;
  /* optional: every transformed sample must have this data shape and dtype (what the consumer's
   * graph was built for); a sample that does not fails its batch with a message naming `name`
   * (e.g. "test split"), the dataset index and both shapes. expect_shape.ndim 0: no check. */
  ts_shape expect_shape;
  ts_dtype expect_dtype;
  const char *name;
} ts_pipeline_config;

ts_pipeline_config ts_pipeline_config_default(void);

typedef struct {
  ts_tensor data;   /* (B, ...) stacked samples */
  ts_tensor labels; /* (B) i32 */
  ts_tensor target; /* (B, ...) if samples have targets */
  int size;         /* B; 0 at the end of the data */
  int64_t epoch, index; /* epoch and batch index within it */
} ts_batch;

typedef struct ts_pipeline ts_pipeline;
int ts_pipeline_create(const ts_pipeline_config *cfg, ts_pipeline **out);
void ts_pipeline_free(ts_pipeline *p);
/* Next batch (owned by the pipeline, valid until the next call). At the end, size == 0. */
int ts_pipeline_next(ts_pipeline *p, ts_batch *out);
/* Batches per epoch for this shard. */
int64_t ts_pipeline_batches_per_epoch(const ts_pipeline *p);
/* Restarts at (epoch, batch index): the next batch is the one a fresh run would give there. */
int ts_pipeline_seek(ts_pipeline *p, int64_t epoch, int64_t index);

#ifdef __cplusplus
}
#endif
#endif
