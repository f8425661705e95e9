"""tessera.ops: MindSpore's operator primitives. Create them in a Cell's __init__, call them in
construct; `.shard(((1, 1), (1, 4)))` records the operator's strategy (ts_shard), which the
parallel pass applies under semi_auto_parallel (docs/parallel-pass.md). The operator's name for
parallel.strategies is its cell's path plus the op ("block.matmul")."""
from .nn import _strategy_text
from ._validator import check_bool, check_int, check_int_list
from .tensor import Parameter, Tensor, as_tensor, as_value, builder, BIN, ELT, RED, _dtype_name

__all__ = ["value_and_grad", "grad", "Pow", "Minimum", "Maximum", "Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "FloorDiv", "Floor",
           "Ceil", "Cos", "Sin", "Primitive", "MatMul", "BatchMatMul", "Add", "Sub", "Mul", "Div", "RealDiv", "ReLU", "GeLU", "Sigmoid",
           "Tanh", "Exp", "Log", "Sqrt", "Square", "Softmax", "LogSoftmax", "Reshape", "Transpose", "Flatten",
           "ReduceMean", "ReduceSum", "ReduceMax", "Concat", "Cast", "BiasAdd", "OneHot", "Shape", "Neg", "Abs",
           "ScalarToTensor", "ScalarToArray", "ReduceOp", "AllReduce", "AllGather", "ReduceScatter", "flatten",
           "reshape",
           "transpose", "cast", "matmul", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "square", "softmax",
           "log_softmax", "add", "sub", "mul", "div", "concat", "mean", "sum", "neg", "abs", "one_hot", "shape",
           "scalar_to_tensor", "scalar_to_array", "fill", "ones", "zeros", "ones_like", "zeros_like", "Rsqrt",
           "ExpandDims", "Squeeze", "Stack", "BroadcastTo", "Slice", "Split", "maximum", "minimum", "rsqrt",
           "expand_dims", "unsqueeze", "squeeze", "stack", "broadcast_to", "slice", "split", "ReduceMin", "pow"]


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
        if _values_only(args) and hasattr(self, "_np"):  # outside a graph: computed on the values
            return _value_result(self._np(*[a.asnumpy() if isinstance(a, Tensor) else a for a in args]))
        b = builder()
        v = self._emit(b, *args)
        if self._strategy:
            b.shard(v, self._strategy)
        return Tensor(b, v)


def _values_only(args):
    """Outside a graph being built, with Tensors of values (and Python numbers) only: the op is
    computed on the values (a learning-rate schedule's construct, for one)."""
    from . import tensor as _t
    return _t._current[0] is None and any(isinstance(a, Tensor) for a in args) and \
        all(a._data is not None for a in args if isinstance(a, Tensor))


def _value_result(a):
    import numpy as np
    a = np.asarray(a)
    return Tensor(a.astype(np.float32) if a.dtype == np.float64 else a)


def _like(x, y):
    """Numbers take the other operand's dtype (as in graphs)."""
    import numpy as np
    if isinstance(x, (int, float)) and isinstance(y, np.ndarray):
        x = np.asarray(x, y.dtype if y.dtype.kind == "f" or isinstance(x, int) else np.float32)
    return x


class _ValuesOnly(Primitive):
    """A primitive Tessera computes on Tensors of values only (outside graphs: learning-rate
    schedules' construct); in a graph it is refused."""

    def _emit(self, b, *args):
        raise ValueError("ops.%s: computed on Tensors of values only (e.g. in a LearningRateSchedule's construct); "
                         "Tessera's graphs have no %s op" % (type(self).__name__, type(self).__name__))


def _np_op(name, fn):
    import numpy as np
    return type(name, (_ValuesOnly,), {"_np": lambda self, x, y=None: fn(np, _like(x, y), _like(y, x))
                                       if y is not None else fn(np, x, None),
                                       "__doc__": "MindSpore's %s, on Tensors of values." % name})


