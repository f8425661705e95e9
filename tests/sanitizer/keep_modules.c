/* Linked into every program of the sanitizers' build (CMAKE_BUILD_TYPE=Asan) only, never into
 * Tessera's library or a Release program. Two things the MPI runtime needs under LeakSanitizer.
 *
 * 1. dlclose() that keeps the module loaded. OpenMPI and PMIx load their plugins (mca_*.so) with
 * dlopen and unload them at MPI_Finalize. The allocations they keep until exit are then reported
 * by LeakSanitizer with anonymous frames ("<unknown module>"), which scripts/lsan.supp cannot
 * name; the only way around it was the slow unwinder on every malloc (fast_unwind_on_malloc=0),
 * which made every MPI test 1.5x slower under the sanitizers. With the modules kept, their frames
 * carry their file names and the suppressions match them through the fast unwinder.
 * A program's own symbol comes before libc's for every library it loads, so OpenMPI's calls
 * reach this one. Handles are not freed: a program that reopens a library gets the same, already
 * initialised copy, which is what dlclose of a library still in use does anyway.
 *
 * 2. The MPI runtime's own allocations are not leak-checked (MPI's profiling interface: MPI_Init,
 * MPI_Init_thread and MPI_Finalize here call PMPI_*): what MPI_Init and MPI_Finalize allocate on
 * the calling thread, and everything the threads started during MPI_Init allocate (PMIx's and
 * OpenMPI's progress threads), is ignored by LeakSanitizer. Why: suppressing a leak costs
 * LeakSanitizer its symbolizer, which on its first use reads the debug information of every
 * loaded library (libc's separate one where libc6-dbg is installed, as valgrind installs it):
 * 0.3 s at the exit of every rank, for OpenMPI's ~10 leaked blocks, across the sanitized suite's
 * hundreds of MPI processes. With none left to suppress, it is not started. Only the runtime's
 * code runs inside these calls and threads; Tessera's allocations are checked as before, and
 * scripts/lsan.supp still names the runtime for what escapes this (programs that start MPI
 * outside these functions, such as the Python module). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <sanitizer/lsan_interface.h>
#include <stdatomic.h>
#include <stdlib.h>

int dlclose(void *handle);

int dlclose(void *handle) {
  (void)handle;
  return 0;
}

static atomic_int g_in_mpi_init; /* > 0 while MPI_Init[_thread] runs */

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef struct {
  void *(*fn)(void *);
  void *arg;
} unchecked_start;

static void *start_unchecked(void *p) {
  unchecked_start s = *(unchecked_start *)p;
  free(p);
  __lsan_disable(); /* for this thread's life */
  return s.fn(s.arg);
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  static create_fn next;
  if (!next) next = (create_fn)dlsym(RTLD_NEXT, "pthread_create"); /* the sanitizer's, then libc's */
  if (!next) return EAGAIN;
  if (atomic_load(&g_in_mpi_init) == 0) return next(th, attr, fn, arg);
  unchecked_start *s = malloc(sizeof *s);
  if (!s) return EAGAIN;
  s->fn = fn;
  s->arg = arg;
  int rc = next(th, attr, start_unchecked, s);
  if (rc) free(s);
  return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  atomic_fetch_add(&g_in_mpi_init, 1);
  __lsan_disable();
  int rc = PMPI_Init_thread(argc, argv, required, provided);
  __lsan_enable();
  atomic_fetch_sub(&g_in_mpi_init, 1);
  return rc;
}

int MPI_Init(int *argc, char ***argv) {
  atomic_fetch_add(&g_in_mpi_init, 1);
  __lsan_disable();
  int rc = PMPI_Init(argc, argv);
  __lsan_enable();
  atomic_fetch_sub(&g_in_mpi_init, 1);
  return rc;
}

int MPI_Finalize(void) {
  __lsan_disable();
  int rc = PMPI_Finalize();
  __lsan_enable();
  return rc;
}
