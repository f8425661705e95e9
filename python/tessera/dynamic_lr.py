"""MindSpore's nn.dynamic_lr: lists of per-step learning rates, computed before training.

Each function returns a list of `total_step` floats (the i-th is optimizer step i's rate), which an
optimizer takes as its learning_rate (Tessera's schedule `table`: optimizer.schedule.values). The
formulas are MindSpore's (current_epoch = floor(i / step_per_epoch)), computed in double; the
optimizer rounds each rate to float32 as MindSpore's Tensor does."""
import math

from ._validator import describe

__all__ = ["piecewise_constant_lr", "exponential_decay_lr", "natural_exp_decay_lr", "inverse_decay_lr",
           "cosine_decay_lr", "polynomial_decay_lr", "warmup_lr"]


def _pos_int(v, name, where):
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("For '%s', the '%s' must be an int, but got %s." % (where, name, describe(v)))
    if v <= 0:
        raise ValueError("For '%s', the '%s' must be positive, but got %d." % (where, name, v))
    return v


def _float(v, name, where, positive=True):
    if not isinstance(v, float):
        raise TypeError("For '%s', the '%s' must be a float, but got %s." % (where, name, describe(v)))
    if positive and not v > 0:
        raise ValueError("For '%s', the '%s' must be positive, but got %r." % (where, name, v))
    if not positive and not v >= 0:
        raise ValueError("For '%s', the '%s' must be non-negative, but got %r." % (where, name, v))
    return v


def _bool(v, name, where):
    if not isinstance(v, bool):
        raise TypeError("For '%s', the '%s' must be a bool, but got %s." % (where, name, describe(v)))
    return v


def piecewise_constant_lr(milestone, learning_rates):
    """learning_rates[t] for steps [milestone[t-1], milestone[t]) (milestone[-1] = 0); a list of
    milestone[-1] rates."""
    w = "piecewise_constant_lr"
    if not isinstance(milestone, (list, tuple)) or not isinstance(learning_rates, (list, tuple)):
        raise TypeError("For '%s', 'milestone' and 'learning_rates' must be lists or tuples, but got %s and %s."
                        % (w, describe(milestone), describe(learning_rates)))
    if len(milestone) != len(learning_rates):
        raise ValueError("For '%s', the size of 'milestone' must be same with the size of 'learning_rates', but got "
                         "'milestone' size: %d, 'learning_rates' size: %d." % (w, len(milestone), len(learning_rates)))
    out, last = [], 0
    for i, m in enumerate(milestone):
        _pos_int(m, "milestone[%d]" % i, w)
        _float(learning_rates[i], "learning_rates[%d]" % i, w, positive=False)
        if m < last:
            raise ValueError("For '%s', the value of milestone[%d] must be greater than milestone[%d], but got %d and "
                             "%d." % (w, i, i - 1, m, last))
        out += [learning_rates[i]] * (m - last)
        last = m
    return out


def _check_decay(w, learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair):
    _pos_int(total_step, "total_step", w)
    _pos_int(step_per_epoch, "step_per_epoch", w)
    _pos_int(decay_epoch, "decay_epoch", w)
    _float(learning_rate, "learning_rate", w)
    _float(decay_rate, "decay_rate", w)
    _bool(is_stair, "is_stair", w)


def exponential_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """learning_rate * decay_rate ^ (epoch / decay_epoch) (the exponent floored with is_stair)."""
    _check_decay("exponential_decay_lr", learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair)
    out = []
    for i in range(total_step):
        p = (i // step_per_epoch) / decay_epoch
        out.append(learning_rate * decay_rate ** (math.floor(p) if is_stair else p))
    return out


def natural_exp_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """learning_rate * e ^ (-decay_rate * epoch) (epoch rounded down to a multiple of decay_epoch
    with is_stair)."""
    _check_decay("natural_exp_decay_lr", learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair)
    out = []
    for i in range(total_step):
        e = i // step_per_epoch
        if is_stair:
            e = (e // decay_epoch) * decay_epoch
        out.append(learning_rate * math.e ** (-decay_rate * e))
    return out


def inverse_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    """learning_rate / (1 + decay_rate * epoch / decay_epoch) (the quotient floored with is_stair)."""
    _check_decay("inverse_decay_lr", learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair)
    out = []
    for i in range(total_step):
        e = i // step_per_epoch
        if is_stair:
            out.append(learning_rate / (1 + decay_rate * math.floor(e / decay_epoch)))
        else:
            out.append(learning_rate / (1 + decay_rate * e / decay_epoch))
    return out


def cosine_decay_lr(min_lr, max_lr, total_step, step_per_epoch, decay_epoch):
    """min_lr + (max_lr - min_lr) / 2 * (1 + cos(pi * min(epoch, decay_epoch) / decay_epoch))."""
    w = "cosine_decay_lr"
    _float(min_lr, "min_lr", w, positive=False)
    _float(max_lr, "max_lr", w)
    _pos_int(total_step, "total_step", w)
    _pos_int(step_per_epoch, "step_per_epoch", w)
    _pos_int(decay_epoch, "decay_epoch", w)
    if min_lr >= max_lr:
        raise ValueError("For '%s', the 'max_lr' should be greater than the 'min_lr', but got 'max_lr' value: %r, "
                         "'min_lr' value: %r." % (w, max_lr, min_lr))
    half = 0.5 * (max_lr - min_lr)
    return [min_lr + half * (1 + math.cos(math.pi * min(i // step_per_epoch, decay_epoch) / decay_epoch))
            for i in range(total_step)]


def polynomial_decay_lr(learning_rate, end_learning_rate, total_step, step_per_epoch, decay_epoch, power,
                        update_decay_epoch=False):
    """(learning_rate - end) * (1 - e / d) ^ power + end, with e = min(epoch, decay_epoch) and
    d = decay_epoch; with update_decay_epoch, e = epoch and d = decay_epoch * max(1, ceil(epoch /
    decay_epoch)) (the decay starts over, longer, each time it ends)."""
    w = "polynomial_decay_lr"
    _float(learning_rate, "learning_rate", w)
    _float(end_learning_rate, "end_learning_rate", w, positive=False)
    _float(power, "power", w)
    _pos_int(total_step, "total_step", w)
    _pos_int(step_per_epoch, "step_per_epoch", w)
    _pos_int(decay_epoch, "decay_epoch", w)
    _bool(update_decay_epoch, "update_decay_epoch", w)
    delta, out = learning_rate - end_learning_rate, []
    for i in range(total_step):
        e = i // step_per_epoch
        if update_decay_epoch:
            d = decay_epoch * max(math.ceil(e / decay_epoch), 1)
        else:
            d, e = decay_epoch, min(e, decay_epoch)
        out.append(delta * (1 - e / d) ** power + end_learning_rate)
    return out


def warmup_lr(learning_rate, total_step, step_per_epoch, warmup_epoch):
    """learning_rate * min(epoch, warmup_epoch) / warmup_epoch."""
    w = "warmup_lr"
    _float(learning_rate, "learning_rate", w, positive=False)
    _pos_int(warmup_epoch, "warmup_epoch", w)
    _pos_int(total_step, "total_step", w)
    _pos_int(step_per_epoch, "step_per_epoch", w)
    return [learning_rate * min(i // step_per_epoch, warmup_epoch) / warmup_epoch for i in range(total_step)]