Greater = _np_op("Greater", lambda np, x, y: np.greater(x, y))
GreaterEqual = _np_op("GreaterEqual", lambda np, x, y: np.greater_equal(x, y))
Less = _np_op("Less", lambda np, x, y: np.less(x, y))
LessEqual = _np_op("LessEqual", lambda np, x, y: np.less_equal(x, y))
Equal = _np_op("Equal", lambda np, x, y: np.equal(x, y))
FloorDiv = _np_op("FloorDiv", lambda np, x, y: np.floor_divide(x, y))
Floor = _np_op("Floor", lambda np, x, _: np.floor(x))
Ceil = _np_op("Ceil", lambda np, x, _: np.ceil(x))
Cos = _np_op("Cos", lambda np, x, _: np.cos(x))
Sin = _np_op("Sin", lambda np, x, _: np.sin(x))


def _pow_emit(b, x, e):
    """x ** e in a graph for a constant exponent e: 1, 2 (square), 0.5 (sqrt), -0.5, -1, else
    exp(e log x) (x > 0)."""
    t = as_tensor(x)
    e = float(e)
    if e == 1.0:
        return t._v
    if e == 2.0:
        return b.eltwise(t._v, ELT["square"])
    if e in (0.5, -0.5):
        r = b.eltwise(t._v, ELT["sqrt"])
        return r if e > 0 else b.binary(b.const(_dtype_name(t.dtype), [], 1.0), r, BIN["div"])
    if e == -1.0:
        return b.binary(b.const(_dtype_name(t.dtype), [], 1.0), t._v, BIN["div"])
    return b.eltwise(b.scale(b.eltwise(t._v, ELT["log"]), e, 0.0), ELT["exp"])


class Pow(Primitive):
    """Pow()(x, y): in a graph y a constant (a number or a Tensor of one value; squares, square
    roots and reciprocals exactly, other exponents as exp(y log x) for x > 0); np.power on values."""

    def _emit(self, b, x, y):
        if isinstance(y, Tensor) and y._data is not None and y._data.size == 1:
            y = float(y._data.reshape(-1)[0])
        if not isinstance(y, (int, float)) or isinstance(y, bool):
            raise ValueError("ops.Pow in construct: the exponent must be a constant (a number or a Tensor of one "
                             "value), got %r" % (y,))
        return _pow_emit(b, x, y)

    def _np(self, x, y):
        import numpy as np
        return np.power(_like(x, y), _like(y, x))


class Maximum(Primitive):
    """Maximum()(x, y), NumPy broadcasting: x + relu(y - x) in a graph (at a tie the gradient goes to
    x), np.maximum on values."""

    def _emit(self, b, x, y):
        xv, yv = as_value(x, like=y), as_value(y, like=x)
        return b.binary(xv, b.eltwise(b.binary(yv, xv, BIN["sub"]), ELT["relu"]), BIN["add"])

    def _np(self, x, y):
        import numpy as np
        return np.maximum(_like(x, y), _like(y, x))


class Minimum(Primitive):
    """Minimum()(x, y): x - relu(x - y) in a graph, np.minimum on values."""

    def _emit(self, b, x, y):
        xv, yv = as_value(x, like=y), as_value(y, like=x)
        return b.binary(xv, b.eltwise(b.binary(xv, yv, BIN["sub"]), ELT["relu"]), BIN["sub"])

    def _np(self, x, y):
        import numpy as np
        return np.minimum(_like(x, y), _like(y, x))


class Rsqrt(Primitive):
    """Rsqrt()(x): 1 / sqrt(x)."""

    def _emit(self, b, x):
        t = as_tensor(x)
        return b.binary(b.const(_dtype_name(t.dtype), [], 1.0), b.eltwise(t._v, ELT["sqrt"]), BIN["div"])

    def _np(self, x):
        import numpy as np
        return 1.0 / np.sqrt(x)


