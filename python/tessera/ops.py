"""tessera.ops: MindSpore's operator primitives. Create them in a Cell's __init__, call them in
construct; `.shard(((1, 1), (1, 4)))` records the operator's strategy (ts_shard), which the
parallel pass applies under semi_auto_parallel (docs/parallel-pass.md). The operator's name for
parallel.strategies is its cell's path plus the op ("block.matmul")."""
from .nn import _strategy_text
from .tensor import Tensor, as_tensor, as_value, builder, BIN, ELT, RED, _dtype_name

__all__ = ["Primitive", "MatMul", "BatchMatMul", "Add", "Sub", "Mul", "Div", "RealDiv", "ReLU", "GeLU", "Sigmoid",
           "Tanh", "Exp", "Log", "Sqrt", "Square", "Softmax", "LogSoftmax", "Reshape", "Transpose", "Flatten",
           "ReduceMean", "ReduceSum", "ReduceMax", "Concat", "Cast", "BiasAdd"]


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
    def _emit(self, b, x, dtype):
        return b.cast(as_value(x), _dtype_name(dtype))
