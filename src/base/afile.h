/* Internal: files written atomically. The data goes to a temporary next to the target (created
 * with O_EXCL), is fsync'ed, then renamed over the target and the folder fsync'ed; on any failure
 * the temporary is removed and the target is untouched. Never a half-written file.
 *
 *   ts__afile *f;
 *   if ((rc = ts__afile_open(path, &f))) return rc;
 *   if ((rc = ts__afile_write(f, buf, n))) { ts__afile_abort(f); return rc; }
 *   return ts__afile_commit(f);   // frees f in every case */
#ifndef TS_BASE_AFILE_H
#define TS_BASE_AFILE_H

#include <stddef.h>

typedef struct ts__afile ts__afile;

/* Creates the temporary for `path`; TS_EIO / TS_ENOMEM with the path and the reason. */
int ts__afile_open(const char *path, ts__afile **out);
/* Appends n bytes; TS_EIO "<path>: write failed: <reason>". */
int ts__afile_write(ts__afile *f, const void *buf, size_t n);
/* fsync, close, rename into place, fsync the folder; frees f. On failure removes the temporary. */
int ts__afile_commit(ts__afile *f);
/* Closes and removes the temporary; frees f (NULL is ignored). */
void ts__afile_abort(ts__afile *f);
/* mkdir -p of the directory part of path (TS_EIO naming path and the directory that failed). */
int ts__mkdir_parents(const char *path);

#endif