class ExpandDims(Primitive):
    """ExpandDims()(x, axis): a dimension of 1 inserted at axis (-ndim-1 .. ndim)."""

    def _emit(self, b, x, axis):
        t = as_tensor(x)
        a = check_int(axis, "axis", "ExpandDims", -t.ndim - 1, t.ndim)
        a = a + t.ndim + 1 if a < 0 else a
        return b.reshape(t._v, list(t.shape[:a]) + [1] + list(t.shape[a:]))

    def _np(self, x, axis):
        import numpy as np
        return np.expand_dims(x, axis)


class Squeeze(Primitive):
    """Squeeze(axis=())(x): the dimensions of 1 (those of axis, each of which must be 1) removed."""

    def __init__(self, axis=()):
        super().__init__()
        self.axis = (axis,) if isinstance(axis, int) else tuple(check_int_list(axis, "axis", "Squeeze", None))

    def _dims(self, shape):
        nd = len(shape)
        if not self.axis:
            return [d for d in shape if d != 1]
        ax = {a + nd if a < 0 else a for a in self.axis}
        for a in ax:
            if not 0 <= a < nd or shape[a] != 1:
                raise ValueError("For 'Squeeze', axis %r of an input of shape %s must name dimensions of size 1"
                                 % (self.axis, tuple(shape)))
        return [d for i, d in enumerate(shape) if i not in ax]

    def _emit(self, b, x):
        t = as_tensor(x)
        return b.reshape(t._v, self._dims(t.shape))

    def _np(self, x):
        return x.reshape(self._dims(x.shape))


class Stack(Primitive):
    """Stack(axis=0)(tensors): the tensors (one shape) along a new dimension axis."""

    def __init__(self, axis=0):
        super().__init__()
        self.axis = check_int(axis, "axis", "Stack")

    def _emit(self, b, xs):
        ts = [as_tensor(x) for x in xs]
        if not ts or any(t.shape != ts[0].shape for t in ts):
            raise ValueError("For 'Stack', the tensors must have one shape, got %s" % [t.shape for t in ts])
        nd = ts[0].ndim
        a = self.axis + nd + 1 if self.axis < 0 else self.axis
        if not 0 <= a <= nd:
            raise ValueError("For 'Stack', axis %d is out of range for %d-dim tensors" % (self.axis, nd))
        shp = list(ts[0].shape[:a]) + [1] + list(ts[0].shape[a:])
        return b.concat([b.reshape(t._v, shp) for t in ts], a)

    def __call__(self, xs):
        if _values_only(tuple(xs)):
            import numpy as np
            return _value_result(np.stack([x.asnumpy() if isinstance(x, Tensor) else x for x in xs], self.axis))
        return Tensor(builder(), self._emit(builder(), xs))


class BroadcastTo(Primitive):
    """BroadcastTo(shape)(x): x broadcast to shape (NumPy's rules; -1 keeps x's size), as x + 0."""

    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(check_int_list(shape, "shape", "BroadcastTo", -1))

    def _target(self, xshape):
        k = len(self.shape) - len(xshape)
        return [xshape[i - k] if d == -1 and i >= k else d for i, d in enumerate(self.shape)]

    def _emit(self, b, x):
        t = as_tensor(x)
        return b.binary(t._v, b.const(_dtype_name(t.dtype), self._target(t.shape), 0.0), BIN["add"])

    def _np(self, x):
        import numpy as np
        return np.broadcast_to(x, self._target(x.shape)).copy()


def _slice_emit(b, t, starts, ends):
    v = t._v
    for ax, (s0, e0) in enumerate(zip(starts, ends)):
        if s0 != 0 or e0 != t.shape[ax]:
            v = b.slice(v, ax, int(s0), int(e0))
    return v


