/* Cluster descriptions and the cost model (src/planner/planner.h): the built-ins load and
 * validate; a description written by ts_cluster_save reads back equal; bad files are refused
 * naming the file, the line and the key; the alpha-beta times follow the ring formulas; the cost
 * of a small graph is the sum of its operators' prices, collectives on the link level their
 * group spans. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planner/planner.h"
#include "tessera/tessera.h"
#include "test_util.h"

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static void expect_bad(const char *path, const char *text, const char *needle) {
  write_file(path, text);
  ts_cluster c;
  int rc = ts_cluster_load(path, &c);
  CHECK_MSG(rc != TS_OK && strstr(ts_last_error(), needle), "%s: rc %d '%s'", needle, rc, ts_last_error());
}

int main(void) {
  ts_cluster a, b;
  CHECK_OK(ts_cluster_builtin("dgx-a100-80g", &a));
  CHECK(a.devices_per_node == 8 && a.peak_flops_bf16 == 312e12 && a.mem_bytes == 80e9);
  CHECK_OK(ts_cluster_validate(&a, "dgx"));
  CHECK_OK(ts_cluster_builtin("p3.16xlarge", &b));
  CHECK(b.mem_bytes == 16e9 && b.inter_bw < a.inter_bw);
  /* the Hopper nodes: the datasheets' peaks, the H200's memory and bandwidth above the H100's */
  ts_cluster h1, h2;
  CHECK_OK(ts_cluster_builtin("dgx-h100", &h1));
  CHECK_OK(ts_cluster_builtin("dgx-h200", &h2));
  CHECK_OK(ts_cluster_validate(&h1, "dgx-h100"));
  CHECK_OK(ts_cluster_validate(&h2, "dgx-h200"));
  CHECK(h1.peak_flops_bf16 == 989e12 && h1.peak_flops_f32 == 67e12 && h1.mem_bytes == 80e9 && h2.mem_bytes == 141e9);
  CHECK(h2.mem_bandwidth > h1.mem_bandwidth && h1.mem_bandwidth > a.mem_bandwidth && h1.intra_bw > a.intra_bw &&
        h1.inter_bw > a.inter_bw && h2.peak_flops_bf16 == h1.peak_flops_bf16);
  CHECK(ts_cluster_builtin("dgx-b200", &b) == TS_ECONFIG && strstr(ts_last_error(), "dgx-a100-80g") &&
        strstr(ts_last_error(), "dgx-h200"));
  /* save and load back */
  char path[256];
  snprintf(path, sizeof path, "/tmp/ts_test_cluster_%d.yaml", (int)getpid());
  a.nodes = 384;
  CHECK_OK(ts_cluster_save(&a, path));
  CHECK_OK(ts_cluster_load(path, &b));
  CHECK(!strcmp(a.name, b.name) && !strcmp(a.source, b.source) && a.nodes == b.nodes &&
        fabs(a.inter_bw - b.inter_bw) < 1e-5 * a.inter_bw && fabs(a.op_overhead - b.op_overhead) < 1e-12);
  CHECK_OK(ts_cluster_load("dgx-a100-80g", &b)); /* a name that is no file: the built-in */
  /* refusals */
  expect_bad(path, "name: x\nnodes: 1\nbogus: 3\n", "unknown cluster key 'bogus'");
  expect_bad(path, "name: x\ndevices_per_node: two\n", "devices_per_node: expected a whole number");
  expect_bad(path, "name: x\ndevices_per_node: 8\nnodes: 1\npeak_flops_f32: 1e12\n", "missing key gemm_efficiency");
  ts_cluster c = a;
  c.gemm_efficiency = 1.5;
  CHECK(ts_cluster_validate(&c, "x") == TS_ECONFIG && strstr(ts_last_error(), "gemm_efficiency"));
  CHECK(ts_cluster_load("/nonexistent/dir/c.yaml", &c) != TS_OK && strstr(ts_last_error(), "/nonexistent/dir/c.yaml"));
  /* #33: a key given twice is refused as the config loader does (file:line:col, both lines); a
   * missing file or a folder is a configuration error (exit 2), not an I/O failure */
  expect_bad(path, "name: x\nnodes: 1\nnodes: 2\n", ":3:1: duplicate key 'nodes' (first at line 2)");
  CHECK(ts_cluster_load("/nonexistent/dir/c.yaml", &c) == TS_ECONFIG);
  CHECK(ts_cluster_load("/tmp/", &c) == TS_ECONFIG && strstr(ts_last_error(), "is a directory"));
  unlink(path);
  /* the alpha-beta model */
  ts_cluster_builtin("dgx-a100-80g", &c);
  double B = 64e6;
  CHECK(fabs(ts_cluster_coll_time(&c, TS_COST_ALLREDUCE, 8, 0, B) - (2 * 7.0 / 8 * B / c.intra_bw + 14 * c.intra_latency)) < 1e-12);
  CHECK(fabs(ts_cluster_coll_time(&c, TS_COST_ALLGATHER, 4, 1, B) - (3.0 / 4 * B / c.inter_bw + 3 * c.inter_latency)) < 1e-12);
  CHECK(ts_cluster_coll_time(&c, TS_COST_ALLREDUCE, 1, 0, B) == 0);
  CHECK(!ts_cluster_spans(&c, 8, 1) && ts_cluster_spans(&c, 16, 1) && ts_cluster_spans(&c, 2, 8) && !ts_cluster_spans(&c, 1, 100));
  /* the cost of a graph: y = allreduce(relu(x w)) on 4 ranks */
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(256, 512)), w = ts_input(g, "w", TS_F32, ts_shape2(512, 1024));
  ts_val h = ts_relu(g, ts_matmul(g, x, w, 0, 0));
  ts_val y = ts_allreduce(g, h, 1, 4, 0);
  CHECK(y != TS_NONE && !ts_graph_status(g));
  ts_cost_breakdown cb;
  /* priced as if in mixed precision (TS_BF16): GEMMs at the bf16 peak, f32 values as 2 bytes */
  CHECK_OK(ts_cost_graph(&c, g, TS_BF16, NULL, &cb));
  double flops = 2.0 * 256 * 512 * 1024, relu_bytes = 2.0 * 256 * 1024 * 2;
  double want_gemm = flops / (c.peak_flops_bf16 * c.gemm_efficiency);
  double want_other = relu_bytes / c.mem_bandwidth + 3 * c.op_overhead; /* matmul, relu, allreduce */
  double want_comm = ts_cluster_coll_time(&c, TS_COST_ALLREDUCE, 4, 0, 256.0 * 1024 * 2);
  CHECK_MSG(fabs(cb.gemm_s - want_gemm) < 1e-15 && fabs(cb.other_s - want_other) < 1e-12 &&
                fabs(cb.comm_s - want_comm) < 1e-12 && cb.flops == flops && cb.nodes == 3,
            "gemm %g/%g other %g/%g comm %g/%g nodes %d", cb.gemm_s, want_gemm, cb.other_s, want_other, cb.comm_s,
            want_comm, cb.nodes);
  CHECK_OK(ts_cost_graph(&c, g, TS_F32, NULL, &cb)); /* f32 GEMMs at the f32 peak */
  CHECK(fabs(cb.gemm_s - flops / (c.peak_flops_f32 * c.gemm_efficiency)) < 1e-12);
  CHECK(fabs(cb.other_s - (2 * relu_bytes / c.mem_bandwidth + 3 * c.op_overhead)) < 1e-12); /* 4 bytes */
  CHECK(fabs(cb.comm_s - ts_cluster_coll_time(&c, TS_COST_ALLREDUCE, 4, 0, 256.0 * 1024 * 4)) < 1e-12);
  /* per-family efficiency: the matmul's family figure, when set, prices it instead of gemm_efficiency */
  c.efficiency_matmul = c.gemm_efficiency / 2;
  c.efficiency_conv = 0.9; /* another family's figure changes nothing here */
  CHECK_OK(ts_cost_graph(&c, g, TS_F32, NULL, &cb));
  CHECK_MSG(fabs(cb.gemm_s - 2 * flops / (c.peak_flops_f32 * c.gemm_efficiency)) < 1e-12, "gemm %g", cb.gemm_s);
  CHECK(ts_cluster_efficiency(&c, TS_OP_DENSE) == c.efficiency_matmul && ts_cluster_efficiency(&c, TS_OP_CONV2D_BWD_DATA) == 0.9 &&
        ts_cluster_efficiency(&c, TS_OP_ATTENTION_BWD) == c.gemm_efficiency);
  c.efficiency_attention = 1.2;
  CHECK(ts_cluster_validate(&c, "x") == TS_ECONFIG && strstr(ts_last_error(), "efficiency_attention"));
  c.efficiency_attention = 0;
  /* saved and loaded back; a file without the family keys loads them as 0 */
  CHECK_OK(ts_cluster_save(&c, path));
  CHECK_OK(ts_cluster_load(path, &b));
  CHECK(fabs(b.efficiency_matmul - c.efficiency_matmul) < 1e-6 && fabs(b.efficiency_conv - 0.9) < 1e-6 &&
        b.efficiency_attention == 0);
  unlink(path);
  c.efficiency_matmul = c.efficiency_conv = 0;
  ts_graph_free(g);
  /* a graph rewritten by the amp pass is priced as it runs (TS_F32): its bf16 GEMM at the bf16
   * peak, its f32 values (the casts' inputs) at 4 bytes */
  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(256, 512));
  w = ts_input(g, "w", TS_F32, ts_shape2(512, 1024));
  h = ts_matmul(g, x, w, 0, 0);
  CHECK_OK(ts_graph_amp(g, 1, TS_BF16, &h, 1));
  CHECK_OK(ts_cost_graph(&c, g, TS_F32, NULL, &cb));
  CHECK_MSG(fabs(cb.gemm_s - flops / (c.peak_flops_bf16 * c.gemm_efficiency)) < 1e-15, "amp gemm %g", cb.gemm_s);
  double cast_bytes = (256.0 * 512 + 512.0 * 1024) * (4 + 2) + 256.0 * 1024 * (2 + 4); /* x, w in; h back to f32 */
  CHECK_MSG(fabs(cb.bytes - cast_bytes) < 1, "amp bytes %g, expected %g", cb.bytes, cast_bytes);
  ts_graph_free(g);
  return ts_test_finish("test_cluster");
}
