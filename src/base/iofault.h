/* Internal: a test hook at the file-system calls that make checkpoints durable (the atomic
 * writer's write, fsync and rename; a sliced checkpoint's directory creation, fsync, rename,
 * exchange and deletions). Off unless the environment asks:
 *
 *   TESSERA_IO_FAULT=call:K[,rank:R][,kind:kill|fail]
 *       the K-th such call of the process (counted from 1 over every thread) SIGKILLs the process
 *       (kill, the default: a crash at that exact point) or fails with EIO (fail: the caller's
 *       error path); rank:R limits it to the process whose OMPI_COMM_WORLD_RANK / PMI_RANK /
 *       PMIX_RANK is R (0 without mpirun).
 *   TESSERA_IO_TRACE=FILE
 *       appends "<rank> <n> <op> <main|thread> <path>" for every call (before the fault).
 *
 * Used by tests/cli/ckpt_crash_test.sh and ckpt_async_test.sh to cut a save at random points. */
#ifndef TS_BASE_IOFAULT_H
#define TS_BASE_IOFAULT_H

/* Called right before the call `op` ("write", "fsync", "rename", ...) on `path`: returns 0 to go
 * on, or -1 with errno = EIO when the fault says fail; does not return when it says kill. */
int ts__io_fault(const char *op, const char *path);

#endif