class Slice(Primitive):
    """Slice()(x, begin, size): x[begin[i] : begin[i] + size[i]] along every dimension (size -1:
    to the end)."""

    def _bounds(self, shape, begin, size):
        begin, size = check_int_list(begin, "begin", "Slice", 0), check_int_list(size, "size", "Slice", -1)
        if len(begin) != len(shape) or len(size) != len(shape):
            raise ValueError("For 'Slice', begin %s and size %s must have one entry per dimension of %s"
                             % (tuple(begin), tuple(size), tuple(shape)))
        ends = [d if z == -1 else s0 + z for s0, z, d in zip(begin, size, shape)]
        if any(s0 > d or e0 > d or e0 < s0 for s0, e0, d in zip(begin, ends, shape)):
            raise ValueError("For 'Slice', begin %s and size %s exceed the shape %s" % (tuple(begin), tuple(size),
                                                                                      tuple(shape)))
        return begin, ends

    def _emit(self, b, x, begin, size):
        t = as_tensor(x)
        return _slice_emit(b, t, *self._bounds(t.shape, begin, size))

    def _np(self, x, begin, size):
        s, e = self._bounds(x.shape, begin, size)
        import builtins
        return x[tuple(builtins.slice(a, z) for a, z in zip(s, e))].copy()


class Split(Primitive):
    """Split(axis=0, output_num=1)(x): output_num equal parts along axis, a tuple."""

    def __init__(self, axis=0, output_num=1):
        super().__init__()
        self.axis = check_int(axis, "axis", "Split")
        self.n = check_int(output_num, "output_num", "Split", 1)

    def __call__(self, x):
        t = as_tensor(x) if not (isinstance(x, Tensor) and x._data is not None) else x
        nd = len(t.shape)
        a = self.axis + nd if self.axis < 0 else self.axis
        if not 0 <= a < nd or t.shape[a] % self.n:
            raise ValueError("For 'Split', axis %d of shape %s must divide into %d equal parts"
                             % (self.axis, tuple(t.shape), self.n))
        k = t.shape[a] // self.n
        if t._data is not None and _values_only((t,)):
            import numpy as np
            return tuple(_value_result(p) for p in np.split(t.asnumpy(), self.n, a))
        b = builder()
        return tuple(Tensor(b, b.slice(t._v, a, i * k, (i + 1) * k)) for i in range(self.n))


class MatMul(Primitive):
    def __init__(self, transpose_a=False, transpose_b=False):
        super().__init__()
        self.ta = check_bool(transpose_a, "transpose_a", type(self).__name__)
        self.tb = check_bool(transpose_b, "transpose_b", type(self).__name__)

    def _emit(self, b, x, w):
        return b.matmul(as_value(x), as_value(w), self.ta, self.tb)


BatchMatMul = MatMul


class _Bin(Primitive):
    """Tensors, Parameters, Tensors of one value and Python numbers (constants: a number takes the
    other operand's dtype); NumPy broadcasting."""
    alg = None

    def _emit(self, b, x, y):
        return b.binary(as_value(x, like=y), as_value(y, like=x), BIN[self.alg])

    def _np(self, x, y):
        import numpy as np
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}[self.alg](
            _like(x, y), _like(y, x))


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

    def _np(self, x):
        import numpy as np
        f = {"relu": lambda v: np.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh,
             "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "square": np.square, "abs": np.abs,
             "neg": np.negative}.get(self.alg)
        if f is None:
            raise ValueError("ops.%s: not computed on Tensors of values" % type(self).__name__)
        return f(np.asarray(x))


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
        w = type(self).__name__
        if isinstance(axis, (tuple, list)):
            if len(axis) != 1:
                raise ValueError("For '%s', the 'axis' must be an int or a tuple of one int, but got %r." % (w, axis))
            axis = axis[0]
        self.axis = check_int(axis, "axis", w)

    def _emit(self, b, x):
        return b.softmax(as_value(x), self.axis, self.log)


class LogSoftmax(Softmax):
    log = True


