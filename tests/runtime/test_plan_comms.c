/* A plan's communicator table grows with the slots a job binds (include/tessera/runtime.h,
 * ts_plan_set_comm): it held 32 before, so a 3-D job with many groups could not be bound. Here a
 * graph of collectives on slots 3, 40 and 1000 (group size 1, the MPI singleton's world) runs and
 * gives its input back (a sum over one rank); the op on slot 1000 really takes that slot's
 * communicator from the grown table (built for a group of 2, it is refused at run time naming
 * slot 1000 and the world's 1 rank); clearing a slot never set is harmless, and a slot outside
 * 0..TS_PLAN_MAX_COMMS-1 is refused when set. */
#include <stdio.h>
#include <string.h>

#include "tessera/comm.h"
#include "tessera/graph.h"
#include "tessera/runtime.h"
#include "test_util.h"

static void test_many_slots(ts_comm *world, int last_group) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape1(4));
  ts_val a = ts_allreduce(g, x, 3, 1, TS_REDUCE_SUM);
  ts_val b = ts_allreduce(g, a, 40, 1, TS_REDUCE_SUM);
  ts_val c = ts_allreduce(g, b, 1000, last_group, TS_REDUCE_SUM);
  CHECK_MSG(ts_graph_status(g) == TS_OK, "graph: %s", ts_graph_error(g));
  ts_plan *p = NULL;
  CHECK_OK(ts_plan_create(g, &c, 1, &p));
  if (!p) {
    ts_graph_free(g);
    return;
  }
  float in[4] = {1, -2, 3.5f, 0.25f};
  CHECK_OK(ts_plan_bind(p, x, in));
  CHECK_OK(ts_plan_set_comm(p, 3, world));
  CHECK_OK(ts_plan_set_comm(p, 40, world));
  CHECK_OK(ts_plan_set_comm(p, 5000, NULL)); /* clearing a slot never set */
  CHECK_OK(ts_plan_set_comm(p, 1000, world));
  int rc = ts_plan_run(p, 1);
  if (last_group != 1) { /* the world in slot 1000 has 1 rank, the op wants 2 */
    CHECK_MSG(rc != TS_OK && strstr(ts_last_error(), "slot 1000") && strstr(ts_last_error(), "group of 2"),
              "slot 1000 with a group of 2: rc %d, '%s'", rc, ts_last_error());
    ts_plan_free(p);
    ts_graph_free(g);
    return;
  }
  CHECK_OK(rc);
  const float *out = ts_plan_data(p, c);
  CHECK(out && !memcmp(out, in, sizeof in));
  rc = ts_plan_set_comm(p, TS_PLAN_MAX_COMMS, world);
  CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "outside"), "slot %d: rc %d '%s'", TS_PLAN_MAX_COMMS, rc,
            ts_last_error());
  CHECK(ts_plan_set_comm(p, -1, world) == TS_EINVAL);
  ts_plan_free(p);
  ts_graph_free(g);
  printf("plan communicators: slots 3, 40, 1000 bound and run; slot 1000's communicator checked; slot %d refused\n",
         TS_PLAN_MAX_COMMS);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *world = NULL;
  CHECK_OK(ts_comm_world(&world));
  if (world) test_many_slots(world, 2);
  if (world) test_many_slots(world, 1);
  ts_comm_free(world);
  return ts_test_finish_job("test_plan_comms");
}
