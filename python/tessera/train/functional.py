"""MindSpore 2.x's functional training: value_and_grad / grad, then optimizer(grads), in the
user's own loop (the quickstart's train_step):

    def forward_fn(data, label):
        logits = model(data)
        return loss_fn(logits, label), logits
    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)
    for data, label in dataset.create_tuple_iterator():
        (loss, _), grads = grad_fn(data, label)
        optimizer(grads)

Tessera compiles the step: the first call records forward_fn on the batch's shape into a trainer
(as TrainOneStepCell does: a Model of the optimizer's keys, fed batch by batch), grad_fn runs its
forward, backward and gradient reduction (ts_trainer_grad_batch) and returns the loss, and
optimizer(grads) applies them (ts_trainer_apply_grads: clipping, loss scale, the update, the step
count). The gradients stay in the trainer: `grads` is a handle for optimizer(), not arrays, and the
aux outputs (the logits) are not fetched from the compiled step; call the network (model(data)
runs its evaluation graph with the current parameters) for outputs. The network is the Cell
forward_fn calls on its data first (or aux[0]'s producer with has_aux): model(data) outside a
graph then uses this trainer."""
import numpy as np

from .. import tensor as _tensor
from ..nn import _collect_pending, Cell, LossBase, Optimizer, _loss_value  # noqa: F401
from ..tensor import Tensor, as_value

__all__ = ["value_and_grad", "grad", "jit"]

def _optimizer_of(weights, where):
    from ..nn import _OPTIMIZERS  # the optimizers made, newest last: weights= names one of them
    if isinstance(weights, Optimizer):
        return weights
    for o in reversed(_OPTIMIZERS):
        if weights is o.parameters:
            return o
    try:
        names = sorted(getattr(p, "name", None) or "" for p in weights)
    except TypeError:
        names = None
    for o in reversed(_OPTIMIZERS):
        if names is not None and names == sorted(getattr(p, "name", None) or "" for p in o.parameters):
            return o
    raise ValueError("%s: weights must be an optimizer's parameters (optimizer.parameters, as MindSpore's "
                     "quickstart gives them): Tessera computes the gradients and applies them in one compiled step, "
                     "so it needs the optimizer that will take them; got %r" % (where, weights))


class _Unfetched:
    """An aux output of the compiled step: its values are not fetched."""

    def __init__(self, i):
        self.i = i

    def __getattr__(self, name):
        raise RuntimeError("value_and_grad(has_aux=True): aux output %d stays in the compiled step (Tessera fetches "
                           "the loss); call the network on the batch for its outputs (model(data))" % self.i)

    def __repr__(self):
        return "<aux output %d of the compiled step (not fetched)>" % self.i


class _Grads:
    """The gradients of one step, in the trainer: optimizer(grads) applies them, once."""

    def __init__(self, fn, n):
        self._fn, self._n, self._applied = fn, n, False

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        raise TypeError("the gradients stay in Tessera's compiled step: pass them to the optimizer (optimizer(grads)); "
                        "clipping is the optimizer's clip_grad_norm= (optimizer.clip_grad_norm)")

    __iter__ = None

    def _apply(self, opt):
        if opt is not self._fn._opt:
            raise ValueError("%s(grads): these gradients are for another optimizer (the one whose parameters "
                             "value_and_grad was given)" % type(opt).__name__)
        if self._applied:
            raise ValueError("%s(grads): these gradients were applied already" % type(opt).__name__)
        if self._fn._pending is not self:
            raise ValueError("%s(grads): a later call of the gradient function replaced these gradients"
                             % type(opt).__name__)
        info = self._fn._model._trainer.apply_grads()
        self._applied = True
        self._fn._pending = None
        return info


class _Capture:
    """The first Cell fn calls from the top level (its network) and that call's output."""

    def __init__(self):
        self.cells, self.outputs = [], []


class _FnNet(Cell):
    """The Model's network for a function: the cells it calls register their parameters by
    their own names (a top-level Cell's parameters are "fc1.weight", ...)."""

    def construct(self, *args):
        raise RuntimeError("value_and_grad: the function is recorded, not this cell")


class _FnLoss(LossBase):
    def construct(self, logits, labels):
        raise RuntimeError("value_and_grad: the function computes the loss")


