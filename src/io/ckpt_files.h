/* Internal header of io: which files a sliced checkpoint directory holds (for the CLI's checks of
 * an output folder before it is replaced: tessera ckpt merge/reshard --overwrite). */
#ifndef TS_IO_CKPT_FILES_H
#define TS_IO_CKPT_FILES_H

/* 1 if a file of that name belongs in a sliced checkpoint directory: the manifest, a rank file,
 * the strategy file, or the atomic writer's temporary of one of them. */
int ts__ckpt_dir_own(const char *name);

#endif
