"""MindSpore's mixed-precision surface (mindspore.amp): the loss-scale managers and
auto_mixed_precision, mapped onto Tessera's train.amp_level / train.loss_scale* keys
(docs/mixed-precision.md). Tessera's amp is a graph pass over the whole step: a level applies to
the network as a whole, never to a cell in isolation."""

_LEVELS = ("O0", "O1", "O2", "O3")


class LossScaleManager:
    """Base of the loss-scale managers: keys() are the config keys the Model applies."""

    def keys(self):
        raise NotImplementedError


class FixedLossScaleManager(LossScaleManager):
    """FixedLossScaleManager(loss_scale=128.0, drop_overflow_update=True): train.loss_scale fixed at
    loss_scale; drop_overflow_update=True skips a step whose gradients overflowed (inf/NaN),
    False applies it anyway (train.loss_scale_drop_overflow: false), as MindSpore does."""

    def __init__(self, loss_scale=128.0, drop_overflow_update=True):
        if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)) or not loss_scale >= 1:
            raise ValueError("FixedLossScaleManager: loss_scale must be a number >= 1, got %r" % (loss_scale,))
        if not isinstance(drop_overflow_update, bool):
            raise ValueError("FixedLossScaleManager: drop_overflow_update must be True or False, got %r"
                             % (drop_overflow_update,))
        self.loss_scale = float(loss_scale)
        self.drop_overflow_update = drop_overflow_update

    def get_loss_scale(self):
        return self.loss_scale

    def get_drop_overflow_update(self):
        return self.drop_overflow_update

    def keys(self):
        return {"train.loss_scale": "fixed", "train.loss_scale_value": self.loss_scale,
                "train.loss_scale_drop_overflow": self.drop_overflow_update}


class DynamicLossScaleManager(LossScaleManager):
    """DynamicLossScaleManager(init_loss_scale=2**24, scale_factor=2, scale_window=2000):
    train.loss_scale dynamic: the scale divided by scale_factor on overflow (the step skipped) and
    multiplied by it after scale_window steps without (train.loss_scale_value, _factor, _window)."""

    def __init__(self, init_loss_scale=2 ** 24, scale_factor=2, scale_window=2000):
        for name, v, lo in (("init_loss_scale", init_loss_scale, 1), ("scale_factor", scale_factor, 1)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= lo:
                raise ValueError("DynamicLossScaleManager: %s must be a number >= %d, got %r" % (name, lo, v))
        if scale_factor == 1:
            raise ValueError("DynamicLossScaleManager: scale_factor must be > 1, got 1")
        if isinstance(scale_window, bool) or not isinstance(scale_window, int) or scale_window < 1:
            raise ValueError("DynamicLossScaleManager: scale_window must be an int >= 1, got %r" % (scale_window,))
        self.loss_scale = float(init_loss_scale)
        self.scale_factor = float(scale_factor)
        self.scale_window = scale_window

    def get_loss_scale(self):
        return self.loss_scale

    def get_drop_overflow_update(self):
        return True

    def keys(self):
        return {"train.loss_scale": "dynamic", "train.loss_scale_value": self.loss_scale,
                "train.loss_scale_factor": self.scale_factor, "train.loss_scale_window": self.scale_window}


def _level(amp_level, who):
    if amp_level not in _LEVELS:
        raise ValueError("%s: amp_level must be one of O0, O1, O2, O3, got %r" % (who, amp_level))
    return amp_level


def auto_mixed_precision(network, amp_level="O0", dtype=None):
    """Marks the network for Tessera's amp pass at amp_level (train.amp_level) and returns it; a
    Model built on it trains at that level (a Model's own amp_level other than O0 must agree).
    dtype: None or bfloat16 (Tessera's default low precision) or float16 (train.amp_dtype)."""
    _level(amp_level, "auto_mixed_precision")
    from .nn import Cell
    if not isinstance(network, Cell):
        raise TypeError("auto_mixed_precision: network must be a tessera.nn.Cell, got %r" % (network,))
    network.__dict__["_amp_level"] = amp_level
    if dtype is not None:
        name = getattr(dtype, "name", None) or str(dtype)
        name = {"float16": "f16", "bfloat16": "bf16", "f16": "f16", "bf16": "bf16"}.get(name.split(".")[-1])
        if name is None:
            raise ValueError("auto_mixed_precision: dtype must be float16 or bfloat16, got %r" % (dtype,))
        network.__dict__["_amp_dtype"] = name
    return network


def build_train_network(network, optimizer, loss_fn=None, level="O0", boost_level="O0", **kwargs):
    """Not supported: Tessera builds the training step itself (use Model(network, loss_fn,
    optimizer, amp_level=level, loss_scale_manager=...))."""
    raise ValueError("amp.build_train_network: not supported; use tessera.Model(network, loss_fn, optimizer, "
                     "amp_level=%r, loss_scale_manager=...)" % (level,))
