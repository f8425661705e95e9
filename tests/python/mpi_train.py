"""Run under mpirun by test_pyapi_mpi.py: trains models.MLP through the package in the current
directory. argv[1]: "dp" (data_parallel, the data sharded as MindSpore scripts do) or "semi"
(semi_auto_parallel, the strategies given with Dense.matmul.shard) or "pipe" (the zoo's mlp in 2
pipeline stages), argv[2]: epochs."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessera as ts  # noqa: E402
import models  # noqa: E402

ts.init()
mode, epochs = sys.argv[1], int(sys.argv[2])
if mode == "dp":
    ts.set_auto_parallel_context(parallel_mode=ts.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                 device_num=ts.get_group_size())
    m = models.train(models.MLP(64, 32), epochs, 256, 32, shards=ts.get_group_size())
    # another evaluation set than the trainer's (batch 8 per rank): a second trainer resumed
    # from a checkpoint of the first
    r = m.eval(models.dataset(64, 8, ts.get_group_size(), ts.get_rank(), usage="test"))
    print("eval rank %d: acc %.6f loss %.6f" % (ts.get_rank(), r["acc"], r["loss"]))
elif mode == "pipe":
    ts.set_auto_parallel_context(parallel_mode="data_parallel", pipeline_stages=2, micro_batches=4)
    models.train(ts.zoo.mlp((64, 32)), epochs, 256, 32)
else:
    ts.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=ts.get_group_size(),
                                 strategy_ckpt_save_file="strategy.json")
    n = ts.get_group_size()
    st = {"fc1": ((1, 1), (n, 1), (n,)), "fc2": ((1, n), (1, n), (1,))} if mode == "semi" else {}
    net = models.MLP(64, 32, strategies=st)
    models.train(net, epochs, 256, 32)
print("rank %d done" % ts.get_rank())
