/* The sanitizers' build only: LeakSanitizer still reports what a program leaks on its own threads
 * once MPI runs, although keep_modules.c has the MPI runtime's allocations ignored (the ctest
 * test_lsan_mpi expects both leaks below reported, with their lines, and the exit status 23).
 * A leak made between MPI_Init_thread and MPI_Finalize, on the main thread and on a thread started
 * after MPI_Init_thread. */
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>

static void *volatile g_sink;

static void *leak_on_thread(void *arg) {
  (void)arg;
  g_sink = malloc(77); /* leaked: 77 bytes */
  g_sink = NULL;
  return NULL;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  g_sink = malloc(55); /* leaked: 55 bytes */
  g_sink = NULL;
  pthread_t t;
  if (pthread_create(&t, NULL, leak_on_thread, NULL) == 0) pthread_join(t, NULL);
  MPI_Finalize();
  return 0;
}
