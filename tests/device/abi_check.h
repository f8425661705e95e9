// Shared by tests/device/test_cuda_abi*.cpp: the calling-convention comparison and the report.
#ifndef TS_TEST_ABI_CHECK_H
#define TS_TEST_ABI_CHECK_H
#include <cstddef>
#include <cstdio>
#include <type_traits>

template <class T> constexpr int abi_kind() {
  if constexpr (std::is_void_v<T>) return 'v';
  else if constexpr (std::is_pointer_v<T>) return 'p';
  else if constexpr (std::is_floating_point_v<T>) return 'f';
  else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) return 'i';
  else return '?';
}
template <class T> constexpr size_t abi_size() {
  if constexpr (std::is_void_v<T>) return 0;
  else return sizeof(T);
}
// the same calling convention: arity, and each parameter's and the result's kind and size
template <class R1, class... A1, class R2, class... A2> bool same_abi(R1 (*)(A1...), R2 (*)(A2...)) {
  if (sizeof...(A1) != sizeof...(A2) || abi_kind<R1>() != abi_kind<R2>() || abi_size<R1>() != abi_size<R2>())
    return false;
  const int k1[] = {abi_kind<A1>()..., 0}, k2[] = {abi_kind<A2>()..., 0};
  const size_t s1[] = {abi_size<A1>()..., 0}, s2[] = {abi_size<A2>()..., 0};
  for (size_t i = 0; i < sizeof...(A1); i++)
    if (k1[i] != k2[i] || s1[i] != s2[i]) return false;
  return true;
}

struct abi_report {
  int checks = 0, failures = 0;
  void *libcuda = nullptr, *libcublas = nullptr, *libcudnn = nullptr; // NVIDIA's libraries, where found
  void check(bool ok, const char *what) {
    checks++;
    if (!ok) failures++, std::printf("FAIL: %s\n", what);
  }
  void note(const char *what) { std::printf("note: %s\n", what); }
  void symbol(void *lib, const char *name); // the symbol is in lib (unchecked when lib is null)
};

void check_driver(abi_report *r);
void check_nccl(abi_report *r, void *libnccl);
#endif