class _GradFn:
    def __init__(self, fn, grad_position, weights, has_aux, with_value, where):
        if not callable(fn):
            raise TypeError("%s: fn must be callable, got %r" % (where, fn))
        if weights is None:
            raise ValueError("%s(fn, grad_position=%r, weights=None): gradients with respect to the inputs are not "
                             "supported; give weights=optimizer.parameters (and grad_position=None)"
                             % (where, grad_position))
        if grad_position is not None:
            raise ValueError("%s: grad_position=%r (gradients of the inputs too) is not supported: give "
                             "grad_position=None with weights=optimizer.parameters" % (where, grad_position))
        self._fn, self._has_aux, self._with_value, self._where = fn, bool(has_aux), with_value, where
        self._opt = _optimizer_of(weights, where)
        self._model, self._shape, self._pending, self._cells, self._naux = None, None, None, [], 0

    # ---- the graph ----
    def _record(self, b, x, targets):
        """The Model's builder: fn recorded on the batch (the evaluation graph with zero labels,
        keeping only the network's output)."""
        from ..nn import _TOP
        prev = _tensor._current[0]
        _tensor._current[0] = b
        flags = [(c, c.training) for c in self._cells]
        for c in self._cells:  # the evaluation graph in inference mode (BatchNorm, Dropout)
            c.set_train(bool(b.training))
        cap = _Capture()
        _TOP.append(cap)
        try:
            X = Tensor(b, x)
            if targets is not None:
                Y = Tensor(b, targets)
            else:
                rows = X.shape[0]
                Y = Tensor(b, b.const(self._ydt, [rows] + list(self._shape[1][1:]), 0.0))  # the labels' dtype
            out = self._fn(X, Y)
        finally:
            _TOP.pop()
            for c, f in flags:
                c.set_train(f)
            _tensor._current[0] = prev
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if self._has_aux and len(outs) < 2:
            raise ValueError("%s(has_aux=True): fn must return (loss, aux, ...), got %d value%s"
                             % (self._where, len(outs), "" if len(outs) == 1 else "s"))
        if not self._has_aux and len(outs) != 1:
            raise ValueError("%s: fn returned %d values: give has_aux=True (the first is the loss, the others aux)"
                             % (self._where, len(outs)))
        if not cap.cells:
            raise ValueError("%s: fn(data, label) must call the network (a Cell) on its data" % self._where)
        logits = cap.outputs[0]
        if self._has_aux and isinstance(outs[1], Tensor) and outs[1]._data is None:
            logits = outs[1]
        if not isinstance(logits, Tensor) or logits._data is not None:
            raise ValueError("%s: the network's output must be a Tensor, got %r" % (self._where, logits))
        for c in cap.cells:
            if c not in self._cells:
                self._cells.append(c)
        self._naux = len(outs) - 1
        named = type(getattr(self._fn, "__name__", "fn"), (), {})()  # names fn in _loss_value's messages
        loss = _loss_value(outs[0], named) if targets is not None else None
        return as_value(logits), loss

    def _build(self, x, y):
        from .. import context
        from ..dataset import GeneratorDataset
        from .model import Model
        from .one_step import _OneBatch, _loop_schedule
        _loop_schedule(self._opt, self._where)
        size, rank = context.get_group_size(), context.get_rank()
        mode = context.get_auto_parallel_context("parallel_mode")
        shard = size > 1 and mode in ("data_parallel", "hybrid_parallel", "auto_parallel", "semi_auto_parallel") and \
            not context.get_auto_parallel_context("full_batch")
        data = GeneratorDataset(_OneBatch(x, y, size if shard else 1), ["data", "label"], shuffle=False,
                                **(dict(num_shards=size, shard_id=rank) if shard else {})).batch(len(x))
        self._shape = ((x.shape, x.dtype), y.shape)
        self._ydt = "f32" if y.dtype.kind == "f" else "i32"  # class ids, or a regression's values
        model = Model(_FnNet(), _FnLoss(), self._opt, config={})
        model._build = self._record
        keys = model._keys(1, data, None, [])
        keys["train.eval_batch_size"] = len(x)
        model._create(keys)
        self._model = model
        for c in self._cells:  # model(data) outside a graph: this trainer's evaluation graph
            c.__dict__["_trainer"] = model._trainer
            from .model import _own_parameters
            _own_parameters(c)
            pending = _collect_pending(c)
            if pending:
                from ..checkpoint import load_param_into_net
                load_param_into_net(c, pending)

    def __call__(self, *args):
        if len(args) != 2:
            raise ValueError("%s: the gradient function takes (data, label) (one batch), got %d inputs"
                             % (self._where, len(args)))
        x = np.ascontiguousarray(args[0].asnumpy() if isinstance(args[0], Tensor) else args[0])
        y = np.ascontiguousarray(args[1].asnumpy() if isinstance(args[1], Tensor) else args[1])
        y = y.astype(np.float32 if y.dtype.kind == "f" else np.int32, copy=False)  # float: a regression's targets
        if self._model is None:
            self._build(x, y)
        elif ((x.shape, x.dtype), y.shape) != self._shape:
            raise ValueError("%s: a batch of shape %s %s, but the step was built for %s %s (the first call's; give "
                             "batches of one size: dataset.batch(n, drop_remainder=True))"
                             % (self._where, x.shape, x.dtype, self._shape[0][0], self._shape[0][1]))
        if self._pending is not None and not self._pending._applied:
            raise ValueError("%s: the previous step's gradients were not applied (optimizer(grads)): Tessera keeps one "
                             "step's gradients, which the optimizer applies before the next are computed"
                             % self._where)
        t = self._model._trainer
        self._model._lr_cover(t, next_step=True)
        info = t.grad_batch(x, y)
        grads = _Grads(self, len(self._opt.parameters))
        self._pending = grads
        loss = Tensor(np.float32(info["loss"]))
        value = (loss,) + tuple(_Unfetched(i) for i in range(1, 1 + self._naux)) if self._has_aux else loss
        if self._with_value:
            return value, grads
        return (grads, value[1:]) if self._has_aux else grads


def value_and_grad(fn, grad_position=0, weights=None, has_aux=False, return_ids=False):
    """MindSpore's value_and_grad with weights=optimizer.parameters and grad_position=None: a
    function of (data, label) returning (fn's value, gradients for optimizer(grads))."""
    if return_ids:
        raise ValueError("value_and_grad: return_ids=True is not supported")
    return _GradFn(fn, grad_position, weights, has_aux, True, "value_and_grad")


def grad(fn, grad_position=0, weights=None, has_aux=False, return_ids=False):
    """MindSpore's grad with weights=optimizer.parameters and grad_position=None: a function of
    (data, label) returning the gradients for optimizer(grads) (with has_aux, (grads, aux))."""
    if return_ids:
        raise ValueError("grad: return_ids=True is not supported")
    return _GradFn(fn, grad_position, weights, has_aux, False, "grad")


def jit(fn=None, **kwargs):
    """MindSpore's @jit: Tessera compiles every step already; the function is returned as it is."""
    if fn is None:
        return lambda f: f
    return fn
