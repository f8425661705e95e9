/* Tessera base layer: status codes, error messages, logging hook, counter-based RNG, timers.
 *
 * Error convention (libuv-style): every fallible function returns an int status, TS_OK (0) on
 * success or a negative TS_E* code. The human-readable message of the last failure on this
 * thread (naming the file, key, op or shape at fault) is available from ts_last_error().
 * Library code never prints except through the logging hook and never exits. */
#ifndef TESSERA_BASE_H
#define TESSERA_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X-macro: code name, value, short description. */
#define TS_ERRNO_MAP(X)                                                   \
  X(OK, 0, "success")                                                     \
  X(EINVAL, -1, "invalid argument")                                       \
  X(ESHAPE, -2, "shape mismatch")                                         \
  X(EDTYPE, -3, "dtype mismatch")                                         \
  X(ENOMEM, -4, "out of memory")                                          \
  X(EIO, -5, "input/output error")                                        \
  X(EFORMAT, -6, "malformed file")                                        \
  X(ENOTFOUND, -7, "not found")                                           \
  X(EGRAPH, -8, "invalid graph")                                          \
  X(EBACKEND, -9, "kernel backend error")                                 \
  X(ECONFIG, -10, "configuration error")                                  \
  X(EUNSUPPORTED, -11, "unsupported")                                     \
  X(ERANGE, -12, "value out of range")                                    \
  X(ECOMM, -13, "communication error")                                    \
  X(EDIVERGED, -14, "training diverged")

typedef enum {
#define TS__ERR_ENUM(name, val, str) TS_##name = val,
  TS_ERRNO_MAP(TS__ERR_ENUM)
#undef TS__ERR_ENUM
} ts_err;

/* Short name of a status code ("shape mismatch"); never NULL. */
const char *ts_strerror(int code);
/* Message of the last failure on the calling thread ("" if none). Valid until the next failure. */
const char *ts_last_error(void);
/* Records a failure message (printf-style) for this thread and returns `code`. */
int ts_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current thread's message with context ("loading x.safetensors: ..."); returns code. */
int ts_error_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Refusals of what a user wrote (TS_EINVAL, TS_ESHAPE, TS_EUNSUPPORTED: a strategy, a layout)
 * as configuration errors of the job: returns TS_ECONFIG keeping the message; rc otherwise. */
int ts_error_as_config(int rc);

/* ---- logging ---- */
typedef enum { TS_LOG_DEBUG = 0, TS_LOG_INFO = 1, TS_LOG_WARN = 2, TS_LOG_ERROR = 3 } ts_log_level;
typedef void (*ts_log_fn)(ts_log_level level, const char *msg, void *user);
/* Installs the logging hook (NULL restores the default, which writes WARN and above to stderr). */
void ts_log_set_hook(ts_log_fn fn, void *user);
/* Messages below `level` are dropped before formatting. */
void ts_log_set_level(ts_log_level level);
void ts_log(ts_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* This process's rank and the job's size as the launcher put them in the environment (OpenMPI's
 * mpirun, MPICH/Hydra, PMIx, Slurm's srun), without MPI: rank 0 of 1 outside a job. The default
 * hook prefixes its lines with "[rank R of N] " when N > 1, and writes each with one write(2)
 * so that the lines of several ranks sharing a stream do not interleave. */
void ts_job_rank(int *rank, int *size);

/* ---- counter-based RNG: Philox-4x32-10 ----
 * A pure function of (key, counter): any element of any random stream can be computed alone,
 * which is how every rank creates exactly its slice of a parameter. */
typedef struct { uint32_t v[4]; } ts_philox_out;
ts_philox_out ts_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo);
/* Uniform float in [0,1) from 32 random bits (24-bit mantissa). */
static inline float ts_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
/* 64-bit FNV-1a hash of a string, mixed with a seed: the per-name key of a random stream. */
uint64_t ts_hash_name(const char *name, uint64_t seed);
/* Uniform [0,1) and standard normal draws for element `index` of stream `key`. */
float ts_rng_uniform_at(uint64_t key, uint64_t index);
float ts_rng_normal_at(uint64_t key, uint64_t index);

/* ---- time ---- */
/* Monotonic time in seconds. */
double ts_time_now(void);

/* ---- threads ---- */
/* Number of threads kernels use (OMP_NUM_THREADS or the core count); set overrides. */
int ts_threads_get(void);
void ts_threads_set(int n);

/* ---- process memory ---- */
/* Bytes of this process's peak resident set so far (getrusage's ru_maxrss); 0 if unknown. */
int64_t ts_mem_peak_rss(void);
/* Bytes of this process's resident set now (/proc/self/statm); 0 if unknown. */
int64_t ts_mem_rss(void);

/* Library version string "MAJOR.MINOR.PATCH". */
const char *ts_version(void);

#ifdef __cplusplus
}
#endif
#endif
