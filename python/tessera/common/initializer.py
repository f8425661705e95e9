"""tessera.common.initializer: MindSpore's mindspore.common.initializer.

An Initializer is a recipe: Tessera's parameter store draws the values from its counter-based RNG
(Philox, indexed by each element's global position and keyed by the parameter's name and the
seed) when the model is built, so a parameter starts with the same values on one process and
under every parallel layout. The distributions are MindSpore's (and PyTorch's, where they share
one); the draws are Tessera's, not NumPy's.

    from tessera.common.initializer import initializer, Normal, TruncatedNormal, HeUniform
    conv = nn.Conv2d(1, 6, 5, weight_init=Normal(0.02))
    dense.weight.set_data(initializer(TruncatedNormal(0.02), dense.weight.shape, ms.float32))
    w = Parameter(initializer("he_uniform", (64, 32)), name="w")

`initializer(init, shape, dtype)` returns an InitTensor (shape, dtype, init): a Parameter built
from it, or set_data with it, takes the recipe. Identity and Dirac are exact values; Orthogonal and
Sparse (NumPy draws in MindSpore) are refused, saying how to give the values instead.
"""
import math
import numbers

import numpy as np

__all__ = ["Initializer", "initializer", "TruncatedNormal", "Normal", "Uniform", "HeUniform", "HeNormal",
           "XavierUniform", "XavierNormal", "One", "Zero", "Constant", "Identity", "Sparse", "Dirac", "Orthogonal",
           "VarianceScaling", "InitTensor"]

_ALIAS = {}


def _register(*aliases):
    def reg(cls):
        _ALIAS.setdefault(cls.__name__.lower(), cls)
        for a in aliases:
            _ALIAS.setdefault(a.lower(), cls)
        return cls
    return reg


def _fans(shape, who):
    """MindSpore's (PyTorch's) fan_in and fan_out of a weight (out, in, k...)."""
    if len(shape) < 2:
        raise ValueError("%s: 'fan_in' and 'fan_out' can not be computed for a tensor of shape %s (fewer than 2 "
                         "dimensions)" % (who, tuple(shape)))
    rf = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * rf, shape[0] * rf


def _gain(nonlinearity, param, who):
    """MindSpore's _calculate_gain."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                        "conv_transpose3d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, numbers.Real):
            raise ValueError("For '%s', 'negative_slope' %r is not a valid number." % (who, param))
        return math.sqrt(2.0 / (1 + float(slope) ** 2))
    raise ValueError("For '%s', the argument 'nonlinearity' should be one of ['sigmoid', 'tanh', 'relu' or "
                     "'leaky_relu'], but got %r." % (who, nonlinearity))


def _fan(shape, mode, who):
    if str(mode).lower() not in ("fan_in", "fan_out"):
        raise ValueError("For '%s', 'mode' %r not supported, please use one of ['fan_in', 'fan_out']" % (who, mode))
    fi, fo = _fans(shape, who)
    return fi if str(mode).lower() == "fan_in" else fo


class Initializer:
    """Base of the initializers: _spec(shape) gives the parameter store's recipe, (kind, a, b)
    with kind one of the store's initializers, or ("values", ndarray) for exact values."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs

    def _spec(self, shape):
        raise NotImplementedError("%s: an initializer subclass of Tessera's gives _spec(shape)" % type(self).__name__)

    def __call__(self, arr):
        spec = self._spec(tuple(np.shape(arr)))
        if spec[0] != "values":
            raise RuntimeError("%s()(array): Tessera draws %s's values from its parameter store's counter-based RNG "
                               "when the model is built; use it as a layer's weight_init, in Parameter(initializer("
                               "...)) or param.set_data(initializer(...))" % (type(self).__name__, type(self).__name__))
        arr[...] = spec[1]
        return arr

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self._kwargs.items()))


@_register("zeros")
class Zero(Initializer):
    def _spec(self, shape):
        return "zeros", 0.0, 0.0


@_register("ones")
class One(Initializer):
    def _spec(self, shape):
        return "ones", 0.0, 0.0


class Constant(Initializer):
    def __init__(self, value):
        super().__init__(value=value)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError("Constant: value must be a number, got %r" % (value,))
        self.value = value

    def _spec(self, shape):
        return "constant", float(self.value), 0.0


@_register()
class Normal(Initializer):
    """N(mean, sigma^2)."""

    def __init__(self, sigma=0.01, mean=0.0):
        super().__init__(sigma=sigma, mean=mean)
        if not sigma >= 0:
            raise ValueError("Normal: sigma < 0")
        self.sigma, self.mean = sigma, mean

    def _spec(self, shape):
        return "normal", float(self.mean), float(self.sigma)


@_register()
class Uniform(Initializer):
    """U(-scale, scale)."""

    def __init__(self, scale=0.07):
        super().__init__(scale=scale)
        self.scale = scale

    def _spec(self, shape):
        return "uniform", -float(self.scale), float(self.scale)


