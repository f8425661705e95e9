/* The stand-in driver's kernel emulator (emu.cpp): the registry of Tessera's kernels compiled for
 * the host and a launch of one with CUDA's block and barrier semantics. */
#ifndef TS_TESTS_EMU_H
#define TS_TESTS_EMU_H

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*ts_emu_fn)(void **params); /* a kernel's unpacker: the driver's params -> the call */
void ts_emu_register(const char *name, ts_emu_fn fn);
ts_emu_fn ts_emu_find(const char *name);
/* Runs fn over grid x block threads (1-D blocks of at most 1024); 0, or < 0 for a bad shape. */
int ts_emu_launch(ts_emu_fn fn, void **params, const unsigned grid[3], const unsigned block[3]);

#ifdef __cplusplus
}

#include <cstddef>
#include <type_traits>
#include <utility>
/* The call of f with each argument read from params[i] as f's i-th parameter type. */
template <typename... A, std::size_t... I>
static void ts_emu_call_impl(void (*f)(A...), void **p, std::index_sequence<I...>) {
  f(*static_cast<std::remove_reference_t<A> *>(p[I])...);
}
template <typename... A> static void ts_emu_call(void (*f)(A...), void **p) {
  ts_emu_call_impl(f, p, std::index_sequence_for<A...>{});
}
#endif

#endif
