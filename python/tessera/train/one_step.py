"""MindSpore's nn.TrainOneStepCell: a training step called from the user's own Python loop.

    net_with_loss = nn.WithLossCell(net, loss_fn)
    train_net = nn.TrainOneStepCell(net_with_loss, optimizer)
    train_net.set_train()
    for data in dataset.create_dict_iterator():
        loss = train_net(data["image"], data["label"])

Each call is one optimizer step of Tessera's compiled training graph (ts_trainer_step_batch) on
the batch given: the first call builds the trainer for that batch's shape (a Model of the
WithLossCell's backbone and loss), every call after feeds the next batch. Under data parallel
each rank gives its own shard's batch, as MindSpore's scripts do."""
import numpy as np

from .. import context
from ..nn import Cell, Optimizer, WithLossCell
from ..tensor import Tensor


class _OneBatch:
    """A random-access source over one batch repeated over the ranks: only its sample shape and
    dtype matter (it is what the trainer is built for; the steps are fed by the caller)."""

    def __init__(self, x, y, copies):
        self.x, self.y, self.n = x, y, len(x) * copies

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        i %= len(self.x)
        return self.x[i], self.y[i]


def _loop_schedule(opt, where):
    """A user's loop has no run length: Tessera's schedules (schedule=, which span the run) are
    refused there; a list of rates or a LearningRateSchedule gives every step's rate."""
    s = opt.keys.get("optimizer.schedule")
    if s and (s.get("name", "constant") not in ("constant", "table") or s.get("warmup_steps") or
              s.get("warmup_epochs")):
        raise ValueError("%s: %s(schedule=%r): Tessera's schedules span the run's length, which a loop of your own "
                         "does not give; give learning_rate as a list of rates (nn.cosine_decay_lr(...)) or a "
                         "LearningRateSchedule (nn.CosineDecayLR(...))" % (where, type(opt).__name__, s))


def _numpy(v, what):
    if isinstance(v, Tensor):
        v = v.asnumpy()
    try:
        return np.ascontiguousarray(v)
    except Exception as e:  # noqa: BLE001
        raise TypeError("TrainOneStepCell: %s must be a Tensor or a numpy array, got %r (%s)" % (what, v, e))


class TrainOneStepCell(Cell):
    """TrainOneStepCell(network, optimizer, sens=1.0): network an nn.WithLossCell(backbone,
    loss_fn); calling it with (data, label) runs one optimizer step and returns the loss (a
    Tensor). sens other than 1.0 is refused (use a loss-scale manager with Model); the step's
    learning rate, clipping and loss scale are the optimizer's and the context's keys."""

    def __init__(self, network, optimizer, sens=1.0, return_grad=False):
        super().__init__()
        if not isinstance(network, WithLossCell):
            raise TypeError("TrainOneStepCell: network must be an nn.WithLossCell(backbone, loss_fn) (Tessera takes "
                            "the loss apart from the logits), got %s" % type(network).__name__)
        if not isinstance(optimizer, Optimizer):
            raise TypeError("TrainOneStepCell: optimizer must be a tessera.nn optimizer, got %r" % (optimizer,))
        if sens != 1.0:
            raise ValueError("TrainOneStepCell: sens=%r is not supported (1.0 only; for loss scaling use "
                             "Model(..., loss_scale_manager=...))" % (sens,))
        if return_grad:
            raise ValueError("TrainOneStepCell: return_grad=True is not supported (gradients stay inside the step)")
        self.__dict__["network"] = network
        self.__dict__["optimizer"] = optimizer
        self.__dict__["_model"] = None
        self.__dict__["_shape"] = None

    @property
    def _trainer(self):
        return self._model._trainer if self._model is not None else None

    def _loss_scale_manager(self):
        return None  # (TrainOneStepWithLossScaleCell's)

    def _build(self, x, y):
        from ..dataset import GeneratorDataset
        from .model import Model
        size, rank = context.get_group_size(), context.get_rank()
        mode = context.get_auto_parallel_context("parallel_mode")
        shard = size > 1 and mode in ("data_parallel", "hybrid_parallel", "auto_parallel", "semi_auto_parallel") and \
            not context.get_auto_parallel_context("full_batch")
        _loop_schedule(self.optimizer, "TrainOneStepCell")
        src = _OneBatch(x, y, size if shard else 1)
        kw = dict(num_shards=size, shard_id=rank) if shard else {}
        data = GeneratorDataset(src, ["data", "label"], shuffle=False, **kw).batch(len(x))
        model = Model(self.network, optimizer=self.optimizer, config={},
                      loss_scale_manager=self._loss_scale_manager())
        model._create(model._keys(1, data, None, []))
        self.__dict__["_model"] = model
        self.__dict__["_shape"] = (x.shape, x.dtype)

    def construct(self, *inputs):
        if len(inputs) != 2:
            raise ValueError("TrainOneStepCell: call it with (data, label), got %d inputs" % len(inputs))
        x, y = _numpy(inputs[0], "data"), _numpy(inputs[1], "label")
        y = y.astype(np.float32 if y.dtype.kind == "f" else np.int32, copy=False)  # float: a regression's targets
        if self._model is None:
            self._build(x, y)
        elif (x.shape, x.dtype) != self._shape:
            raise ValueError("TrainOneStepCell: a batch of shape %s %s, but the step was built for %s %s (the first "
                             "call's; give batches of one size: dataset.batch(n, drop_remainder=True))"
                             % (x.shape, x.dtype, self._shape[0], self._shape[1]))
        self._model._lr_cover(self._trainer, next_step=True)
        info = self._trainer.step_batch(x, y)
        return self._result(info)

    def _result(self, info):
        return Tensor(np.float32(info["loss"]))

    def __call__(self, *inputs):
        return self.construct(*inputs)