@_register("truncatednormal")
class TruncatedNormal(Initializer):
    """N(mean, sigma^2) truncated to two sigmas (MindSpore's a=-2, b=2, in sigmas: its standard
    deviation is 0.8796 sigma, as VarianceScaling assumes)."""

    def __init__(self, sigma=0.01, mean=0.0, a=-2.0, b=2.0):
        super().__init__(sigma=sigma, mean=mean, a=a, b=b)
        if not sigma >= 0:
            raise ValueError("TruncatedNormal: sigma < 0")
        if (a, b) != (-2.0, 2.0):
            raise ValueError("TruncatedNormal(a=%r, b=%r): Tessera truncates at two sigmas (a=-2, b=2), MindSpore's "
                             "default" % (a, b))
        self.sigma, self.mean = sigma, mean

    def _spec(self, shape):
        return "trunc_normal", float(self.mean), float(self.sigma)


@_register("xavier_uniform")
class XavierUniform(Initializer):
    """U(-b, b), b = gain sqrt(6 / (fan_in + fan_out))."""

    def __init__(self, gain=1):
        super().__init__(gain=gain)
        self.gain = gain

    def _spec(self, shape):
        fi, fo = _fans(shape, "XavierUniform")
        b = self.gain * math.sqrt(6.0 / (fi + fo))
        return "uniform", -b, b


@_register("xavier_normal")
class XavierNormal(Initializer):
    """N(0, std^2), std = gain sqrt(2 / (fan_in + fan_out))."""

    def __init__(self, gain=1):
        super().__init__(gain=gain)
        self.gain = gain

    def _spec(self, shape):
        fi, fo = _fans(shape, "XavierNormal")
        return "normal", 0.0, self.gain * math.sqrt(2.0 / (fi + fo))


@_register("he_uniform")
class HeUniform(Initializer):
    """U(-b, b), b = gain sqrt(3 / fan) (MindSpore's HeUniform(math.sqrt(5)) is PyTorch's Linear default)."""

    def __init__(self, negative_slope=0, mode="fan_in", nonlinearity="leaky_relu"):
        super().__init__(negative_slope=negative_slope, mode=mode, nonlinearity=nonlinearity)
        self.negative_slope, self.mode, self.nonlinearity = negative_slope, mode, nonlinearity
        _gain(nonlinearity, negative_slope, "HeUniform")

    def _spec(self, shape):
        b = math.sqrt(3.0) * _gain(self.nonlinearity, self.negative_slope, "HeUniform") / math.sqrt(
            _fan(shape, self.mode, "HeUniform"))
        return "uniform", -b, b


@_register("he_normal")
class HeNormal(Initializer):
    """N(0, std^2), std = gain / sqrt(fan)."""

    def __init__(self, negative_slope=0, mode="fan_in", nonlinearity="leaky_relu"):
        super().__init__(negative_slope=negative_slope, mode=mode, nonlinearity=nonlinearity)
        self.negative_slope, self.mode, self.nonlinearity = negative_slope, mode, nonlinearity
        _gain(nonlinearity, negative_slope, "HeNormal")

    def _spec(self, shape):
        return "normal", 0.0, _gain(self.nonlinearity, self.negative_slope, "HeNormal") / math.sqrt(
            _fan(shape, self.mode, "HeNormal"))


