"""Tensors of a graph being built (a Cell's construct records ops on them) and Parameters.

A Tensor is a value of the model's Tessera graph: nothing is computed when an op is called, the
op is recorded (shapes are inferred at once, so a bad shape raises ValueError right there, with
the library's message). Parameters are created in the graph's parameter store the first time a
construct uses them, named by their attribute path ("layer1.0.conv1.weight")."""
import numpy as np

from . import _C
from ._validator import _is_int, check_bool, check_int_list

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
    """A value of the graph being built (shape and dtype known, data not), or, made by a user as
    MindSpore's Tensor(input_data, dtype), a tensor of values (numpy underneath: asnumpy(),
    shape, dtype; Parameter(Tensor(...)) initialises a parameter with them). A Tensor of values
    whose elements are all one value (Tensor(1.0, ms.float32), ops.scalar_to_tensor(-1.0)) is a
    constant when used as an operand in construct; one of several values is one too (a state of
    the parameter store holding them: _const)."""

    __slots__ = ("_b", "_v", "_data")

    def __init__(self, input_data=None, dtype=None, *args, **kwargs):
        if isinstance(input_data, _C.Builder):  # a graph value: Tensor(builder, value id)
            self._b, self._v, self._data = input_data, dtype, None
            return
        import numpy as np
        from .common.dtype import from_tessera, to_tessera
        if input_data is None:
            raise ValueError("Tensor: input_data is required (shape-only Tensors: use Parameter(shape, init))")
        if isinstance(input_data, Tensor):
            input_data = input_data.asnumpy()
        a = np.asarray(input_data)
        if dtype is not None:
            ts = to_tessera(dtype, "Tensor(dtype)")
            a = a.astype(_NP.get(ts, "float32"))
        elif a.dtype == np.float64:
            a = a.astype(np.float32)  # MindSpore: a float64 array stays float64; Tessera has no float64
        elif a.dtype == np.bool_ or a.dtype.kind == "i" and a.dtype != np.int32:
            a = a.astype(np.int64 if a.dtype.kind == "i" else np.int32)
        to_tessera(a.dtype, "Tensor")
        self._b, self._v, self._data = None, None, a

    def asnumpy(self):
        """The values (a Tensor of values only)."""
        if self._data is None:
            raise RuntimeError("asnumpy: a graph value has no data while the graph is built (Tessera runs the "
                               "whole step compiled)")
        return self._data

    @property
    def shape(self):
        if self._data is not None:
            return tuple(self._data.shape)
        return self._b.info(self._v)[0]

    @property
    def dtype(self):
        """The MindSpore Type (tessera.float32, ...)."""
        from .common.dtype import from_tessera, to_tessera
        if self._data is not None:
            return from_tessera(to_tessera(self._data.dtype))
        return from_tessera(self._b.info(self._v)[1])

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        if self._data is not None:
            return "Tensor(shape=%s, dtype=%s, value=%s)" % (self.shape, self.dtype, self._data)
        return "Tensor(shape=%s, dtype=%s)" % (self.shape, self.dtype)

    def __str__(self):
        """MindSpore's: the values as numpy prints them (print(t), f"{t}"); repr() names the shape
        and dtype too."""
        if self._data is not None:
            return str(self._data)
        return repr(self)

    def _bin(self, other, alg, swap=False):
        if self._data is not None and (_is_number(other) or isinstance(other, Tensor) and other._data is not None):
            import numpy as np  # values with values: computed here, a Tensor of values
            o = other._data if isinstance(other, Tensor) else np.asarray(other, self._data.dtype)
            a, c = (o, self._data) if swap else (self._data, o)
            return Tensor({"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}[alg](a, c))
        if self._data is not None:  # a constant with a graph value: the graph's op
            return as_tensor(other)._bin(self, alg, not swap)
        o = as_value(other, like=self)
        a, c = (o, self._v) if swap else (self._v, o)
        return Tensor(self._b, self._b.binary(a, c, BIN[alg]))

    def __add__(self, o):
        if _is_number(o) and self._data is None:
            return Tensor(self._b, self._b.scale(self._v, 1.0, float(o)))
        return self._bin(o, "add")

    def __radd__(self, o):
        return self.__add__(o) if _is_number(o) else self._bin(o, "add", swap=True)

    def __sub__(self, o):
        if _is_number(o) and self._data is None:
            return Tensor(self._b, self._b.scale(self._v, 1.0, -float(o)))
        return self._bin(o, "sub")

    def __rsub__(self, o):
        if _is_number(o) and self._data is None:
            return Tensor(self._b, self._b.scale(self._v, -1.0, float(o)))
        return self._bin(o, "sub", swap=True)

    def __mul__(self, o):
        if _is_number(o) and self._data is None:
            return Tensor(self._b, self._b.scale(self._v, float(o), 0.0))
        return self._bin(o, "mul")

    def __rmul__(self, o):
        return self.__mul__(o) if _is_number(o) else self._bin(o, "mul", swap=True)

    def __pow__(self, o):
        if self._data is not None:
            return Tensor(np.power(self._data, o.asnumpy() if isinstance(o, Tensor) else o))
        from .ops import Pow
        return Pow()(self, o)

    def __truediv__(self, o):
        if _is_number(o) and self._data is None:
            return Tensor(self._b, self._b.scale(self._v, 1.0 / float(o), 0.0))
        return self._bin(o, "div")

    def __rtruediv__(self, o):
        return self._bin(o, "div", swap=True)

    def __neg__(self):
        if self._data is not None:
            return Tensor(-self._data)
        return Tensor(self._b, self._b.scale(self._v, -1.0, 0.0))

    def __matmul__(self, o):
        return Tensor(self._b, self._b.matmul(self._v, as_value(o, like=self), False, False))

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        if self._data is not None:
            return Tensor(self._data.reshape(shape))
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

    # ---- a Tensor of values: numpy's answers, as MindSpore's PyNative tensors give them ----
    def _vals(self, what):
        if self._data is None:
            raise TypeError("Tensor.%s: on a Tensor of values only (a graph value has no data while the graph is "
                            "built)" % what)
        return self._data

    def _arg(self, what, axis, keepdims):
        import numpy as np
        r = getattr(self._vals(what), what)(axis=axis)
        if keepdims and axis is not None:
            r = np.expand_dims(r, axis)
        return Tensor(np.asarray(r, np.int32))

    def argmax(self, axis=None, keepdims=False):
        return self._arg("argmax", axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        return self._arg("argmin", axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return Tensor(self._vals("max").max(axis=axis, keepdims=keepdims))

    def min(self, axis=None, keepdims=False):
        return Tensor(self._vals("min").min(axis=axis, keepdims=keepdims))

    def item(self):
        a = self._vals("item")
        if a.size != 1:
            raise ValueError("Tensor.item: a Tensor of %d elements (one only)" % a.size)
        return a.reshape(-1)[0].item()

    def tolist(self):
        return self._vals("tolist").tolist()

    def __array__(self, dtype=None):
        a = self._vals("__array__")
        return a if dtype is None else a.astype(dtype)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d Tensor")
        return self.shape[0]

    def __getitem__(self, i):
        if self._data is None:
            return _graph_index(self, i)
        return Tensor(self._vals("__getitem__")[i.asnumpy() if isinstance(i, Tensor) else i])

    def _cmp(self, other, op, name):
        import numpy as np
        a = self._vals(name)
        o = other.asnumpy() if isinstance(other, Tensor) else np.asarray(other)
        return Tensor(op(a, o))

    def __eq__(self, other):  # graph values: identity (as objects), so `in` and lists keep working
        import numpy as np
        if self._data is None or isinstance(other, Tensor) and other._data is None:
            return NotImplemented
        return self._cmp(other, np.equal, "__eq__")

    def __ne__(self, other):
        import numpy as np
        if self._data is None or isinstance(other, Tensor) and other._data is None:
            return NotImplemented
        return self._cmp(other, np.not_equal, "__ne__")

    def __lt__(self, other):
        import numpy as np
        return self._cmp(other, np.less, "__lt__")

    def __le__(self, other):
        import numpy as np
        return self._cmp(other, np.less_equal, "__le__")

    def __gt__(self, other):
        import numpy as np
        return self._cmp(other, np.greater, "__gt__")

    def __ge__(self, other):
        import numpy as np
        return self._cmp(other, np.greater_equal, "__ge__")

    __hash__ = object.__hash__

    def astype(self, dtype):
        if self._data is not None:
            return Tensor(self._data, dtype)
        return Tensor(self._b, self._b.cast(self._v, _dtype_name(dtype, "astype")))


_NP = dict(f32="float32", f16="float16", i32="int32", i64="int64", u8="uint8")


def _dtype_name(dt, where="dtype"):
    """Tessera's dtype name of a MindSpore Type, numpy dtype or name (ValueError naming where)."""
    from .common.dtype import to_tessera
    return to_tessera(dt, where)


def _reduce(x, alg, axis, keep):
    if isinstance(axis, int):
        axis = (axis,)
    if not axis:
        axis = tuple(range(x.ndim))
    if x._data is not None:  # values: numpy's (a sum of ints stays an int, as MindSpore's)
        import numpy as np
        a = x._data
        r = a.mean(axis=axis, keepdims=keep) if alg == "mean" else a.sum(axis=axis, keepdims=keep) \
            if alg == "sum" else a.max(axis=axis, keepdims=keep)
        return Tensor(np.asarray(r))
    return Tensor(x._b, x._b.reduce(x._v, RED[alg], list(axis), keep))


# the parameter store's initializers by name (graph.c's init_from_name); other strings are MindSpore's
# initializer names (tessera.common.initializer)
_STORE_INITS = ("normal", "uniform", "zeros", "ones", "torch_default", "xavier_uniform", "xavier_normal",
                "he_uniform", "he_normal")


class Parameter:
    """A trainable (or, requires_grad=False, persistent state) tensor of a Cell, created in the
    graph's parameter store under its attribute path when the model is built. The first argument
    is a shape with init: "normal" (std sigma, default 0.01 as MindSpore's), "uniform" (U(-scale,
    scale)), "zeros", "ones", "xavier_uniform", "he_uniform", "he_normal", "torch_default", or a
    float constant; or MindSpore's default_input: a Tensor / numpy array of the initial values
    (Parameter(Tensor(np.ones((4, 4)), ms.float32), name="w")): the Model loads them into the
    trainer when it is created (a data set of uniform values is the constant initializer)."""

    def __init__(self, shape, init="normal", name=None, requires_grad=True, sigma=0.01, scale=0.07,
                 weight_decay=True, layerwise_parallel=False, shard_axis=None, **kw):
        self._data = None
        if name is not None and not isinstance(name, str):
            raise TypeError("For 'Parameter', the 'name' must be a str or None, but got %s %r." % (type(name).__name__, name))
        requires_grad = check_bool(requires_grad, "requires_grad", "Parameter")
        # hybrid_parallel's layer-wise parallel parameter: `shape` is THIS rank's slice (as in
        # MindSpore's scripts); the whole tensor is the slice stacked over the job's ranks along
        # shard_axis (Tessera's extension: the dimension the ranks cut; a 1-dim slice needs none)
        self.layerwise_parallel = check_bool(layerwise_parallel, "layerwise_parallel", "Parameter")
        if shard_axis is not None and not self.layerwise_parallel:
            raise ValueError("Parameter%s: shard_axis=%r is for layerwise_parallel=True parameters"
                             % (_named(name), shard_axis))
        if shard_axis is not None and (isinstance(shard_axis, bool) or not isinstance(shard_axis, int)):
            raise ValueError("Parameter%s: shard_axis must be an int (the dimension the ranks cut), got %r"
                             % (_named(name), shard_axis))
        self.shard_axis = shard_axis
        from .common.initializer import InitTensor, Initializer
        self._built = False  # registered in a graph: set_data can no longer reach the trainer
        if isinstance(shape, InitTensor):  # Parameter(initializer(Normal(0.02), (4, 4)), name="w")
            shape, init = shape.shape, shape.init
        elif isinstance(shape, Tensor) or hasattr(shape, "__array__") and not isinstance(shape, (tuple, list)):
            shape, init = self._values(shape, name)
        elif isinstance(init, Tensor) and init._data is not None:
            raise ValueError("Parameter: give the values first: Parameter(Tensor(values), name=...)")
        if self.layerwise_parallel and self._data is not None:
            raise ValueError("Parameter%s: layerwise_parallel=True with initial values of several elements: a "
                             "layer-wise slice is initialised by an initializer (\"normal\", ...) so that it holds "
                             "exactly the unsharded parameter's values there; load values with a checkpoint" % _named(name))
        if not isinstance(shape, (tuple, list)) and not _is_int(shape):
            raise TypeError("For 'Parameter', the 'shape' must be a tuple of ints (or initial values: a Tensor or numpy "
                            "array), but got %s %r." % (type(shape).__name__, shape))
        self.shape = tuple(check_int_list(shape if isinstance(shape, (tuple, list)) else (shape,), "shape",
                                          "Parameter", 0))
        if self.layerwise_parallel:
            nd = len(self.shape)
            if shard_axis is None and nd == 1:
                self.shard_axis = 0
            elif shard_axis is None:
                raise ValueError("Parameter%s %s: layerwise_parallel=True: which dimension do the ranks cut? Give "
                                 "shard_axis=0..%d (Tessera's extension: the whole tensor, which checkpoints hold and "
                                 "initialisation follows, is the slice stacked over the ranks along it)"
                                 % (_named(name), self.shape, nd - 1))
            elif not -nd <= shard_axis < nd:
                raise ValueError("Parameter%s %s: shard_axis=%d is out of range for %d dims"
                                 % (_named(name), self.shape, shard_axis, nd))
            else:
                self.shard_axis = shard_axis % nd
        if isinstance(init, str) and init not in _STORE_INITS:  # MindSpore's names ("truncatedNormal", ...)
            from .common.initializer import as_initializer
            init = as_initializer(init, "Parameter")
        self.init = init
        if isinstance(init, Initializer):
            spec = init._spec(self.shape)  # (checked now)
            if spec[0] == "values":
                self._data, self.init = np.ascontiguousarray(spec[1], np.float32), "zeros"
        self.name = name
        self.requires_grad = requires_grad
        self.sigma, self.scale = sigma, scale
        self.weight_decay = weight_decay
        self._local = None  # attribute name in its cell (set by Cell.__setattr__)

    def _values(self, t, name):
        """(shape, init) of initial values t (a Tensor or array): the constant initializer where they
        are one value (exact), else zeros with self._data loaded when the Model creates its trainer."""
        t = t if isinstance(t, Tensor) else Tensor(np.asarray(t))
        a = t.asnumpy()
        if _dtype_name(a.dtype, "Parameter") != "f32":
            raise ValueError("Parameter %r: initial values of type %s (parameters are float32)" % (name, t.dtype))
        flat = a.reshape(-1)
        self._data = None
        if flat.size and (flat == flat[0]).all():
            return a.shape, float(flat[0])
        self._data = a
        return a.shape, "zeros"

    def asnumpy(self):
        """The values: once a Model (or value_and_grad) built the network, its trainer's current
        ones (a copy; under a layout that cuts the parameter, this rank's slice), as MindSpore's
        after training; before, the initial values given (None when an initializer draws them as
        the network is built)."""
        owner = self.__dict__.get("_owner")
        net = owner() if owner is not None else None
        t = getattr(net, "_trainer", None) if net is not None else None
        if t is not None:
            v = t.params().get(self.name)
            if v is not None:
                import numpy as np
                return np.array(v)
        return self._data

    @property
    def dtype(self):
        from .common.dtype import float32
        return float32

    @property
    def data(self):
        return self

    def init_data(self):
        return self

    def set_data(self, data, slice_shape=False):
        """MindSpore's set_data before the model is built: data an initializer's result
        (initializer(TruncatedNormal(0.02), p.shape)), a Tensor or array of values, or a number;
        the shape stays. After the model is built (the graph registered this parameter) it is
        refused: load values with load_param_into_net then."""
        from .common.initializer import InitTensor, as_initializer
        who = "Parameter %r" % (self.name or self._local,)
        if self._built:
            raise RuntimeError("%s.set_data: the model using it is built (its trainer holds the values): load new "
                               "values with load_param_into_net(net, {name: Parameter(Tensor(values))})" % who)
        if self.layerwise_parallel:
            raise ValueError("%s.set_data: a layer-wise parallel slice is initialised by its initializer" % who)
        if isinstance(data, InitTensor):
            shape, init, values = data.shape, data.init, None
            spec = init._spec(self.shape)
            if spec[0] == "values":
                init, values = "zeros", np.ascontiguousarray(spec[1], np.float32)
        elif isinstance(data, (int, float)) and not isinstance(data, bool):
            shape, init, values = self.shape, as_initializer(data), None
        else:
            keep = self._data
            shape, init = self._values(data, self.name)
            values, self._data = self._data, keep
        if tuple(shape) != tuple(self.shape):
            raise ValueError("%s.set_data: the new data's shape %s differs from the parameter's %s"
                             % (who, tuple(shape), tuple(self.shape)))
        self.init, self._data, self._set = init, values, True
        return self

    def _spec(self):
        i = self.init
        from .common.initializer import Initializer
        if isinstance(i, Initializer):
            return i._spec(self.shape)
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
        self._built = True
        kind, a, c = self._spec()
        if self.layerwise_parallel:
            if b.mode != "hybrid_parallel":
                raise ValueError("Parameter %r: layerwise_parallel=True is a slice of hybrid_parallel (the rank's own, "
                                 "not replicated); this job's parallel_mode is %r: use "
                                 "set_auto_parallel_context(parallel_mode=\"hybrid_parallel\"), or under "
                                 "semi_auto_parallel a whole Parameter cut by op.shard(...)" % (self.name or self._local, b.mode))
            return b.param_sharded(self._local, list(self.shape), self.shard_axis, kind, a, c, not self.weight_decay,
                                   not self.requires_grad)
        return b.param(self._local, list(self.shape), kind, a, c, not self.weight_decay, not self.requires_grad)

    def __repr__(self):
        return "Parameter (name=%s, shape=%s, dtype=Float32, requires_grad=%s)" % (self.name, self.shape,
                                                                                 self.requires_grad)  # MindSpore's


def _named(name):
    return " %r" % (name,) if name else ""


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _graph_index(t, index):
    """x[index] of a graph value: ints, slices of step 1 (None: the whole dimension), None (a new
    dimension of 1) and one Ellipsis; slices along the indexed dimensions, then one reshape."""
    idx = index if isinstance(index, tuple) else (index,)
    if sum(1 for k in idx if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in idx if k is not None and k is not Ellipsis)
    if used > t.ndim:
        raise IndexError("too many indices for a Tensor of shape %s: %r" % (t.shape, index))
    if Ellipsis in idx:
        e = idx.index(Ellipsis)
        idx = idx[:e] + (slice(None),) * (t.ndim - used) + idx[e + 1:]
    idx = idx + (slice(None),) * (t.ndim - sum(1 for k in idx if k is not None))
    b, v, ax, out = t._b, t._v, 0, []
    for k in idx:
        if k is None:
            out.append(1)
            continue
        d = t.shape[ax]
        if isinstance(k, slice):
            if k.step not in (None, 1):
                raise IndexError("Tensor[...] in construct: slices of step 1 only, got %r" % (k,))
            s0, e0, _ = k.indices(d)
            e0 = max(e0, s0)
            if e0 == s0:
                raise IndexError("Tensor[...] in construct: %r selects nothing of a dimension of %d" % (k, d))
            if (s0, e0) != (0, d):
                v = b.slice(v, ax, s0, e0)
            out.append(e0 - s0)
        elif _is_int(k):
            k = int(k)
            if not -d <= k < d:
                raise IndexError("index %d is out of bounds for dimension %d of size %d" % (k, ax, d))
            k %= d
            v = b.slice(v, ax, k, k + 1)
        else:
            raise IndexError("Tensor[...] in construct: ints, slices, None and ... only, got %r" % (k,))
        ax += 1
    return Tensor(b, b.reshape(v, out) if tuple(out) != tuple(Tensor(b, v).shape) else v)


# Graph constants of several values recorded while a graph is built: full parameter name -> f32
# values. Each is a persistent state of the parameter store (not trained, no gradient) named
# "_const_<crc32 of its values>" in the cell's scope; the Model loads the values into its trainer
# once created (nn._collect_pending), as it does a Parameter's given values.
_CONSTANTS = {}


def _const(a, what="a Tensor of values"):
    """The graph constant of numpy array a: one value: ts_const; several: a state of the parameter
    store holding them (f32; other dtypes cast from it, their values exact in f32)."""
    flat = a.reshape(-1)
    if flat.size and (flat == flat[0]).all():
        return builder().const(_dtype_name(a.dtype, "Tensor"), list(a.shape), float(flat[0]))
    dt = _dtype_name(a.dtype, "Tensor")
    f = np.ascontiguousarray(a, dtype=np.float32)
    if flat.size == 0 or (dt != "f32" and not np.array_equal(f.astype(a.dtype), a)):
        raise ValueError("%s %s of %s used as an operand in construct: %s" % (
            what, tuple(a.shape), a.dtype, "it is empty" if flat.size == 0 else
            "Tessera keeps a constant of several values in float32, which does not hold these exactly"))
    import zlib
    b = builder()
    name = "_const_%08x" % (zlib.crc32(f.tobytes() + repr((dt, a.shape)).encode()) & 0xffffffff)
    v = b.param(name, list(a.shape), "zeros", 0.0, 0.0, True, True)
    _CONSTANTS[b.scope + "." + name if b.scope else name] = f
    return b.cast(v, dt) if dt != "f32" else v


def as_value(x, like=None):
    """The graph value of a Tensor or Parameter (the parameter registered in the current scope); a
    Tensor of values whose elements are one value, and a Python number, are constants (a number
    takes the dtype of `like`, the op's other operand, else float32)."""
    if isinstance(x, Tensor):
        if x._data is not None:
            return _const(x._data)
        return x._v
    if isinstance(x, Parameter):
        return x._value(builder())
    if _is_number(x):
        dt = _dtype_name(like.dtype) if isinstance(like, Tensor) else "f32"
        if isinstance(x, float) and dt not in ("f32", "f16", "bf16"):
            dt = "f32"
        return builder().const(dt, [], float(x))
    raise TypeError("expected a Tensor or Parameter, got %r" % (x,))


def as_tensor(x):
    """x as a graph Tensor (Parameters, constants and numbers recorded)."""
    return x if isinstance(x, Tensor) and x._data is None else Tensor(builder(), as_value(x))
