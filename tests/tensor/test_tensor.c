/* Tensor layer: shapes, broadcasting, dtype conversions with round-to-nearest-even. */
#include <string.h>

#include "test_util.h"

static float bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

int main(void) {
  ts_shape a = ts_shape3(2, 1, 4), b = ts_shape2(3, 1), c;
  CHECK_OK(ts_shape_broadcast(&a, &b, &c));
  CHECK(c.ndim == 3 && c.dims[0] == 2 && c.dims[1] == 3 && c.dims[2] == 4);
  ts_shape d = ts_shape2(3, 5);
  CHECK(ts_shape_broadcast(&a, &d, &c) == TS_ESHAPE);
  CHECK(strstr(ts_last_error(), "(2,1,4)") && strstr(ts_last_error(), "(3,5)"));
  char buf[64];
  CHECK(strcmp(ts_shape_str(&a, buf, sizeof buf), "(2,1,4)") == 0);
  CHECK(ts_shape_numel(&a) == 8);
  ts_shape s0 = ts_shape_make(0, NULL);
  CHECK(ts_shape_numel(&s0) == 1);

  /* bf16: RNE at the halfway point */
  CHECK(ts_f32_to_bf16(1.0f) == 0x3f80);
  CHECK(ts_f32_to_bf16(bits(0x3f808000u)) == 0x3f80); /* tie, even stays */
  CHECK(ts_f32_to_bf16(bits(0x3f818000u)) == 0x3f82); /* tie, odd rounds up */
  CHECK(ts_f32_to_bf16(bits(0x3f808001u)) == 0x3f81); /* above tie */
  CHECK(ts_bf16_to_f32(0x4049) == bits(0x40490000u));
  CHECK(isnan(ts_bf16_to_f32(ts_f32_to_bf16(NAN))));
  CHECK(ts_f32_to_bf16(INFINITY) == 0x7f80);
  /* f16 */
  CHECK(ts_f32_to_f16(1.0f) == 0x3c00);
  CHECK(ts_f32_to_f16(65504.0f) == 0x7bff);
  CHECK(ts_f32_to_f16(65520.0f) == 0x7c00); /* rounds to inf */
  CHECK(ts_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00); /* tie to even */
  CHECK(ts_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02); /* tie to even (up) */
  CHECK(ts_f32_to_f16(5.960464477539063e-08f) == 0x0001); /* smallest subnormal */
  CHECK(ts_f32_to_f16(2.9802322387695312e-08f) == 0x0000); /* half of it: tie to even 0 */
  CHECK(ts_f16_to_f32(0x0001) == 5.960464477539063e-08f);
  CHECK(ts_f16_to_f32(0xc000) == -2.0f);
  /* exhaustive f16 round trip */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN */
    if (ts_f32_to_f16(ts_f16_to_f32((uint16_t)h)) != h) bad++;
  }
  CHECK_MSG(bad == 0, "%d f16 values do not round-trip", bad);
  /* conversions between dtypes */
  float src[5] = {-1.7f, 0.4f, 2.5f, 300.f, NAN};
  int32_t i32[5];
  uint8_t u8[5];
  CHECK_OK(ts_convert(src, TS_F32, i32, TS_I32, 5));
  CHECK(i32[0] == -1 && i32[1] == 0 && i32[2] == 2 && i32[3] == 300 && i32[4] == 0);
  CHECK_OK(ts_convert(src, TS_F32, u8, TS_U8, 4));
  CHECK(u8[0] == 0 && u8[3] == 255);
  uint16_t bf[4];
  float back[4];
  CHECK_OK(ts_convert(src, TS_F32, bf, TS_BF16, 4));
  CHECK_OK(ts_convert(bf, TS_BF16, back, TS_F32, 4));
  CHECK(fabsf(back[0] + 1.7f) < 0.01f && back[2] == 2.5f);
  ts_dtype dt;
  CHECK_OK(ts_dtype_parse("bfloat16", &dt));
  CHECK(dt == TS_BF16);
  CHECK(ts_dtype_parse("float128", &dt) == TS_ENOTFOUND);
  ts_tensor t;
  CHECK_OK(ts_tensor_init(&t, TS_F16, ts_shape2(3, 5)));
  CHECK(ts_tensor_nbytes(&t) == 30 && ((uintptr_t)t.data & 63) == 0);
  ts_tensor_free(&t);
  CHECK(ts_tensor_init(&t, TS_F32, ts_shape2(-1, 2)) == TS_ESHAPE);
  printf("checked: broadcasting, bf16/f16 RNE incl. ties and subnormals, exhaustive f16 round trip, casts\n");
  return ts_test_finish("test_tensor");
}
