"""Tessera for Python: MindSpore's training surface over Tessera's C library.

    import tessera as ts
    from tessera import nn, dataset as ds
    ts.init()
    ts.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    net = MyCell()                                   # an nn.Cell with construct()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    data = ds.FashionMnistDataset(path, usage="train", num_shards=ts.get_group_size(),
                                  shard_id=ts.get_rank()).map(...).batch(32)
    model = ts.Model(net, loss, opt, metrics={"acc"})
    model.train(2, data, callbacks=[ts.LossMonitor(10)])

Runs under `mpirun -n N /usr/bin/python3 script.py` like the CLI. See docs/python.md."""
import os as _os
import sys as _sys

# OpenMPI loads its components with dlopen and needs libmpi's symbols global (as mpi4py does)
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_flags | _os.RTLD_GLOBAL)
try:
    from . import _C
except ImportError as _e:  # another interpreter than the build's (a venv's numpy, another Python)
    try:
        from . import _build as _b
        _for = "%s (Python %s, numpy %s)" % (_b.python, _b.version, _b.numpy)
        _run = _b.python
    except ImportError:
        _for, _run = "the interpreter the build found", "/usr/bin/python3"
    try:
        import numpy as _np
        _np_ver = ", numpy " + _np.__version__
    except Exception:  # numpy itself may be what fails
        _np_ver = ""
    raise ImportError("tessera: its C extension (tessera._C) cannot be loaded by %s (Python %d.%d.%d%s): %s; it was "
                      "built for %s: run that one (e.g. `PYTHONPATH=build/python %s -m tessera`), or rebuild with "
                      "`cmake -DPython3_EXECUTABLE=%s`" % (_sys.executable, _sys.version_info[0], _sys.version_info[1],
                                                          _sys.version_info[2], _np_ver, _e, _for, _run,
                                                          _sys.executable)) from _e
finally:
    _sys.setdlopenflags(_flags)

from . import common, communication, context, dataset, nn, ops, zoo
from .common import dtype
from .common.dtype import (bfloat16, bool_, float16, float32, float64, int8, int16, int32, int64, uint8)
from .checkpoint import (load_checkpoint, load_distributed_checkpoint, load_param_into_net, save_checkpoint)
from .context import (GRAPH_MODE, PYNATIVE_MODE, ParallelMode, get_auto_parallel_context, get_context, get_group_size,
                      get_rank, get_seed, init, reset_auto_parallel_context, set_auto_parallel_context, set_context,
                      set_seed)
from . import amp
from .amp import DynamicLossScaleManager, FixedLossScaleManager, LossScaleManager
from .profiler import Profiler
from .tensor import Parameter, Tensor
from .train import (Callback, CheckpointConfig, EarlyStopping, LossMonitor, Model, ModelCheckpoint, RunContext,
                    TimeMonitor)
from .train.functional import grad, jit, value_and_grad

Error = _C.Error
__version__ = _C.version()
ms_function = jit  # MindSpore 1.x's name of jit
# `import tessera.dtype` as well as `from tessera import dtype` (mindspore.dtype is mindspore.common.dtype)
_sys.modules[__name__ + ".dtype"] = dtype
# MindSpore's module paths of names that live elsewhere here, as MindSpore's model zoo and
# tutorials import them (`from mindspore.nn.metrics import Accuracy`, `from mindspore.ops import
# operations as P`, `from mindspore.nn.loss.loss import LossBase`, `from
# mindspore.train.serialization import load_checkpoint`, ...): each path is the module holding its
# names here. A name that Tessera does not have is an AttributeError / ImportError naming it.
from . import checkpoint as _checkpoint, dynamic_lr as _dynamic_lr, learning_rate_schedule as _lrs  # noqa: E402
from . import metrics as _metrics, tensor as _tensor  # noqa: E402
from .train import one_step as _one_step  # noqa: E402
_MS_PATHS = {
    "nn.metrics": _metrics, "nn.learning_rate_schedule": _lrs, "nn.dynamic_lr": _dynamic_lr,
    "nn.cell": nn, "nn.layer": nn, "nn.layer.basic": nn, "nn.layer.conv": nn, "nn.layer.normalization": nn,
    "nn.layer.activation": nn, "nn.layer.pooling": nn, "nn.layer.container": nn, "nn.layer.embedding": nn,
    "nn.layer.transformer": nn, "nn.optim": nn, "nn.optim.optimizer": nn, "nn.optim.sgd": nn,
    "nn.optim.momentum": nn, "nn.optim.adam": nn, "nn.optim.lamb": nn, "nn.loss": nn, "nn.loss.loss": nn,
    "nn.wrap": nn, "nn.wrap.cell_wrapper": nn,
    "ops.operations": ops, "ops.functional": ops, "ops.composite": ops,
    "common.tensor": _tensor, "common.parameter": _tensor,
    "train.serialization": _checkpoint, "train.loss_scale_manager": amp, "train.metrics": _metrics,
    "dataset.engine": dataset,
    "nn.wrap.loss_scale": _one_step,
}
for _k, _m in _MS_PATHS.items():
    _sys.modules[__name__ + "." + _k] = _m
ops.operations = ops.functional = ops.composite = ops  # `from mindspore.ops import operations as P`

__all__ = ["init", "get_rank", "get_group_size", "set_auto_parallel_context", "get_auto_parallel_context",
           "reset_auto_parallel_context", "set_context", "set_seed", "ParallelMode", "GRAPH_MODE", "PYNATIVE_MODE",
           "nn", "ops", "dataset", "zoo", "context", "Model", "Callback", "RunContext", "LossMonitor", "TimeMonitor",
           "EarlyStopping",
           "ModelCheckpoint", "CheckpointConfig", "save_checkpoint", "load_checkpoint", "load_param_into_net",
           "load_distributed_checkpoint", "Parameter", "Tensor", "Error", "communication", "common", "dtype",
           "get_context", "get_seed", "float32", "float16", "bfloat16", "int32", "int64", "uint8", "float64", "int8",
           "int16", "bool_", "amp", "FixedLossScaleManager", "DynamicLossScaleManager", "LossScaleManager", "Profiler",
           "value_and_grad", "grad", "jit", "ms_function"]
