/* Internal: opening a user-given file for reading (the read side of afile.h). One place that
 * never blocks on a FIFO (it opens with O_NONBLOCK, then clears it), refuses whatever is not a
 * regular file with a message that says what it is, and names the file in every error:
 *
 *   int fd; uint64_t size;
 *   if ((rc = ts__file_open_read(path, "cannot read the config", &fd, &size))) return rc;
 *
 * `what` is how the failure reads before the reason ("<path>: <what>: No such file or
 * directory", "<path>: <what>: is a directory"); NULL means "cannot open". Errors: TS_ENOTFOUND
 * when the file does not exist, TS_EIO otherwise, TS_ENOMEM. */
#ifndef TS_BASE_RFILE_H
#define TS_BASE_RFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A blocking O_CLOEXEC descriptor on a regular file; *size_out (may be NULL) its size. */
int ts__file_open_read(const char *path, const char *what, int *fd_out, uint64_t *size_out);
/* The same as a FILE* ("rb"). */
int ts__file_fopen_read(const char *path, const char *what, FILE **out);
/* Reads the whole file into a malloc'ed buffer with a NUL after the last byte (for text);
 * *len_out (may be NULL) excludes the NUL. Read errors: "<path>: read failed: <reason>". */
int ts__file_read_all(const char *path, const char *what, char **buf_out, size_t *len_out);
/* Reads exactly n bytes from fd (retrying short reads and EINTR): 0, or -1 with errno set on a
 * read error, or -2 when the file ends first. */
int ts__read_full(int fd, void *buf, size_t n);

#endif
