"""Tensors of a graph being built (a Cell's construct records ops on them) and Parameters.

A Tensor is a value of the model's Tessera graph: nothing is computed when an op is called, the
op is recorded (shapes are inferred at once, so a bad shape raises ValueError right there, with
the library's message). Parameters are created in the graph's parameter store the first time a
construct uses them, named by their attribute path ("layer1.0.conv1.weight")."""
from . import _C

ELT = dict(relu=0, gelu_tanh=1, gelu=2, sigmoid=3, tanh=4, exp=5, log=6, sqrt=7, square=8, abs=9, neg=10)
BIN = dict(add=0, sub=1, mul=2, div=3)
RED = dict(sum=0, mean=1, max=2)

_current = [None]  # the Builder of the model being built


def builder():
    b = _current[0]
    if b is None:
        raise RuntimeError("tessera: ops run only inside a Cell's construct while the Model builds the graph")
    return b


class Tensor:
    """A value of the graph being built (shape and dtype known, data not)."""

    __slots__ = ("_b", "_v")

    def __init__(self, b, v):
        self._b = b
        self._v = v

    @property
    def shape(self):
        return self._b.info(self._v)[0]

    @property
    def dtype(self):
        return self._b.info(self._v)[1]

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return "Tensor(shape=%s, dtype=%s)" % (self.shape, self.dtype)

    def _bin(self, other, alg, swap=False):
        o = as_value(other, like=self)
        a, b = (o, self._v) if swap else (self._v, o)
        return Tensor(self._b, self._b.binary(a, b, BIN[alg]))

    def __add__(self, o):
        if isinstance(o, (int, float)):
            return Tensor(self._b, self._b.scale(self._v, 1.0, float(o)))
        return self._bin(o, "add")

    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, (int, float)):
            return Tensor(self._b, self._b.scale(self._v, 1.0, -float(o)))
        return self._bin(o, "sub")

    def __rsub__(self, o):
        if isinstance(o, (int, float)):
            return Tensor(self._b, self._b.scale(self._v, -1.0, float(o)))
        return self._bin(o, "sub", swap=True)

    def __mul__(self, o):
        if isinstance(o, (int, float)):
            return Tensor(self._b, self._b.scale(self._v, float(o), 0.0))
        return self._bin(o, "mul")

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, (int, float)):
            return Tensor(self._b, self._b.scale(self._v, 1.0 / float(o), 0.0))
        return self._bin(o, "div")

    def __neg__(self):
        return Tensor(self._b, self._b.scale(self._v, -1.0, 0.0))

    def __matmul__(self, o):
        return Tensor(self._b, self._b.matmul(self._v, as_value(o, like=self), False, False))

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return Tensor(self._b, self._b.reshape(self._v, list(shape)))

    view = reshape

    def transpose(self, *perm):
        if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
            perm = perm[0]
        return Tensor(self._b, self._b.permute(self._v, list(perm)))

    def mean(self, axis=(), keep_dims=False):
        return _reduce(self, "mean", axis, keep_dims)

    def sum(self, axis=(), keep_dims=False):
        return _reduce(self, "sum", axis, keep_dims)

    def astype(self, dtype):
        return Tensor(self._b, self._b.cast(self._v, _dtype_name(dtype)))


def _dtype_name(dt):
    s = getattr(dt, "__name__", str(dt)).lower().replace("mindspore.", "")
    return dict(float32="f32", float16="f16", bfloat16="bf16", int32="i32", int64="i64", uint8="u8").get(s, s)


def _reduce(x, alg, axis, keep):
    if isinstance(axis, int):
        axis = (axis,)
    if not axis:
        axis = tuple(range(x.ndim))
    return Tensor(x._b, x._b.reduce(x._v, RED[alg], list(axis), keep))


class Parameter:
    """A trainable (or, requires_grad=False, persistent state) tensor of a Cell, created in the
    graph's parameter store under its attribute path when the model is built. init: "normal"
    (std sigma, default 0.01 as MindSpore's), "uniform" (U(-scale, scale)), "zeros", "ones",
    "xavier_uniform", "he_uniform", "he_normal", "torch_default", or a float constant."""

    def __init__(self, shape, init="normal", name=None, requires_grad=True, sigma=0.01, scale=0.07,
                 weight_decay=True):
        self.shape = tuple(int(d) for d in shape)
        self.init = init
        self.name = name
        self.requires_grad = requires_grad
        self.sigma, self.scale = sigma, scale
        self.weight_decay = weight_decay
        self._local = None  # attribute name in its cell (set by Cell.__setattr__)

    def _spec(self):
        i = self.init
        if isinstance(i, (int, float)) and not isinstance(i, bool):
            return "constant", float(i), 0.0
        if i == "normal":
            return "normal", 0.0, float(self.sigma)
        if i == "uniform":
            return "uniform", -float(self.scale), float(self.scale)
        if i in ("zeros", "ones", "torch_default"):
            return i, 0.0, 0.0
        if i in ("xavier_uniform", "xavier_normal", "he_uniform", "he_normal"):
            return i, 0.0, 0.0
        raise ValueError("parameter '%s': unknown initializer %r" % (self.name or self._local, i))

    def _value(self, b):
        kind, a, c = self._spec()
        return b.param(self._local, list(self.shape), kind, a, c, not self.weight_decay, not self.requires_grad)

    def __repr__(self):
        return "Parameter(name=%r, shape=%s)" % (self.name, self.shape)


def as_value(x, like=None):
    """The graph value of a Tensor or Parameter (the parameter registered in the current scope)."""
    if isinstance(x, Tensor):
        return x._v
    if isinstance(x, Parameter):
        return x._value(builder())
    if isinstance(x, (int, float)) and like is not None:
        raise ValueError("a Python number here needs a Tensor op (use x * 2.0, x + 1.0)")
    raise TypeError("expected a Tensor or Parameter, got %r" % (x,))


def as_tensor(x):
    return x if isinstance(x, Tensor) else Tensor(builder(), as_value(x))