class Reshape(Primitive):
    def _emit(self, b, x, shape):
        return b.reshape(as_value(x), check_int_list(shape, "input_shape", "Reshape", -1))


class Transpose(Primitive):
    def _emit(self, b, x, perm):
        return b.permute(as_value(x), check_int_list(perm, "input_perm", "Transpose"))


class Flatten(Primitive):
    def _emit(self, b, x):
        return b.flatten(as_value(x), 1)


class _Red(Primitive):
    alg = None

    def __init__(self, keep_dims=False):
        super().__init__()
        self.keep = check_bool(keep_dims, "keep_dims", type(self).__name__)

    def _emit(self, b, x, axis=()):
        t = as_tensor(x)
        if not isinstance(axis, (tuple, list)):
            axis = (check_int(axis, "axis", type(self).__name__),)
        axis = check_int_list(axis, "axis", type(self).__name__)
        if not axis:
            axis = tuple(range(t.ndim))
        return b.reduce(t._v, RED[self.alg], list(axis), self.keep)


class ReduceMean(_Red):
    alg = "mean"


class ReduceSum(_Red):
    alg = "sum"


class ReduceMax(_Red):
    alg = "max"


class ReduceMin(ReduceMax):
    """ReduceMin(keep_dims)(x, axis): -ReduceMax(-x)."""

    def _emit(self, b, x, axis=()):
        t = as_tensor(x)
        neg = Tensor(b, b.scale(t._v, -1.0, 0.0))
        return b.scale(super()._emit(b, neg, axis), -1.0, 0.0)


class Concat(Primitive):
    def __init__(self, axis=0):
        super().__init__()
        self.axis = check_int(axis, "axis", "Concat")

    def _emit(self, b, xs):
        return b.concat([as_value(x) for x in xs], self.axis)


class Cast(Primitive):
    """Cast()(x, dtype): dtype a MindSpore type (tessera.float16), numpy dtype or name."""

    def _emit(self, b, x, dtype):
        return b.cast(as_value(x), _dtype_name(dtype, "Cast"))

    def _np(self, x, dtype):
        return Tensor(x, dtype).asnumpy()


def _scalar(x, what):
    """The Python value of a constant operand: a number or a Tensor of one value."""
    if isinstance(x, Tensor) and x._data is not None:
        a = x._data.reshape(-1)
        if a.size != 1:
            raise ValueError("%s: expected one value, got a Tensor of shape %s" % (what, x.shape))
        return a[0].item(), _dtype_name(x._data.dtype)
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x, None
    raise ValueError("%s: expected a constant (a number or Tensor(1.0, ms.float32)), got %r: Tessera takes on/off "
                     "values and the depth when the graph is recorded" % (what, x))


class OneHot(Primitive):
    """OneHot(axis=-1)(indices, depth, on_value, off_value), as MindSpore's: indices int32/int64
    (class ids: the labels a Model feeds), depth an int, on_value/off_value constants (numbers or
    Tensors of one value; the output takes their dtype, float32 for Python floats). An index
    outside [0, depth) gives off_value everywhere (MindSpore's semantics). No gradient flows to
    the indices (ts_one_hot)."""

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = check_int(axis, "axis", "OneHot", -1)

    def _emit(self, b, indices, depth, on_value=1.0, off_value=0.0):
        d, _ = _scalar(depth, "OneHot depth")
        check_int(d, "depth", "OneHot", 1)
        on, dt_on = _scalar(on_value, "OneHot on_value")
        off, dt_off = _scalar(off_value, "OneHot off_value")
        dt = dt_on or dt_off or "f32"
        if dt_on and dt_off and dt_on != dt_off:
            raise ValueError("OneHot: on_value (%s) and off_value (%s) must have the same dtype" % (dt_on, dt_off))
        t = as_tensor(indices)
        if t.dtype not in (_int32(), _int64()):
            raise ValueError("OneHot: indices must be int32 or int64 (class ids), got %s" % (t.dtype,))
        return b.one_hot(t._v, int(d), self.axis, float(on), float(off), dt)