@_register()
class VarianceScaling(Initializer):
    """stddev sqrt(scale / n) (n: fan_in, fan_out or their mean): truncated normal (divided by
    0.8796, the two-sigma truncation's), untruncated normal, or uniform within sqrt(3 scale / n)."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal"):
        super().__init__(scale=scale, mode=mode, distribution=distribution)
        if not scale > 0:
            raise ValueError("For VarianceScaling initializer, the argument 'scale' must be greater than 0, but got "
                             "%r." % (scale,))
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError("For VarianceScaling initializer, the argument 'mode' must be fan_in, fan_out or fan_avg, "
                             "but got %r." % (mode,))
        if distribution not in ("uniform", "truncated_normal", "untruncated_normal"):
            raise ValueError("For VarianceScaling initializer, the argument 'distribution' must be uniform, "
                             "truncated_normal or untruncated_normal, but got %r." % (distribution,))
        self.scale, self.mode, self.distribution = scale, mode, distribution

    def _spec(self, shape):
        fi, fo = _fans(shape, "VarianceScaling")
        n = {"fan_in": fi, "fan_out": fo}.get(self.mode, (fi + fo) / 2.0)
        s = self.scale / max(1.0, n)
        if self.distribution == "truncated_normal":
            return "trunc_normal", 0.0, math.sqrt(s) / 0.87962566103423978
        if self.distribution == "untruncated_normal":
            return "normal", 0.0, math.sqrt(s)
        lim = math.sqrt(3.0 * s)
        return "uniform", -lim, lim


@_register()
class Identity(Initializer):
    """The identity matrix (2 dimensions)."""

    def _spec(self, shape):
        if len(shape) != 2:
            raise ValueError("For Identity initializer, the dimension of the initialized tensor should be 2, but got "
                             "%d." % len(shape))
        return "values", np.eye(shape[0], shape[1], dtype=np.float32)


@_register()
class Dirac(Initializer):
    """The Dirac delta of a convolution's weight (3 to 5 dimensions), each group's channels kept."""

    def __init__(self, groups=1):
        super().__init__(groups=groups)
        self.groups = groups

    def _spec(self, shape):
        nd = len(shape)
        if nd not in (3, 4, 5):
            raise ValueError("For Dirac initializer, only support to initialize tensor with dimension of 3, 4 or 5, "
                             "but got %d." % nd)
        if shape[0] % self.groups:
            raise ValueError("For Dirac initializer, the first dimension of the initialized tensor must be divisible "
                             "by groups, but got first dimension %d, groups %d." % (shape[0], self.groups))
        a = np.zeros(shape, np.float32)
        per = shape[0] // self.groups
        for g in range(self.groups):
            for d in range(min(per, shape[1])):
                a[(g * per + d, d) + tuple(s // 2 for s in shape[2:])] = 1
        return "values", a


class _NumpyDrawn(Initializer):
    def _spec(self, shape):
        raise ValueError("%s: MindSpore draws it from NumPy's generator; Tessera's parameters come from its counter-"
                         "based RNG (the same values under every layout): compute the values with NumPy and give them "
                         "as a Tensor (Parameter(Tensor(values)), param.set_data(Tensor(values)))" % type(self).__name__)


@_register()
class Orthogonal(_NumpyDrawn):
    def __init__(self, gain=1.0):
        super().__init__(gain=gain)


@_register()
class Sparse(_NumpyDrawn):
    def __init__(self, sparsity, sigma=0.01):
        super().__init__(sparsity=sparsity, sigma=sigma)


def as_initializer(init, who="initializer"):
    """init (an Initializer, one of MindSpore's names: 'normal', 'truncatedNormal', 'he_uniform',
    ..., or a number: Constant) as an Initializer."""
    if isinstance(init, Initializer):
        return init
    if isinstance(init, str):
        cls = _ALIAS.get(init.lower())
        if cls is None:
            raise ValueError("For '%s', the class corresponding to '%s' was not found (%s)."
                             % (who, init, ", ".join(sorted(_ALIAS))))
        return cls()
    if isinstance(init, numbers.Real) and not isinstance(init, bool):
        return Constant(init)
    raise TypeError("For '%s', the type of the 'init' argument should be 'Tensor', 'number', 'string' or "
                    "'initializer', but got %s." % (who, type(init).__name__))


class InitTensor:
    """initializer()'s result: a Tensor of `shape` and `dtype` whose values `init` draws when the
    model is built (a Parameter made from it, or set_data with it, takes the recipe)."""

    def __init__(self, init, shape, dtype):
        self.init, self.shape, self.dtype = init, tuple(shape), dtype
        self._spec = init._spec(self.shape)  # (checked now: fan of a 1-D shape, Orthogonal, ...)

    @property
    def ndim(self):
        return len(self.shape)

    def asnumpy(self):
        if self._spec[0] == "values":
            return self._spec[1].copy()
        if self._spec[0] in ("zeros", "ones", "constant"):
            v = {"zeros": 0.0, "ones": 1.0}.get(self._spec[0], self._spec[1])
            return np.full(self.shape, v, np.float32)
        raise RuntimeError("initializer(%r, %s).asnumpy(): Tessera draws these values when the model is built (its "
                           "parameter store's RNG); read them from the parameter afterwards" % (self.init, self.shape))

    def init_data(self):
        return self

    def __repr__(self):
        return "InitTensor(%r, shape=%s)" % (self.init, self.shape)


def initializer(init, shape=None, dtype=None):
    """MindSpore's initializer(init, shape, dtype): init a Tensor (returned as it is), a number
    (Constant), a name or an Initializer; float32 only (Tessera's parameters)."""
    from ..tensor import Tensor
    from .dtype import float32
    if isinstance(init, Tensor):
        if shape is not None:
            want = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
            if tuple(init.shape) != want:
                raise ValueError("For 'initializer', the shape of the 'init' argument should be same as the argument "
                                 "'shape', but got the 'init' shape %s and the 'shape' %s." % (list(init.shape), want))
        return init
    init = as_initializer(init)
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    if shape is None or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in shape):
        raise ValueError("For 'initializer', the argument 'shape' is invalid, the value of 'shape' must be positive "
                         "integer, but got %r" % (shape,))
    if dtype is not None and dtype != float32 and str(dtype) not in ("Float32", "float32"):
        raise ValueError("For 'initializer', dtype %s: Tessera's parameters are float32" % (dtype,))
    return InitTensor(init, tuple(int(v) for v in shape), float32)
