// The stand-in driver's kernel emulator (tests/device/fake_cuda.c): Tessera's CUDA kernels
// (src/device/cuda/*.cu) compiled as host C++ (ts_cuda.h's TS_CUDA_EMU mode) and run with CUDA's
// semantics: the blocks of a grid one after another, the threads of a block as fibers (ucontext)
// that run until a barrier (__syncthreads) and all resume once every live thread has reached it,
// or until a warp exchange (a shuffle, an mma: the lanes post to a slot, and the warp resumes as
// soon as its live lanes have all posted: warps are not barriers); shared memory is the kernel's static
// arrays (one block at a time). So every GPU kernel, and the executor's and the trainer's GPU
// paths above them, run numerically on a machine without a GPU, against the CPU kernels, in CI.
// Not emulated: the PTX's approximate exp2/log2 (libm's here) and FMA contraction: results differ
// from a real GPU in the last bits, as the tests' tolerances allow. The kernels' registry (name ->
// an unpacker of the driver's void **params into the host function's typed arguments) is made by
// cmake/emu_registry.sh from the KERNEL declarations. TS_EMU_ORDER=reverse runs each block's
// threads from the last to the first: a race (a thread reading what another wrote with no barrier
// between) gives other values in one of the two orders (the _reverse tests, gpu_train_test.sh).
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "emu.h"

namespace {

// A fiber starts on its own stack through makecontext/swapcontext (one signal-mask syscall), once
// in the process, and from then on switches with _setjmp/_longjmp (no syscall): barriers and new
// blocks are cheap.
struct fiber {
  ucontext_t ctx;
  jmp_buf jb;
  int tid, state, started; // state: 0 runnable, 1 at a barrier, 2 done, 3 at its warp's exchange
  int par;                  // which of the two exchange slots its next warp exchange writes
};

struct block_run {
  ucontext_t sched;
  jmp_buf sched_jb;
  fiber *f = nullptr;
  char *stacks = nullptr;
  int n = 0, cur = -1;
  int rev = -1; // 1: a block's threads run from the last to the first (TS_EMU_ORDER=reverse)
  int sreg[12];
  // a warp exchange's slots, two of each: a lane's next exchange writes the other one, so one
  // wait suffices (the one after next can only be written once every lane has passed the next)
  float shfl[2][1024];
  unsigned mma_a[2][1024][4], mma_b[2][1024][2];
  void (*body)(void **) = nullptr;
  void **args = nullptr;
};

block_run B;
const size_t kStack = 64 * 1024;

// A fiber runs one thread of every block it is given: after the body returns it parks at done
// (its jb) and the next block resumes it there, on the same stack, into the next body call.
void fiber_main() {
  for (;;) {
    B.body(B.args);
    fiber &f = B.f[B.cur];
    f.state = 2;
    if (!_setjmp(f.jb)) _longjmp(B.sched_jb, 1); // resumed here for the next block
  }
}

std::map<std::string, ts_emu_fn> &registry() {
  static std::map<std::string, ts_emu_fn> r;
  return r;
}

} // namespace

