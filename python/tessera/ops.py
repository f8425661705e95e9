"""tessera.ops: MindSpore's operator primitives. Create them in a Cell's __init__, call them in
construct; `.shard(((1, 1), (1, 4)))` records the operator's strategy (ts_shard), which the
parallel pass applies under semi_auto_parallel (docs/parallel-pass.md). The operator's name for
parallel.strategies is its cell's path plus the op ("block.matmul")."""
from .nn import _strategy_text
from .tensor import Tensor, as_tensor, as_value, builder, BIN, ELT, RED, _dtype_name

__all__ = ["Primitive", "MatMul", "BatchMatMul", "Add", "Sub", "Mul", "Div", "RealDiv", "ReLU", "GeLU", "Sigmoid",
           "Tanh", "Exp", "Log", "Sqrt", "Square", "Softmax", "LogSoftmax", "Reshape", "Transpose", "Flatten",
           "ReduceMean", "ReduceSum", "ReduceMax", "Concat", "Cast", "BiasAdd", "OneHot", "flatten", "reshape",
           "transpose", "cast", "matmul", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "square", "softmax",
           "log_softmax", "add", "sub", "mul", "div", "concat", "mean", "sum"]


class Primitive:
    def __init__(self):
        self._strategy = None

    def shard(self, in_strategy, out_strategy=None):
        if out_strategy is not None:
            raise ValueError("%s.shard: out_strategy is not supported (the output layout follows the inputs')"
                             % type(self).__name__)
        self._strategy = _strategy_text(in_strategy)
        return self

    def _emit(self, b, *args):
        raise NotImplementedError

    def __call__(self, *args):
        b = builder()
        v = self._emit(b, *args)
        if self._strategy:
            b.shard(v, self._strategy)
        return Tensor(b, v)


class MatMul(Primitive):
    def __init__(self, transpose_a=False, transpose_b=False):
        super().__init__()
        self.ta, self.tb = transpose_a, transpose_b

    def _emit(self, b, x, w):
        return b.matmul(as_value(x), as_value(w), self.ta, self.tb)


BatchMatMul = MatMul


class _Bin(Primitive):
    alg = None

    def _emit(self, b, x, y):
        return b.binary(as_value(x), as_value(y), BIN[self.alg])


class Add(_Bin):
    alg = "add"


class BiasAdd(_Bin):
    alg = "add"


class Sub(_Bin):
    alg = "sub"


class Mul(_Bin):
    alg = "mul"


class Div(_Bin):
    alg = "div"


RealDiv = Div


class _Elt(Primitive):
    alg = None

    def _emit(self, b, x):
        return b.eltwise(as_value(x), ELT[self.alg])


class ReLU(_Elt):
    alg = "relu"


class GeLU(_Elt):
    alg = "gelu_tanh"


class Sigmoid(_Elt):
    alg = "sigmoid"


class Tanh(_Elt):
    alg = "tanh"


class Exp(_Elt):
    alg = "exp"


class Log(_Elt):
    alg = "log"


class Sqrt(_Elt):
    alg = "sqrt"


class Square(_Elt):
    alg = "square"


class Softmax(Primitive):
    log = False

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis if isinstance(axis, int) else axis[0]

    def _emit(self, b, x):
        return b.softmax(as_value(x), self.axis, self.log)


class LogSoftmax(Softmax):
    log = True


class Reshape(Primitive):
    def _emit(self, b, x, shape):
        return b.reshape(as_value(x), list(shape))


class Transpose(Primitive):
    def _emit(self, b, x, perm):
        return b.permute(as_value(x), list(perm))


class Flatten(Primitive):
    def _emit(self, b, x):
        return b.flatten(as_value(x), 1)


class _Red(Primitive):
    alg = None

    def __init__(self, keep_dims=False):
        super().__init__()
        self.keep = keep_dims

    def _emit(self, b, x, axis=()):
        t = as_tensor(x)
        if isinstance(axis, int):
            axis = (axis,)
        if not axis:
            axis = tuple(range(t.ndim))
        return b.reduce(t._v, RED[self.alg], list(axis), self.keep)


class ReduceMean(_Red):
    alg = "mean"


class ReduceSum(_Red):
    alg = "sum"


class ReduceMax(_Red):
    alg = "max"


class Concat(Primitive):
    def __init__(self, axis=0):
        super().__init__()
        self.axis = axis

    def _emit(self, b, xs):
        return b.concat([as_value(x) for x in xs], self.axis)


class Cast(Primitive):
    """Cast()(x, dtype): dtype a MindSpore type (tessera.float16), numpy dtype or name."""

    def _emit(self, b, x, dtype):
        return b.cast(as_value(x), _dtype_name(dtype, "Cast"))


class OneHot(Primitive):
    """Refused: a one-hot matrix needs constants in the graph, which Tessera's builder does not
    record; its losses take class ids."""

    def __init__(self, axis=-1):
        raise ValueError("ops.OneHot: not supported (the graph has no constant tensors); Tessera's losses take "
                         "class ids: nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')")


# ---- MindSpore 2.x's functional forms ----
def flatten(input, order="C", *, start_dim=1, end_dim=-1):
    """(N, ...) -> (N, prod(...)) (ops.flatten's defaults); only start_dim=1, end_dim=-1."""
    if order != "C" or start_dim != 1 or end_dim != -1:
        raise ValueError("ops.flatten: only order='C', start_dim=1, end_dim=-1")
    x = as_tensor(input)
    return Tensor(x._b, x._b.flatten(x._v, 1))


def reshape(input, shape):
    return Reshape()(input, shape)


def transpose(input, input_perm):
    return Transpose()(input, input_perm)


def cast(input, dtype):
    """input as dtype (tessera.float16, ...)."""
    return Cast()(input, dtype)


def matmul(input, other):
    return MatMul()(input, other)


def relu(input):
    return ReLU()(input)


def sigmoid(input):
    return Sigmoid()(input)


def tanh(input):
    return Tanh()(input)


def exp(input):
    return Exp()(input)


def log(input):
    return Log()(input)


def sqrt(x):
    return Sqrt()(x)


def square(input):
    return Square()(input)


def softmax(input, axis=-1):
    return Softmax(axis)(input)


def log_softmax(logits, axis=-1):
    return LogSoftmax(axis)(logits)


def add(input, other):
    return Add()(input, other)


def sub(input, other):
    return Sub()(input, other)


def mul(input, other):
    return Mul()(input, other)


def div(input, other):
    return Div()(input, other)


def concat(tensors, axis=0):
    return Concat(axis)(tensors)


def mean(x, axis=None, keep_dims=False):
    return ReduceMean(keep_dims)(x, () if axis is None else axis)


def sum(input, dim=None, keepdim=False):
    return ReduceSum(keepdim)(input, () if dim is None else dim)
