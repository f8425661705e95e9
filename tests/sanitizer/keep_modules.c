/* Linked into every program of the sanitizers' build (CMAKE_BUILD_TYPE=Asan) only, never into
 * Tessera's library or a Release program: dlclose() that keeps the module loaded.
 *
 * Why: OpenMPI and PMIx load their plugins (mca_*.so) with dlopen and unload them at
 * MPI_Finalize. The allocations they keep until exit are then reported by LeakSanitizer with
 * anonymous frames ("<unknown module>"), which scripts/lsan.supp cannot name; the only way
 * around it was the slow unwinder on every malloc (fast_unwind_on_malloc=0), which made every
 * MPI test 1.5x slower under the sanitizers. With the modules kept, their frames carry their
 * file names and the suppressions match them through the fast unwinder.
 *
 * A program's own symbol comes before libc's for every library it loads, so OpenMPI's calls
 * reach this one. Handles are not freed: a program that reopens a library gets the same,
 * already initialised copy, which is what dlclose of a library still in use does anyway. */
int dlclose(void *handle);

int dlclose(void *handle) {
  (void)handle;
  return 0;
}