extern "C" {

int ts_emu_sreg(int which) { return which == 0 ? B.f[B.cur].tid : B.sreg[which]; }

void ts_emu_sync(void) {
  fiber &f = B.f[B.cur];
  f.state = 1;
  if (!_setjmp(f.jb)) _longjmp(B.sched_jb, 1);
}

// A warp exchange (shuffle, mma): the lane waits until every live lane of its warp has posted
// (the scheduler resumes the warp as soon as its last lane arrives, not at the end of the round).
static void warp_wait(void) {
  fiber &f = B.f[B.cur];
  f.state = 3;
  if (!_setjmp(f.jb)) _longjmp(B.sched_jb, 1);
}

const float *ts_emu_warp_post(float v) {
  fiber &f = B.f[B.cur];
  int t = f.tid, p = f.par;
  f.par ^= 1;
  B.shfl[p][t] = v;
  warp_wait();
  return &B.shfl[p][t & ~31];
}

float ts_emu_shfl_bfly(float v, int mask) {
  fiber &f = B.f[B.cur];
  int t = f.tid, p = f.par;
  f.par ^= 1;
  B.shfl[p][t] = v;
  warp_wait();
  return B.shfl[p][(t & ~31) | ((t & 31) ^ mask)];
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (ts_cuda.h's mma_bf16): every lane's
// fragments posted, then each lane's four results computed from its warp's, in PTX's fragment
// layout (ts_cuda.h): the products summed in k order in f32, then added to the accumulator.
static float emu_bf(unsigned w, int hi) {
  unsigned u = (hi ? w >> 16 : w & 0xffffu) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

void ts_emu_mma_bf16(float *d, const unsigned *a, const unsigned *b) {
  fiber &f = B.f[B.cur];
  int t = f.tid, w = t & ~31, l = t & 31, g = l >> 2, q = l & 3, p = f.par;
  f.par ^= 1;
  memcpy(B.mma_a[p][t], a, sizeof B.mma_a[p][t]);
  memcpy(B.mma_b[p][t], b, sizeof B.mma_b[p][t]);
  warp_wait();
  const unsigned(*ma)[4] = B.mma_a[p];
  const unsigned(*mb)[2] = B.mma_b[p];
  float r[4];
  for (int i = 0; i < 4; i++) {
    int row = g + (i >= 2 ? 8 : 0), col = 2 * q + (i & 1);
    float s = 0.0f;
    for (int k = 0; k < 16; k++) {
      // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2
      float av = emu_bf(ma[w + 4 * (row & 7) + ((k & 7) >> 1)][(row >> 3) + 2 * (k >> 3)], k & 1);
      // B[k][col]: lane 4 col + (k % 8) / 2, register k >= 8, half k % 2
      float bv = emu_bf(mb[w + 4 * col + ((k & 7) >> 1)][k >> 3], k & 1);
      s += av * bv;
    }
    r[i] = s;
  }
  for (int i = 0; i < 4; i++) d[i] += r[i];
}

void ts_emu_register(const char *name, ts_emu_fn fn) { registry()[name] = fn; }

ts_emu_fn ts_emu_find(const char *name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

// whether the warp from lane t0 has a lane at an exchange and every other live lane there too
static int warp_ready(int t0, int n) {
  int any = 0;
  for (int u = t0; u < t0 + 32 && u < n; u++) {
    if (B.f[u].state == 0 || B.f[u].state == 1) return 0;
    any |= B.f[u].state == 3;
  }
  return any;
}

int ts_emu_launch(ts_emu_fn fn, void **args, const unsigned grid[3], const unsigned block[3]) {
  int n = (int)(block[0] * block[1] * block[2]);
  if (n < 1 || n > 1024 || block[1] != 1 || block[2] != 1) return -1; // the kernels use x blocks only
  if (n > B.n) { // fibers for n threads, made once and kept for every later block and launch
    free(B.f);
    free(B.stacks);
    B.n = 0;
    B.f = (fiber *)calloc((size_t)n, sizeof(fiber));
    B.stacks = (char *)malloc(kStack * (size_t)n);
    if (!B.f || !B.stacks) return -2;
    for (int t = 0; t < n; t++) {
      fiber &f = B.f[t];
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = B.stacks + kStack * (size_t)t;
      f.ctx.uc_stack.ss_size = kStack;
      f.ctx.uc_link = &B.sched;
      makecontext(&f.ctx, fiber_main, 0);
    }
    B.n = n;
  }
  if (B.rev < 0) {
    const char *o = getenv("TS_EMU_ORDER");
    B.rev = o && !strcmp(o, "reverse");
  }
  B.body = fn;
  B.args = args;
  for (int k = 0; k < 3; k++) B.sreg[3 + k] = (int)block[k], B.sreg[9 + k] = (int)grid[k];
  for (volatile unsigned z = 0; z < grid[2]; z++) // volatile: live across _setjmp
    for (volatile unsigned y = 0; y < grid[1]; y++)
      for (volatile unsigned x = 0; x < grid[0]; x++) {
        B.sreg[6] = (int)x, B.sreg[7] = (int)y, B.sreg[8] = (int)z;
        for (int t = 0; t < n; t++) B.f[t].tid = t, B.f[t].state = 0, B.f[t].par = 0;
        for (;;) {
          int live = 0;
          for (volatile int k = 0; k < n; k++) { // volatile: live across _setjmp
            volatile int t = B.rev ? n - 1 - k : k; // (volatile: as k)
            if (B.f[t].state == 0) {
              B.cur = t;
              if (!_setjmp(B.sched_jb)) {
                if (!B.f[t].started) { // its first run: onto its own stack
                  B.f[t].started = 1;
                  swapcontext(&B.sched, &B.f[t].ctx);
                } else {
                  _longjmp(B.f[t].jb, 1); // from a barrier, or from done into the next block
                }
              }
            }
            // the warp's last lane in this order has run: if every live lane now waits at an
            // exchange, run the warp again from its first lane in this order (a warp is 32 lanes:
            // blocks are multiples of 32)
            const int w0 = t & ~31, w1 = (t | 31) < n - 1 ? (t | 31) : n - 1;
            if ((B.rev ? t == w0 : t == w1) && warp_ready(w0, n)) {
              for (int u = w0; u <= w1; u++)
                if (B.f[u].state == 3) B.f[u].state = 0;
              k = (B.rev ? n - 1 - w1 : w0) - 1;
            }
          }
          // the end of a round: a barrier (or lanes of one warp split between a barrier and an
          // exchange, which CUDA leaves undefined) releases every waiting thread
          for (int t = 0; t < n; t++)
            if (B.f[t].state == 1 || B.f[t].state == 3) B.f[t].state = 0, live++;
          if (!live) break; // every thread done
        }
      }
  return 0;
}

} // extern "C"