def _int32():
    from .common.dtype import int32
    return int32


def _int64():
    from .common.dtype import int64
    return int64


class Shape(Primitive):
    """Shape()(x): the shape of x as a tuple of ints (known when the graph is recorded)."""

    def __call__(self, x):
        return shape(x)


class Neg(_Elt):
    alg = "neg"


class Abs(_Elt):
    alg = "abs"


class ScalarToTensor(Primitive):
    """ScalarToTensor()(x, dtype=float32): a Tensor of one value (a constant in construct)."""

    def __call__(self, input_x, dtype=None):
        return scalar_to_tensor(input_x, dtype)


class ScalarToArray(Primitive):
    def __call__(self, input_x):
        return scalar_to_array(input_x)


# ---- MindSpore 2.x's functional forms ----

# ---- collectives placed by hand (parallel_mode="hybrid_parallel") ----

class ReduceOp:
    """MindSpore's ReduceOp for AllReduce / ReduceScatter. SUM and Tessera's MEAN differentiate;
    MAX and MIN record (forward) but have no gradient in Tessera (the training graph is refused
    at its backward, naming the op: use them on values that need none); PROD is refused."""
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"
    MEAN = "mean"  # Tessera's extension (the C op's TS_REDUCE_MEAN)


_REDUCE = {"sum": 0, "mean": 1, "max": 2, "min": 3}


class _Collective(Primitive):
    """A collective over every rank of the job (the world group; plan communicator slot 0),
    recorded where construct calls it. Only under parallel_mode="hybrid_parallel", where the
    network is each rank's own graph (semi_auto/auto_parallel insert the collectives their layout
    needs themselves; data_parallel reduces the gradients itself)."""
    kind = None

    def __init__(self, op=ReduceOp.SUM, group=None):
        super().__init__()
        from .communication.management import _world
        _world("ops." + type(self).__name__, group)
        if op not in _REDUCE:
            raise ValueError("ops.%s(op=%r): Tessera's collectives reduce with ReduceOp.SUM, MEAN, MAX or MIN "
                             "(PROD is not supported)" % (type(self).__name__, op))
        self.op, self.group = op, group

    def shard(self, in_strategy, out_strategy=None):
        raise ValueError("ops.%s.shard: a collective placed by hand has no strategy (hybrid_parallel)"
                         % type(self).__name__)

    def _emit(self, b, x):
        if b.mode != "hybrid_parallel":
            raise ValueError("ops.%s: collectives placed by hand in construct run under "
                             "set_auto_parallel_context(parallel_mode=\"hybrid_parallel\") (each rank's own graph); "
                             "this job's parallel_mode is %r%s" % (type(self).__name__, b.mode, {
                                 "semi_auto_parallel": ", where the parallel pass inserts the collectives the "
                                                       "op.shard(...) strategies need itself",
                                 "auto_parallel": ", where the searched layout's collectives are inserted by the "
                                                  "parallel pass",
                                 "data_parallel": ", where the gradients are reduced over the ranks by Tessera",
                             }.get(b.mode, "")))
        return b.collective(self.kind, as_value(x), _REDUCE[self.op])


class AllReduce(_Collective):
    """AllReduce(op=ReduceOp.SUM, group=GlobalComm.WORLD_COMM_GROUP)(x): op over the ranks, the
    same shape on every rank. Gradient (SUM): the AllReduce(SUM) of the output's gradients."""
    kind = 0


class AllGather(_Collective):
    """AllGather(group)(x): the ranks' x concatenated along dim 0 (rank order). Gradient: each
    rank's block of the ReduceScatter(SUM) of the output's gradients."""
    kind = 1

    def __init__(self, group=None):
        super().__init__(ReduceOp.SUM, group)


