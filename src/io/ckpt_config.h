/* Internal header of io for the train layer: how a checkpoint's config differs from this run's.
 * Configs are the train layer's (io knows none), so it sets the function that describes the
 * difference, and io's strict refusal of a checkpoint written by another configuration names
 * each differing key with both values (src/io/checkpoint.c, ckpt_manifest.c). */
#ifndef TS_IO_CKPT_CONFIG_H
#define TS_IO_CKPT_CONFIG_H

#include <stddef.h>

/* The training-relevant keys that differ between two configs' YAML text (a checkpoint's, this
 * run's): "key: A in the checkpoint, B now; ..." into out (at most max of them, then "... and K
 * more"); returns how many differ (0 when unknown). */
typedef int (*ts__ckpt_config_diff_fn)(const char *ckpt_yaml, const char *now_yaml, int max, char *out, size_t cap);
void ts__ckpt_set_config_diff(ts__ckpt_config_diff_fn fn);

#endif
