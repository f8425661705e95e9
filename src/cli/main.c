/* The `tessera` command. */
#include <stdio.h>
#include <string.h>

#include "tessera/tessera.h"

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera <command> [options]\n"
          "commands:\n"
          "  train   train a model (see `tessera train --help`)\n"
          "  bench   run the kernel and training-step benchmarks\n"
          "  --version\n");
  return f == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  if (!strcmp(argv[1], "--version")) {
    printf("tessera %s\n", ts_version());
    return 0;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return usage(stdout);
  fprintf(stderr, "tessera: unknown command '%s'\n", argv[1]);
  return 2;
}