class ReduceScatter(_Collective):
    """ReduceScatter(op=ReduceOp.SUM, group)(x): op over the ranks, then rank r keeps block r of
    dim 0 (x.shape[0] divisible by the ranks). Gradient (SUM): the AllGather of the gradients."""
    kind = 2


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


def pow(x, y):  # noqa: A001 (MindSpore's name)
    return Pow()(x, y)


def maximum(x, y):
    return Maximum()(x, y)


def minimum(x, y):
    return Minimum()(x, y)


def rsqrt(x):
    return Rsqrt()(x)


def expand_dims(x, axis):
    return ExpandDims()(x, axis)


def unsqueeze(x, dim):
    return ExpandDims()(x, dim)


def squeeze(x, axis=()):
    return Squeeze(axis)(x)


def stack(tensors, axis=0):
    return Stack(axis)(tensors)


def broadcast_to(x, shape):
    return BroadcastTo(shape)(x)


def slice(x, begin, size):  # noqa: A001 (MindSpore's name)
    return Slice()(x, begin, size)


def split(x, axis=0, output_num=1):
    return Split(axis, output_num)(x)


def mean(x, axis=None, keep_dims=False):
    return ReduceMean(keep_dims)(x, () if axis is None else axis)


def sum(input, dim=None, keepdim=False):
    return ReduceSum(keepdim)(input, () if dim is None else dim)


def neg(input):
    return Neg()(input)


def abs(input):
    return Abs()(input)


def one_hot(indices, depth, on_value=1.0, off_value=0.0, axis=-1):
    """MindSpore 2.x's ops.one_hot (OneHot(axis)(indices, depth, on_value, off_value))."""
    return OneHot(axis)(indices, depth, on_value, off_value)


def shape(input_x):
    """The shape of input_x as a tuple of ints (MindSpore's ops.shape; known at record time)."""
    if isinstance(input_x, Parameter):
        return tuple(input_x.shape)
    if isinstance(input_x, Tensor):
        return tuple(input_x.shape)
    raise TypeError("ops.shape: expected a Tensor, got %r" % (input_x,))


def scalar_to_tensor(input_x, dtype=None):
    """A Tensor of one value, float32 unless dtype says otherwise (a constant when used in
    construct)."""
    import numpy as np
    from .common.dtype import float32
    if isinstance(input_x, bool) or not isinstance(input_x, (int, float)):
        raise TypeError("scalar_to_tensor: expected a number, got %r" % (input_x,))
    return Tensor(np.asarray(input_x), float32 if dtype is None else dtype)


def scalar_to_array(input_x):
    """MindSpore 1.x's ScalarToArray: a float32 Tensor of one value."""
    return scalar_to_tensor(float(input_x))


def fill(type, shape, value):
    """A Tensor of `shape` filled with value (a constant when used in construct)."""
    import numpy as np
    return Tensor(np.full(tuple(shape), value), type)


def ones(shape, dtype=None):
    from .common.dtype import float32
    return fill(dtype or float32, (shape,) if isinstance(shape, int) else shape, 1)


def zeros(shape, dtype=None):
    from .common.dtype import float32
    return fill(dtype or float32, (shape,) if isinstance(shape, int) else shape, 0)


def ones_like(input, dtype=None):
    return fill(dtype or input.dtype, input.shape, 1)


def zeros_like(input, dtype=None):
    return fill(dtype or input.dtype, input.shape, 0)


def value_and_grad(fn, grad_position=0, weights=None, has_aux=False, return_ids=False):
    """mindspore.ops.value_and_grad: tessera.value_and_grad (tessera.train.functional)."""
    from .train.functional import value_and_grad as f
    return f(fn, grad_position, weights, has_aux, return_ids)


def grad(fn, grad_position=0, weights=None, has_aux=False, return_ids=False):
    """mindspore.ops.grad: tessera.grad (tessera.train.functional)."""
    from .train.functional import grad as f
    return f(fn, grad_position, weights, has_aux, return_ids)