class DynamicLossScaleUpdateCell(Cell):
    """DynamicLossScaleUpdateCell(loss_scale_value, scale_factor, scale_window): MindSpore's
    dynamic loss scale for TrainOneStepWithLossScaleCell: the scale divided by scale_factor after
    a step whose gradients overflowed (the step skipped), multiplied by it after scale_window
    steps without (DynamicLossScaleManager's train.loss_scale dynamic, inside the trainer)."""

    def __init__(self, loss_scale_value, scale_factor, scale_window):
        super().__init__()
        from ..amp import DynamicLossScaleManager
        self.__dict__["_manager"] = DynamicLossScaleManager(loss_scale_value, scale_factor, scale_window)

    def get_loss_scale(self):
        return self._manager.get_loss_scale()


class FixedLossScaleUpdateCell(Cell):
    """FixedLossScaleUpdateCell(loss_scale_value): a fixed loss scale for
    TrainOneStepWithLossScaleCell (a step whose gradients overflowed is skipped, as MindSpore's
    cell does)."""

    def __init__(self, loss_scale_value):
        super().__init__()
        from ..amp import FixedLossScaleManager
        self.__dict__["_manager"] = FixedLossScaleManager(loss_scale_value, drop_overflow_update=True)

    def get_loss_scale(self):
        return self._manager.get_loss_scale()


class TrainOneStepWithLossScaleCell(TrainOneStepCell):
    """TrainOneStepWithLossScaleCell(network, optimizer, scale_sense): TrainOneStepCell with
    MindSpore's loss scaling: scale_sense a DynamicLossScaleUpdateCell, a
    FixedLossScaleUpdateCell, or a number / one-value Tensor (a fixed scale). Calling it with
    (data, label) returns MindSpore's (loss, overflow, scale): the loss (unscaled), a bool Tensor
    saying the gradients overflowed (inf or NaN on some rank: the update was skipped), and the
    scale this step's gradients were computed with. The scale lives in the trainer (as
    Model(..., loss_scale_manager=...)'s); set_sense_scale is refused."""

    def __init__(self, network, optimizer, scale_sense):
        super().__init__(network, optimizer)
        from ..amp import FixedLossScaleManager
        if isinstance(scale_sense, (DynamicLossScaleUpdateCell, FixedLossScaleUpdateCell)):
            mgr = scale_sense._manager
        else:
            v = scale_sense.asnumpy() if isinstance(scale_sense, Tensor) else scale_sense
            a = np.asarray(v, dtype=np.float64) if not isinstance(v, (str, bytes)) else None
            if a is None or a.size != 1 or a.dtype.kind not in "fiu" or isinstance(v, bool):
                raise TypeError("TrainOneStepWithLossScaleCell: scale_sense must be a DynamicLossScaleUpdateCell, a "
                                "FixedLossScaleUpdateCell or a number (a one-value Tensor), got %r" % (scale_sense,))
            mgr = FixedLossScaleManager(float(a.reshape(-1)[0]), drop_overflow_update=True)
        self.__dict__["scale_sense"] = scale_sense
        self.__dict__["_mgr"] = mgr

    def _loss_scale_manager(self):
        return self._mgr

    def _result(self, info):
        return (Tensor(np.float32(info["loss"])), Tensor(np.bool_(info["overflow"])),
                Tensor(np.float32(info["loss_scale"])))

    def set_sense_scale(self, sens):
        raise ValueError("TrainOneStepWithLossScaleCell.set_sense_scale: the scale lives in the trainer (give the "
                         "initial one as scale_sense)")
