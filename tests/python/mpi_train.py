"""Run under mpirun by test_pyapi_mpi.py: trains models.MLP through the package in the current
directory. argv[1]: "dp" (data_parallel, the data sharded as MindSpore scripts do) or "semi"
(semi_auto_parallel, the strategies given with Dense.matmul.shard) or "pipe" (the zoo's mlp in 2
pipeline stages) or "cellpipe" (models.MLP cut by its cells' pipeline_stage) or "auto" / "autotp"
(auto_parallel on models.MLP) or "tpsp" / "cpring" (models.Transformer: tensor-parallel + sequence
parallel, context-parallel with ring attention) or "raise_cb" / "raise_construct" (a Python exception on rank 1),
argv[2]: epochs. gradients_mean=True where the YAML it is compared with has the CLI's default (true;
Python's default is MindSpore's False)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessera as ts  # noqa: E402
import models  # noqa: E402



def say(text):
    """One line to stdout in one write() (atomic on a pipe), so mpirun never interleaves two
    ranks' lines within a line."""
    sys.stdout.flush()
    os.write(1, (text + "\n").encode())


ts.init()
mode, epochs = sys.argv[1], int(sys.argv[2])
if mode in ("dp", "gpudp"):
    if mode == "gpudp":  # each rank on a GPU (test_pyapi_mpi: the stand-in driver's, or real ones)
        ts.set_context(device_target="GPU")
    ts.set_auto_parallel_context(parallel_mode=ts.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                 device_num=ts.get_group_size())
    m = models.train(models.MLP(64, 32), epochs, 256, 32, shards=ts.get_group_size())
    # another evaluation set than the trainer's (batch 8 per rank): a second trainer resumed
    # from a checkpoint of the first
    r = m.eval(models.dataset(64, 8, ts.get_group_size(), ts.get_rank(), usage="test"))
    say("eval rank %d: acc %.6f loss %.6f" % (ts.get_rank(), r["acc"], r["loss"]))
elif mode == "cellpipe":
    # models.MLP written in Python, cut into 2 stages by its cells' pipeline_stage (one process:
    # no pipeline, the stages ignored). First a cut whose values flow backwards: refused
    n = ts.get_group_size()
    if n > 1:
        ts.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, pipeline_stages=2,
                                     micro_batches=4)
        bad = models.MLP(64, 32)
        bad.fc1.pipeline_stage, bad.fc2.pipeline_stage, bad.fc3.pipeline_stage = 1, 0, 1
        try:
            models.train(bad, epochs, 256, 32)
        except ValueError as e:
            say("rank %d refused: %s" % (ts.get_rank(), e))
    net = models.MLP(64, 32)
    net.fc1.pipeline_stage = 0
    net.fc2.pipeline_stage = 1
    net.fc3.pipeline_stage = 1
    m = models.train(net, epochs, 256, 32)
    say("rank %d holds %s" % (ts.get_rank(), ",".join(sorted(m._trainer.params()))))
elif mode in ("auto", "autotp"):
    # models.MLP under auto_parallel: the plan searched through the Python builder (autotp: the
    # tensor-parallel degree given, its operators searched)
    ts.set_auto_parallel_context(parallel_mode="auto_parallel", gradients_mean=True, cluster="dgx-a100-80g",
                                 strategy_ckpt_save_file="strategy.json",
                                 auto_tp=ts.get_group_size() if mode == "autotp" else 0)
    models.train(models.MLP(64, 32), epochs, 256, 32)
elif mode in ("tpsp", "cpring"):
    # models.Transformer (Python cells): tensor-parallel 2 with Megatron's sequence parallelism, or
    # context-parallel 2 with ring attention (one process: the same cells, no cuts)
    n = ts.get_group_size()
    ts.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=n, full_batch=True,
                                 sequence_parallel=mode == "tpsp" and n > 1, strategy_ckpt_save_file="strategy.json")
    net = models.Transformer(tp=n if mode == "tpsp" else 1, cp=n if mode == "cpring" else 1)
    models.train(net, epochs, 256, 32, opt="adam")
elif mode in ("raise_cb", "raise_construct"):
    # a Python exception on rank 1 only: the job ends at once (not at the communication timeout)
    class Boom(ts.Callback):
        def step_end(self, rc):
            if ts.get_rank() == 1 and rc.original_args().cur_step_num == 3:
                raise RuntimeError("boom on rank 1 at step 3")

    class Net(models.MLP):
        def construct(self, x):
            if ts.get_rank() == 1:
                raise RuntimeError("boom on rank 1 in construct")
            return super().construct(x)

    ts.set_auto_parallel_context(parallel_mode="data_parallel")
    if mode == "raise_cb":
        models.train(models.MLP(64, 32), epochs, 256, 32, callbacks=[Boom()])
    else:
        models.train(Net(64, 32), epochs, 256, 32)
elif mode == "pipe":
    ts.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, pipeline_stages=2, micro_batches=4)
    models.train(ts.zoo.mlp((64, 32)), epochs, 256, 32)
else:
    ts.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=ts.get_group_size(),
                                 strategy_ckpt_save_file="strategy.json")
    n = ts.get_group_size()
    st = {"fc1": ((1, 1), (n, 1), (n,)), "fc2": ((1, n), (1, n), (1,))} if mode == "semi" else {}
    net = models.MLP(64, 32, strategies=st)
    models.train(net, epochs, 256, 32)
say("rank %d done" % ts.get_rank())
