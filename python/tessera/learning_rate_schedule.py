"""MindSpore's nn.learning_rate_schedule: a learning rate as a function of the optimizer step.

A LearningRateSchedule given to an optimizer as its learning_rate is evaluated by the Model for
every step of the run once the run's length is known (rates(n)), and the trainer follows that
table (ts_trainer_set_lr_table; lengthened when a second train continues the run). The built-in
schedules compute their formulas (MindSpore's, as its construct computes them) in double, rounded
to float32. A subclass's construct(global_step) is called with global_step a Tensor of one int32
value for each step and must return a number or a Tensor of one value: Tensor arithmetic,
Python's math and the built-in schedules work there (graph ops do not: nothing is recorded)."""
import math

import numpy as np

from .dynamic_lr import _bool, _float, _pos_int
from .nn import Cell
from .tensor import Tensor

__all__ = ["LearningRateSchedule", "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR", "CosineDecayLR",
           "PolynomialDecayLR", "WarmUpLR"]


class LearningRateSchedule(Cell):
    """Base class: subclasses write construct(global_step) -> the rate of that step."""

    def construct(self, global_step):
        raise NotImplementedError("%s: a LearningRateSchedule writes construct(global_step)" % type(self).__name__)

    def _f(self, s):
        """The rates of the steps s (a float64 numpy array): the built-in schedules' formula."""
        raise NotImplementedError

    def __call__(self, global_step):
        if type(self)._f is not LearningRateSchedule._f and isinstance(global_step, (Tensor, int, np.integer)):
            s = global_step.asnumpy() if isinstance(global_step, Tensor) else global_step
            return Tensor(np.float32(self._f(np.asarray(s, np.float64).reshape(-1))[0]))
        return self.construct(global_step)

    def rates(self, n):
        """The learning rates of steps 0 .. n-1: a float32 numpy array."""
        if type(self)._f is not LearningRateSchedule._f:
            return np.ascontiguousarray(self._f(np.arange(n, dtype=np.float64)), dtype=np.float32)
        out = np.empty(n, np.float32)
        name = type(self).__name__
        for i in range(n):
            try:
                v = self.construct(Tensor(np.int32(i)))
            except Exception as e:  # noqa: BLE001
                raise ValueError("learning_rate: %s.construct(global_step=%d) could not be computed on values (%s: "
                                 "%s): Tessera computes every step's rate before training, so construct may use Tensor "
                                 "arithmetic, Python's math and the built-in schedules, not graph ops; or give the "
                                 "rates as a list" % (name, i, type(e).__name__, e)) from None
            if isinstance(v, Tensor):
                v = v.asnumpy()
            a = np.asarray(v, dtype=np.float64).reshape(-1)
            if a.size != 1 or not np.isfinite(a[0]) or a[0] < 0:
                raise ValueError("learning_rate: %s.construct(global_step=%d) returned %r: expected one finite rate "
                                 ">= 0" % (name, i, v))
            out[i] = a[0]
        return out


class _DecayLR(LearningRateSchedule):
    """The arguments of the exponential, natural-exponential and inverse decays."""

    def __init__(self, learning_rate, decay_rate, decay_steps, is_stair=False):
        super().__init__()
        w = type(self).__name__
        _pos_int(decay_steps, "decay_steps", w)
        _float(learning_rate, "learning_rate", w)
        _float(decay_rate, "decay_rate", w)
        _bool(is_stair, "is_stair", w)
        self.learning_rate, self.decay_rate, self.decay_steps, self.is_stair = \
            learning_rate, decay_rate, decay_steps, is_stair


class ExponentialDecayLR(_DecayLR):
    """learning_rate * decay_rate ^ p, p = step / decay_steps (floored with is_stair)."""

    def _f(self, s):
        p = s / self.decay_steps
        return self.learning_rate * np.power(self.decay_rate, np.floor(p) if self.is_stair else p)


class NaturalExpDecayLR(_DecayLR):
    """learning_rate * e ^ (-decay_rate * p): p = step, or with is_stair the step rounded down to
    a multiple of decay_steps (MindSpore's construct; its docstring's formula divides by
    decay_steps, its code does not)."""

    def _f(self, s):
        p = np.floor(s / self.decay_steps) * self.decay_steps if self.is_stair else s
        return self.learning_rate * np.power(math.e, -self.decay_rate * p)


class InverseDecayLR(_DecayLR):
    """learning_rate / (1 + decay_rate * p), p = step / decay_steps (floored with is_stair)."""

    def _f(self, s):
        p = s / self.decay_steps
        return self.learning_rate / (1 + self.decay_rate * (np.floor(p) if self.is_stair else p))


class CosineDecayLR(LearningRateSchedule):
    """min_lr + (max_lr - min_lr) / 2 * (1 + cos(pi * min(step, decay_steps) / decay_steps))."""

    def __init__(self, min_lr, max_lr, decay_steps):
        super().__init__()
        w = "CosineDecayLR"
        _float(min_lr, "min_lr", w, positive=False)
        _float(max_lr, "max_lr", w)
        _pos_int(decay_steps, "decay_steps", w)
        if min_lr >= max_lr:
            raise ValueError("For 'CosineDecayLR', the 'max_lr' must be greater than the 'min_lr', but got 'max_lr' "
                             "value: %r, 'min_lr' value: %r." % (max_lr, min_lr))
        self.min_lr, self.max_lr, self.decay_steps = min_lr, max_lr, decay_steps

    def _f(self, s):
        p = np.minimum(s, self.decay_steps) / self.decay_steps
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1.0 + np.cos(math.pi * p))


class PolynomialDecayLR(LearningRateSchedule):
    """(learning_rate - end_learning_rate) * (1 - t / d) ^ power + end_learning_rate, t =
    min(step, decay_steps), d = decay_steps; with update_decay_steps t = step and d = decay_steps
    * max(1, ceil(step / decay_steps))."""

    def __init__(self, learning_rate, end_learning_rate, decay_steps, power, update_decay_steps=False):
        super().__init__()
        w = "PolynomialDecayLR"
        _float(learning_rate, "learning_rate", w)
        _float(end_learning_rate, "end_learning_rate", w, positive=False)
        _pos_int(decay_steps, "decay_steps", w)
        _bool(update_decay_steps, "update_decay_steps", w)
        _float(power, "power", w)
        self.learning_rate, self.end_learning_rate, self.decay_steps, self.power, self.update_decay_steps = \
            learning_rate, end_learning_rate, decay_steps, power, update_decay_steps

    def _f(self, s):
        if self.update_decay_steps:
            d, t = self.decay_steps * np.maximum(np.ceil(s / self.decay_steps), 1), s
        else:
            d, t = self.decay_steps, np.minimum(s, self.decay_steps)
        return (self.learning_rate - self.end_learning_rate) * np.power(1.0 - t / d, self.power) + \
            self.end_learning_rate


class WarmUpLR(LearningRateSchedule):
    """learning_rate * min(step, warmup_steps) / warmup_steps."""

    def __init__(self, learning_rate, warmup_steps):
        super().__init__()
        _float(learning_rate, "learning_rate", "WarmUpLR", positive=False)
        _pos_int(warmup_steps, "warmup_steps", "WarmUpLR")
        self.learning_rate, self.warmup_steps = learning_rate, warmup_steps

    def _f(self, s):
        return self.learning_rate * np.minimum(s, self.warmup_steps) / self.warmup_steps
