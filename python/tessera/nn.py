"""tessera.nn: MindSpore's nn surface over Tessera's graph builder.

A Cell's construct records ops into the model's Tessera graph when a Model builds it (the C
trainer calls back into Python, twice: the training graph and the evaluation graph). Parameters
are named by attribute path, as MindSpore names them ("layer1.0.conv1.weight"); the layers keep
PyTorch's parameter suffixes (weight, bias, running_mean, running_var: Tessera's checkpoints
line up with PyTorch's state_dicts). Losses and optimizers are descriptions the Model turns into
config keys (docs/config.md); nothing here computes."""
import collections
import zlib

from ._validator import check_bool, check_float, check_int, check_int_or_tuple, describe
from .tensor import Parameter, Tensor, as_tensor, as_value, builder, BIN, ELT, RED, _dtype_name

__all__ = ["Cell", "SequentialCell", "CellList", "Dense", "Conv2d", "BatchNorm2d", "LayerNorm", "Embedding",
           "ReLU", "ReLU6", "GELU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Flatten", "MaxPool2d", "AvgPool2d",
           "AdaptiveAvgPool2d",
           "Dropout", "MultiHeadAttention", "LossBase", "SoftmaxCrossEntropyWithLogits", "CrossEntropyLoss",
           "MSELoss", "L1Loss", "MAELoss", "RMSELoss", "SmoothL1Loss", "BCEWithLogitsLoss", "NLLLoss",
           "WithLossCell", "Optimizer",
           "SGD", "Momentum", "Adam", "AdamWeightDecay", "AdamW", "Lamb", "Parameter"]


def _strategy_text(strategy):
    """MindSpore's shard tuple ((1, 1), (1, 4)) as Tessera's strategy text "((1,1),(1,4))"."""
    if isinstance(strategy, str):
        return strategy.replace(" ", "")

    def one(t):
        if isinstance(t, int):
            return str(t)
        inner = ",".join(one(x) for x in t)
        return "(" + inner + ("," if len(t) == 1 else "") + ")"
    if not isinstance(strategy, (tuple, list)):
        raise ValueError("shard: expected a tuple of tuples like ((1, 1), (1, 4)), got %r" % (strategy,))
    return one(strategy)


_TOP = []  # value_and_grad's captures of the top-level Cell calls (tessera.train.functional)
_DEPTH = [0]  # Cell calls under way
_OPTIMIZERS = []  # optimizers made, newest last (value_and_grad's weights= finds theirs)


class Cell:
    """Base class of networks: subclasses create sub-cells and Parameters in __init__ and write
    construct(self, x, ...) with Tensor ops, sub-cells and tessera.ops primitives."""

    _leaf = False  # a layer whose op names itself (Dense, Conv2d, ...): no scope of its own

    def __init__(self, auto_prefix=True, flags=None):
        self._init_cell()

    def _init_cell(self):
        d = self.__dict__
        if "_cells" not in d:
            d["_cells"] = collections.OrderedDict()
            d["_params"] = collections.OrderedDict()
            d["_name"] = ""
            d["_recompute"] = False
            d["_stage"] = None
            d["training"] = True

    def __setattr__(self, k, v):
        self._init_cell()
        if isinstance(v, Cell):
            v._init_cell()
            self._cells[k] = v
            v.__dict__["_name"] = k
            # initial values of Parameters made from data, by path: the root's are loaded by the
            # Model when it creates its trainer (as load_param_into_net before a Model)
            for name, a in (v.__dict__.get("_pending_params") or {}).items():
                self._pending()[k + "." + name] = a
        elif isinstance(v, Parameter):
            self._params[k] = v
            v._local = k
            if v._data is not None:
                self._pending()[k] = v._data
        elif k == "pipeline_stage":
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError("pipeline_stage: expected a stage number >= 0, got %r" % (v,))
            self.__dict__["_stage"] = v
            return
        object.__setattr__(self, k, v)

    def _pending(self):
        return self.__dict__.setdefault("_pending_params", {})

    @property
    def pipeline_stage(self):
        return self._stage

    def construct(self, *args):
        raise NotImplementedError("%s.construct" % type(self).__name__)

    def __call__(self, *args, **kwargs):
        self._init_cell()
        from . import tensor as _t
        if _t._current[0] is None:  # outside a graph: on values (PyNative's use: model(data), loss_fn(...))
            return self._eager(*args, **kwargs)
        b = builder()
        push = not self._leaf and self._name != ""
        if push:
            b.push_scope(self._name)
        _DEPTH[0] += 1
        try:
            out = self.construct(*args, **kwargs)
        finally:
            _DEPTH[0] -= 1
            if push:
                b.pop_scope()
        if _TOP and _DEPTH[0] == 0 and not isinstance(self, LossBase):
            _TOP[-1].cells.append(self)
            _TOP[-1].outputs.append(out)
        return out

    def _eager(self, *args, **kwargs):
        """The cell on values outside a graph: a network runs its evaluation graph with the
        current parameters (the trainer that trains it, or one made for the input's shape, as
        Model.predict does) and returns the output's values; BatchNorm and Dropout act as in
        inference, whatever set_train says."""
        import numpy as np
        if len(args) != 1 or kwargs:
            raise RuntimeError("%s called outside a graph with %d inputs: Tessera runs a network on values with one "
                               "input (the batch), as Model.predict" % (type(self).__name__, len(args) + len(kwargs)))
        x = args[0]
        if isinstance(x, Tensor) and x._data is None:
            raise RuntimeError("%s called on a graph value outside the graph being built" % type(self).__name__)
        x = np.ascontiguousarray(x.asnumpy() if isinstance(x, Tensor) else np.asarray(x))
        t = self.__dict__.get("_trainer")
        if t is None:
            from .train.model import Model
            return Tensor(Model(self).predict(x))
        return Tensor(t.forward(x))

    # ---- structure ----
    def name_cells(self):
        return collections.OrderedDict(self._cells)

    def cells(self):
        return list(self._cells.values())

    def cells_and_names(self, prefix=""):
        yield prefix, self
        for k, c in self._cells.items():
            yield from c.cells_and_names(prefix + "." + k if prefix else k)

    def _param_specs(self):
        """(local name, shape) of the parameters a leaf layer creates (trainable ones)."""
        return []

    def _state_specs(self):
        """(local name, shape) of the persistent states a leaf layer creates (not trained)."""
        return []

    # a leaf layer's parameters as its library op registers them: name -> (no weight decay, state)
    _leaf_flags = {}
    # MindSpore's names of a leaf layer's parameters -> the library's (BatchNorm's gamma -> weight)
    _leaf_alias = {}

    def __getattr__(self, k):
        """A leaf layer's parameters as attributes (dense.weight, bn.gamma, bn.moving_mean): the
        layer's Parameters, whose set_data gives another initializer or values before the model
        is built."""
        k2 = type(self)._leaf_alias.get(k, k)
        if k2 in type(self)._leaf_flags and "_cells" in self.__dict__:
            for name, shape in self._param_specs() + self._state_specs():
                if name == k2:
                    return self._leaf_param(name, shape)
        raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, k))

    def _leaf_param(self, name, shape, path=None):
        """The Parameter standing for a leaf layer's parameter `name` (init None: the layer's own)."""
        d = self.__dict__.setdefault("_leafp", {})
        p = d.get(name)
        if p is None:
            state = type(self)._leaf_flags.get(name, (False, False))[1]
            p = d[name] = Parameter(shape, init=None, name=path or name, requires_grad=not state)
            p._built = self.__dict__.get("_layer_built", False)
        if path:
            p.name = path
        return p

    def _init_leaf(self, name, init, who):
        """weight_init= / bias_init= / gamma_init=...: a leaf parameter's initializer (a name, an
        Initializer, a number, initializer()'s result) or initial values (a Tensor or array)."""
        from .common.initializer import InitTensor, as_initializer
        p = getattr(self, name)
        if isinstance(init, (Tensor, InitTensor)) or hasattr(init, "__array__") and not isinstance(init, (str, int, float)):
            p.set_data(init)
        else:
            p.set_data(InitTensor(as_initializer(init, who), p.shape, None))

    def _leaf_overrides(self, b):
        """The layer's parameters given another initializer or values, registered under the layer's
        name before its op (which then uses them as they are); every one marked built."""
        self.__dict__["_layer_built"] = True
        for name, p in (self.__dict__.get("_leafp") or {}).items():
            p._built = True
            if p.init is None:
                continue
            kind, a, c = p._spec()
            nodecay, state = type(self)._leaf_flags.get(name, (False, False))
            b.param(_scoped_name(self) + "." + name, list(p.shape), kind, a, c, nodecay, state)

    def parameters_and_names(self, prefix=""):
        for path, c in self.cells_and_names(prefix):
            pre = path + "." if path else ""
            for name, shape in c._param_specs():
                yield pre + name, c._leaf_param(name, shape, pre + name)
            for k, p in c._params.items():
                p.name = pre + k
                yield pre + k, p

    def trainable_params(self, recurse=True):
        return [p for _, p in self.parameters_and_names() if p.requires_grad]

    def get_parameters(self):
        return iter(self.trainable_params())

    def set_train(self, mode=True):
        for _, c in self.cells_and_names():
            c.__dict__["training"] = bool(mode)
        return self

    def recompute(self, mode=True):
        """Activations of this cell are recomputed in backward (model.recompute: full, with this
        cell's path as a model.recompute_layers pattern)."""
        self._init_cell()
        self.__dict__["_recompute"] = bool(mode)
        return self

    def __repr__(self):
        return "%s()" % type(self).__name__


def _collect_pending(net):
    """The initial values net's trainer loads once created: its graph constants of several values,
    those of Parameters made from values
    (recorded as they were set on their cells, and load_param_into_net before a Model), then every
    parameter's set_data (its values, or none where an initializer replaced them); each taken once,
    as the recorded ones (a second Model on the network keeps the trained values)."""
    from .tensor import _CONSTANTS
    pending = dict(net.__dict__.pop("_pending_params", None) or {})
    pending.update(_CONSTANTS)  # the graph constants of several values its build recorded
    _CONSTANTS.clear()
    for path, c in net.cells_and_names():
        pre = path + "." if path else ""
        ps = [(k, p) for k, p in c._params.items()] + list((c.__dict__.get("_leafp") or {}).items())
        for k, p in ps:
            if getattr(p, "_set", False):
                if p._data is not None:
                    pending[pre + k] = p._data
                else:
                    pending.pop(pre + k, None)
                p._set = False
    return pending


class SequentialCell(Cell):
    def __init__(self, *args):
        super().__init__()
        cells = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple, collections.OrderedDict)) else args
        if isinstance(cells, collections.OrderedDict):
            for k, c in cells.items():
                setattr(self, k, c)
        else:
            for i, c in enumerate(cells):
                setattr(self, str(i), c)

    def __getitem__(self, i):
        return list(self._cells.values())[i]

    def __len__(self):
        return len(self._cells)

    def append(self, cell):
        setattr(self, str(len(self._cells)), cell)

    def construct(self, x):
        for c in self._cells.values():
            x = c(x)
        return x


class CellList(SequentialCell):
    def construct(self, *args):
        raise RuntimeError("CellList is a container: call its cells from the parent's construct")


def _scoped_name(cell):
    if not cell._name:
        raise ValueError("%s used as the root network: wrap it in a Cell (its parameters need a name)"
                         % type(cell).__name__)
    return cell._name


class _ShardProxy:
    """dense.matmul.shard(...) as in MindSpore (Dense's matmul primitive): the dense op's strategy."""

    def __init__(self, cell):
        self._cell = cell

    def shard(self, in_strategy, out_strategy=None):
        self._cell.shard(in_strategy)
        return self


def _layer_inits(cell, who, **inits):
    """A layer's weight_init= / bias_init= / gamma_init= ... arguments (None, or the library's
    default "torch_default": the layer's own, MindSpore 2.x's defaults)."""
    for name, init in inits.items():
        if init is not None and not (isinstance(init, str) and init == "torch_default"):
            cell._init_leaf(name, init, who)


class Dense(Cell):
    """Dense(in_channels, out_channels, weight_init=None, bias_init=None, has_bias=True,
    activation=None): y = x W^T + b, W (out, in), by default PyTorch's Linear init (MindSpore 2.x's
    HeUniform(sqrt(5)) and its bias); weight_init / bias_init another initializer (a name,
    tessera.common.initializer's Normal(0.02), TruncatedNormal, ..., or values). shard(): the dense
    op's strategy, inputs (x, weight[, bias]), e.g. ((1, 1), (2, 1), (2,))."""

    _leaf = True

    _leaf_flags = {"weight": (False, False), "bias": (True, False)}

    def __init__(self, in_channels, out_channels, weight_init=None, bias_init=None, has_bias=True, activation=None):
        super().__init__()
        self.in_channels = check_int(in_channels, "in_channels", "Dense", 1)
        self.out_channels = check_int(out_channels, "out_channels", "Dense", 1)
        self.has_bias = check_bool(has_bias, "has_bias", "Dense")
        self.activation = activation
        self._strategy = None
        self.matmul = _ShardProxy(self)
        _layer_inits(self, "Dense", weight=weight_init, bias=bias_init if self.has_bias else None)

    def shard(self, strategy):
        self._strategy = _strategy_text(strategy)
        return self

    def _param_specs(self):
        return [("weight", (self.out_channels, self.in_channels))] + ([("bias", (self.out_channels,))] if self.has_bias else [])

    def construct(self, x):
        x = as_tensor(x)
        if x.shape[-1] != self.in_channels:
            raise ValueError("Dense '%s': input %s has %d features, in_channels is %d"
                             % (self._name, x.shape, x.shape[-1], self.in_channels))
        b = x._b
        self._leaf_overrides(b)
        y = b.dense(_scoped_name(self), x._v, self.out_channels, self.has_bias)
        if self._strategy:
            b.shard(y, self._strategy)
        y = Tensor(b, y)
        return _activation(self.activation)(y) if self.activation else y


def _activation(a):
    if callable(a) and not isinstance(a, str):
        return a
    m = dict(relu=ReLU, gelu=GELU, sigmoid=Sigmoid, tanh=Tanh)
    if a not in m:
        raise ValueError("activation: unknown %r (relu, gelu, sigmoid, tanh)" % (a,))
    return m[a]()


def _pair(v, what, cls, minimum=1):
    """(h, w) of an int or a 1- or 2-tuple of ints (TypeError for anything else: no truncation)."""
    return check_int_or_tuple(v, what, cls, 2, minimum)


def _pad_mode(pad_mode, padding, cls):
    m = str(pad_mode).lower()
    if m not in ("same", "valid", "pad"):
        raise ValueError("%s: pad_mode: 'same', 'valid' or 'pad', got %r" % (cls, pad_mode))
    zero = padding == 0 or (isinstance(padding, (tuple, list)) and all(p == 0 for p in padding))
    if m != "pad" and not zero:
        raise ValueError("%s(padding=%r, pad_mode=%r): a non-zero padding needs pad_mode='pad' (MindSpore refuses "
                         "it too)" % (cls, padding, pad_mode))
    return m


def _same_pads(size, k, s, d):
    """MindSpore's (TensorFlow's) "same": output ceil(size / s), the total padding split evenly,
    an odd one's extra row/column at the bottom/right. (before, after)."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _pad_rows(x, axis, before, after, edge):
    """x with `before`/`after` extra rows along axis (2: H, 3: W): zeros, or (edge) copies of the
    first/last row (for max pooling: the same maxima as padding excluded from the window)."""
    if not before and not after:
        return x
    b = x._b
    n = x.shape[axis]
    first = b.slice(x._v, axis, 0, 1)
    last = b.slice(x._v, axis, n - 1, n) if after else None
    if not edge:
        first = b.scale(first, 0.0, 0.0)
        last = first
    parts = [first] * before + [x._v] + [last] * after
    return Tensor(b, b.concat(parts, axis))


class Conv2d(Cell):
    """Conv2d(in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0,
    dilation=1, group=1, has_bias=False) on NCHW, square kernels. pad_mode "same" pads as
    MindSpore does (output ceil(H / stride); an odd total padding's extra row/column at the
    bottom/right), "valid" not at all, "pad" by `padding`: an int or (top, bottom, left, right).
    A non-zero padding with another pad_mode is refused, as MindSpore refuses it. weight_init /
    bias_init as Dense's (default PyTorch's Conv2d init, MindSpore 2.x's)."""

    _leaf = True
    _leaf_flags = {"weight": (False, False), "bias": (True, False)}

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0, dilation=1,
                 group=1, has_bias=False, weight_init=None, bias_init=None, data_format="NCHW", dtype=None):
        super().__init__()
        in_channels = check_int(in_channels, "in_channels", "Conv2d", 1)
        out_channels = check_int(out_channels, "out_channels", "Conv2d", 1)
        group = check_int(group, "group", "Conv2d", 1)
        has_bias = check_bool(has_bias, "has_bias", "Conv2d")
        kh, kw = _pair(kernel_size, "kernel_size", "Conv2d")
        if kh != kw:
            raise ValueError("Conv2d: only square kernels, got %r" % (kernel_size,))
        sh, sw = _pair(stride, "stride", "Conv2d")
        dh, dw = _pair(dilation, "dilation", "Conv2d")
        if sh != sw or dh != dw:
            raise ValueError("Conv2d: stride and dilation the same along H and W, got %r, %r" % (stride, dilation))
        if data_format != "NCHW":
            raise ValueError("Conv2d: data_format: only NCHW")
        if not isinstance(padding, (tuple, list)):
            check_int(padding, "padding", "Conv2d", 0)
        self.pad_mode = _pad_mode(pad_mode, padding, "Conv2d")
        if self.pad_mode == "pad":
            self.padding = check_int_or_tuple(padding, "padding", "Conv2d", 4, 0, lengths=(4,))
        self.in_channels, self.out_channels, self.k = int(in_channels), int(out_channels), int(kh)
        self.stride, self.dilation, self.group, self.has_bias = int(sh), int(dh), group, bool(has_bias)
        _layer_inits(self, "Conv2d", weight=weight_init, bias=bias_init if self.has_bias else None)

    def _param_specs(self):
        w = ("weight", (self.out_channels, self.in_channels // self.group, self.k, self.k))
        return [w] + ([("bias", (self.out_channels,))] if self.has_bias else [])

    def construct(self, x):
        x = as_tensor(x)
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError("Conv2d '%s': input %s, expected (N, %d, H, W)" % (self._name, x.shape, self.in_channels))
        if self.pad_mode == "valid":
            t = b_ = l_ = r_ = 0
        elif self.pad_mode == "pad":
            t, b_, l_, r_ = self.padding
        else:
            t, b_ = _same_pads(x.shape[2], self.k, self.stride, self.dilation)
            l_, r_ = _same_pads(x.shape[3], self.k, self.stride, self.dilation)
        p = min(t, b_, l_, r_)  # the library's symmetric padding; the rest as zero rows/columns
        x = _pad_rows(_pad_rows(x, 2, t - p, b_ - p, False), 3, l_ - p, r_ - p, False)
        self._leaf_overrides(x._b)
        return Tensor(x._b, x._b.conv2d(_scoped_name(self), x._v, self.out_channels, self.k, self.stride, p,
                                        self.dilation, self.group, self.has_bias))


def _is_name(init, name):
    return isinstance(init, str) and init.lower() == name


class BatchNorm2d(Cell):
    """BatchNorm2d(num_features, eps=1e-5, momentum=0.9, gamma_init="ones", beta_init="zeros",
    moving_mean_init="zeros", moving_var_init="ones"): MindSpore's momentum (moving = momentum *
    moving + (1 - momentum) * batch), i.e. PyTorch's 1 - momentum. Parameters weight, bias and
    states running_mean, running_var (also as MindSpore's gamma, beta, moving_mean,
    moving_variance attributes); the inits as Dense's weight_init (ResNet's last BN: gamma_init=0)."""

    _leaf = True
    _leaf_flags = {"weight": (True, False), "bias": (True, False), "running_mean": (False, True),
                   "running_var": (False, True)}
    _leaf_alias = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean", "moving_variance": "running_var"}

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True, gamma_init="ones", beta_init="zeros",
                 moving_mean_init="zeros", moving_var_init="ones", use_batch_statistics=None, data_format="NCHW"):
        super().__init__()
        if not check_bool(affine, "affine", "BatchNorm2d"):
            raise ValueError("BatchNorm2d: affine=False is not supported")
        if data_format != "NCHW":
            raise ValueError("BatchNorm2d: data_format: only NCHW")
        self.num_features = check_int(num_features, "num_features", "BatchNorm2d", 1)
        self.eps = check_float(eps, "eps", "BatchNorm2d", 0.0, min_open=True)
        self.momentum = check_float(momentum, "momentum", "BatchNorm2d", 0.0, 1.0)
        _layer_inits(self, "BatchNorm2d", weight=None if _is_name(gamma_init, "ones") else gamma_init,
                     bias=None if _is_name(beta_init, "zeros") else beta_init,
                     running_mean=None if _is_name(moving_mean_init, "zeros") else moving_mean_init,
                     running_var=None if _is_name(moving_var_init, "ones") else moving_var_init)

    def _param_specs(self):
        return [("weight", (self.num_features,)), ("bias", (self.num_features,))]

    def _state_specs(self):
        return [("running_mean", (self.num_features,)), ("running_var", (self.num_features,))]

    def construct(self, x):
        x = as_tensor(x)
        self._leaf_overrides(x._b)
        return Tensor(x._b, x._b.batchnorm(_scoped_name(self), x._v, 1.0 - self.momentum, self.eps))


class BatchNorm1d(BatchNorm2d):
    """BatchNorm1d(num_features, eps=1e-5, momentum=0.9, gamma_init, beta_init, moving_mean_init,
    moving_var_init) on (N, C) or (N, C, L): BatchNorm2d's statistics over every dimension but C."""

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True, gamma_init="ones", beta_init="zeros",
                 moving_mean_init="zeros", moving_var_init="ones", use_batch_statistics=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, gamma_init, beta_init, moving_mean_init, moving_var_init,
                         use_batch_statistics)

    def construct(self, x):
        x = as_tensor(x)
        if x.ndim not in (2, 3) or x.shape[1] != self.num_features:
            raise ValueError("BatchNorm1d '%s': input %s, expected (N, %d) or (N, %d, L)"
                             % (self._name, x.shape, self.num_features, self.num_features))
        return super().construct(x)


class LayerNorm(Cell):
    """LayerNorm(normalized_shape, gamma_init="ones", beta_init="zeros", epsilon=1e-7) over the last
    dimension only (gamma, beta: also as MindSpore's attribute names)."""

    _leaf = True

    _leaf_flags = {"weight": (True, False), "bias": (True, False)}
    _leaf_alias = {"gamma": "weight", "beta": "bias"}

    def __init__(self, normalized_shape, begin_norm_axis=-1, begin_params_axis=-1, gamma_init="ones", beta_init="zeros",
                 epsilon=1e-7):
        super().__init__()
        shp = check_int_or_tuple(normalized_shape, "normalized_shape", "LayerNorm", 1, 1,
                                 lengths=tuple(range(1, 9)))
        if not isinstance(normalized_shape, (tuple, list)):
            shp = shp[:1]
        begin_norm_axis = check_int(begin_norm_axis, "begin_norm_axis", "LayerNorm")
        begin_params_axis = check_int(begin_params_axis, "begin_params_axis", "LayerNorm")
        if len(shp) != 1 or begin_norm_axis != -1 or begin_params_axis != -1:
            raise ValueError("LayerNorm: only the last dimension (normalized_shape of one size)")
        self.d, self.eps = shp[0], check_float(epsilon, "epsilon", "LayerNorm", 0.0, min_open=True)
        _layer_inits(self, "LayerNorm", weight=None if _is_name(gamma_init, "ones") else gamma_init,
                     bias=None if _is_name(beta_init, "zeros") else beta_init)

    def _param_specs(self):
        return [("weight", (self.d,)), ("bias", (self.d,))]

    def construct(self, x):
        x = as_tensor(x)
        self._leaf_overrides(x._b)
        return Tensor(x._b, x._b.layernorm(_scoped_name(self), x._v, self.eps))


_TABLE_DEFAULT = object()  # Embedding's embedding_table not given


class Embedding(Cell):
    """Embedding(vocab_size, embedding_size, embedding_table=...): ids (int32/int64) -> (...,
    embedding_size); without embedding_table the table starts N(0, 1) (PyTorch's; MindSpore's
    default is 'normal', N(0, 0.01): give embedding_table="normal" for it), else as Dense's
    weight_init."""

    _leaf = True

    _leaf_flags = {"weight": (False, False)}
    _leaf_alias = {"embedding_table": "weight"}

    def __init__(self, vocab_size, embedding_size, use_one_hot=False, embedding_table=_TABLE_DEFAULT, dtype=None,
                 padding_idx=None):
        super().__init__()
        if use_one_hot or padding_idx is not None:
            raise ValueError("Embedding: use_one_hot and padding_idx are not supported")
        self.vocab = check_int(vocab_size, "vocab_size", "Embedding", 1)
        self.dim = check_int(embedding_size, "embedding_size", "Embedding", 1)
        _layer_inits(self, "Embedding", weight=None if embedding_table is _TABLE_DEFAULT else embedding_table)

    def _param_specs(self):
        return [("weight", (self.vocab, self.dim))]

    def construct(self, ids):
        ids = as_tensor(ids)
        self._leaf_overrides(ids._b)
        return Tensor(ids._b, ids._b.embedding(_scoped_name(self), ids._v, self.vocab, self.dim))


class _Elt(Cell):
    _leaf = True
    _alg = None

    def construct(self, x):
        x = as_tensor(x)
        return Tensor(x._b, x._b.eltwise(x._v, ELT[self._alg]))


class ReLU(_Elt):
    _alg = "relu"


class Sigmoid(_Elt):
    _alg = "sigmoid"


class Tanh(_Elt):
    _alg = "tanh"


class GELU(_Elt):
    def __init__(self, approximate=True):
        super().__init__()
        self.__dict__["_alg"] = "gelu_tanh" if approximate else "gelu"


class Softmax(Cell):
    _leaf = True

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = check_int(axis, "axis", type(self).__name__)

    def construct(self, x):
        x = as_tensor(x)
        return Tensor(x._b, x._b.softmax(x._v, self.axis, False))


class LogSoftmax(Softmax):
    def construct(self, x):
        x = as_tensor(x)
        return Tensor(x._b, x._b.softmax(x._v, self.axis, True))


class Flatten(Cell):
    """(N, ...) -> (N, prod(...)); a 2-D input is passed through."""

    _leaf = True

    def construct(self, x):
        x = as_tensor(x)
        return x if x.ndim <= 2 else Tensor(x._b, x._b.flatten(x._v, 1))


class _Pool(Cell):
    _leaf = True
    _avg = False

    def _setup(self, kernel_size, stride, pad_mode, padding, ceil_mode, data_format):
        cls = type(self).__name__
        self.k = _pair(kernel_size, "kernel_size", cls)
        self.s = _pair(stride, "stride", cls)
        self.pad_mode = _pad_mode(pad_mode, padding, cls)
        p = _pair(padding, "padding", cls, 0)
        self.p = p if self.pad_mode == "pad" else (0, 0)
        if check_bool(ceil_mode, "ceil_mode", cls):
            raise ValueError("%s(ceil_mode=True): not supported (the output size is rounded down)" % cls)
        if data_format != "NCHW":
            raise ValueError("%s: data_format: only NCHW" % cls)

    def construct(self, x):
        x = as_tensor(x)
        if x.ndim != 4:
            raise ValueError("%s '%s': input %s, expected (N, C, H, W)" % (type(self).__name__, self._name, x.shape))
        ph, pw = self.p
        if self.pad_mode == "same":
            (th, bh), (tw, bw) = (_same_pads(x.shape[2], self.k[0], self.s[0], 1),
                                  _same_pads(x.shape[3], self.k[1], self.s[1], 1))
            ph, pw = th, tw
            if bh != th or bw != tw:
                if self._avg:
                    raise ValueError("%s '%s': pad_mode 'same' on %s pads one more row/column at the bottom/right "
                                     "(MindSpore's rule), which Tessera's average pooling cannot exclude from the "
                                     "divisor; use pad_mode='pad' or an input size that needs an even padding"
                                     % (type(self).__name__, self._name, x.shape))
                x = _pad_rows(_pad_rows(x, 2, 0, bh - th, True), 3, 0, bw - tw, True)
        return Tensor(x._b, x._b.pool(x._v, self._avg, self.k[0], self.k[1], self.s[0], self.s[1], ph, pw))


class MaxPool2d(_Pool):
    """MaxPool2d(kernel_size=1, stride=1, pad_mode="valid", padding=0, ...) as MindSpore 2.x's:
    pad_mode "same" pads as MindSpore does (an odd total padding's extra row/column at the
    bottom/right), "pad" by `padding` (int or (h, w)); padded elements never win. A non-zero
    padding with another pad_mode is refused, as MindSpore refuses it; dilation,
    return_indices and ceil_mode only at their defaults."""

    def __init__(self, kernel_size=1, stride=1, pad_mode="valid", padding=0, dilation=1, return_indices=False,
                 ceil_mode=False, data_format="NCHW"):
        super().__init__()
        if dilation not in (1, (1, 1)) or return_indices:
            raise ValueError("MaxPool2d: dilation and return_indices: only the defaults (1, False)")
        self._setup(kernel_size, stride, pad_mode, padding, ceil_mode, data_format)


class AvgPool2d(_Pool):
    """AvgPool2d(kernel_size=1, stride=1, pad_mode="valid", padding=0, ceil_mode=False,
    count_include_pad=True, divisor_override=None) as MindSpore 2.x's. Tessera leaves padded
    elements out of the divisor: pad_mode "pad" with a non-zero padding needs
    count_include_pad=False ("same" pads as MindSpore, outside the divisor)."""
    _avg = True

    def __init__(self, kernel_size=1, stride=1, pad_mode="valid", padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None, data_format="NCHW"):
        super().__init__()
        self._setup(kernel_size, stride, pad_mode, padding, ceil_mode, data_format)
        if divisor_override:
            raise ValueError("AvgPool2d(divisor_override=%r): not supported" % (divisor_override,))
        if self.pad_mode == "pad" and self.p != (0, 0) and count_include_pad:
            raise ValueError("AvgPool2d(padding=%r, count_include_pad=True): Tessera leaves padded elements out of "
                             "the divisor; give count_include_pad=False" % (padding,))


class AdaptiveAvgPool2d(Cell):
    """AdaptiveAvgPool2d(output_size): output_size 1 (or (1, 1)) is the global average; another
    size must divide the input's H and W (then it is an average pool of kernel = stride =
    input / output)."""

    _leaf = True

    def __init__(self, output_size):
        super().__init__()
        self.out = _pair(output_size, "output_size", "AdaptiveAvgPool2d")

    def construct(self, x):
        x = as_tensor(x)
        if x.ndim != 4:
            raise ValueError("AdaptiveAvgPool2d '%s': input %s, expected (N, C, H, W)" % (self._name, x.shape))
        H, W = x.shape[2], x.shape[3]
        oh, ow = self.out
        if (oh, ow) == (1, 1):
            return Tensor(x._b, x._b.reshape(x._b.global_avgpool(x._v), [x.shape[0], x.shape[1], 1, 1]))
        if H % oh or W % ow:
            raise ValueError("AdaptiveAvgPool2d '%s': output %s does not divide the input's %dx%d (Tessera pools with "
                             "equal windows)" % (self._name, self.out, H, W))
        return Tensor(x._b, x._b.pool(x._v, True, H // oh, W // ow, H // oh, W // ow, 0, 0))


class ReLU6(Cell):
    """min(max(x, 0), 6), as relu(x) - relu(x - 6)."""

    _leaf = True

    def construct(self, x):
        x = as_tensor(x)
        b = x._b
        r = b.eltwise(x._v, ELT["relu"])
        r6 = b.eltwise(b.scale(x._v, 1.0, -6.0), ELT["relu"])
        return Tensor(b, b.binary(r, r6, BIN["sub"]))


class LeakyReLU(Cell):
    """LeakyReLU(alpha=0.2): x for x >= 0, alpha x below, as relu(x) - alpha relu(-x)."""

    _leaf = True

    def __init__(self, alpha=0.2):
        super().__init__()
        self.alpha = check_float(alpha, "alpha", "LeakyReLU")

    def construct(self, x):
        x = as_tensor(x)
        b = x._b
        r = b.eltwise(x._v, ELT["relu"])
        rn = b.eltwise(b.scale(x._v, -1.0, 0.0), ELT["relu"])
        return Tensor(b, b.binary(r, b.scale(rn, self.alpha, 0.0), BIN["sub"]))


class Identity(Cell):
    """Identity(): its input."""

    _leaf = True

    def construct(self, x):
        return as_tensor(x)


class Dropout(Cell):
    """Dropout(keep_prob=0.5) or Dropout(p=...): inverted dropout in the training graph only; the
    mask is keyed by the run's step and this cell's path (reproducible)."""

    _leaf = True

    def __init__(self, keep_prob=None, p=None, dtype=None):
        super().__init__()
        if p is None:
            keep_prob = check_float(keep_prob, "keep_prob", "Dropout", allow_none=True)
            p = 0.5 if keep_prob is None else 1.0 - keep_prob
        else:
            p = check_float(p, "p", "Dropout")
        if not 0 <= p < 1:
            raise ValueError("Dropout: drop probability %r not in [0, 1)" % (p,))
        self.p = float(p)

    def construct(self, x):
        x = as_tensor(x)
        if not x._b.training or self.p == 0:
            return x
        return Tensor(x._b, x._b.dropout(x._v, self.p, zlib.crc32(_scoped_name(self).encode())))


class MultiHeadAttention(Cell):
    """Causal multi-head self-attention on (B, T, E): q, k, v projections (Dense q_proj, k_proj,
    v_proj), scaled dot-product attention with a causal mask (Tessera's attention op), out_proj.
    Only causal self-attention: Tessera's attention kernel has no other mask. shard(): the
    attention op's strategy under semi_auto_parallel, q, k, v as (B, T, H, D): heads cut t ways
    ((1, 1, t, 1),) * 3 (with q_proj/k_proj/v_proj column-parallel, out_proj row-parallel:
    Megatron's cuts), the sequence c ways ((1, c, 1, 1),) * 3 (ring attention)."""

    def __init__(self, embed_dim, num_heads, has_bias=True, causal=True):
        super().__init__()
        embed_dim = check_int(embed_dim, "embed_dim", "MultiHeadAttention", 1)
        num_heads = check_int(num_heads, "num_heads", "MultiHeadAttention", 1)
        has_bias = check_bool(has_bias, "has_bias", "MultiHeadAttention")
        if embed_dim % num_heads:
            raise ValueError("MultiHeadAttention: embed_dim %d not divisible by num_heads %d" % (embed_dim, num_heads))
        if not causal:
            raise ValueError("MultiHeadAttention: only causal attention is supported")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.q_proj = Dense(embed_dim, embed_dim, has_bias=has_bias)
        self.k_proj = Dense(embed_dim, embed_dim, has_bias=has_bias)
        self.v_proj = Dense(embed_dim, embed_dim, has_bias=has_bias)
        self.out_proj = Dense(embed_dim, embed_dim, has_bias=has_bias)
        self._strategy = None

    def shard(self, strategy):
        self._strategy = _strategy_text(strategy)
        return self

    def construct(self, x):
        x = as_tensor(x)
        B, T, E = x.shape
        H, D = self.num_heads, E // self.num_heads
        q, k, v = (p(x).reshape(B, T, H, D) for p in (self.q_proj, self.k_proj, self.v_proj))
        o = x._b.attention(q._v, k._v, v._v, 0.0, True)
        if self._strategy:
            x._b.shard(o, self._strategy)
        return self.out_proj(Tensor(x._b, o).reshape(B, T, E))


# ---- losses ----
_REDUCTIONS = ("mean", "sum", "none")


class LossBase(Cell):
    """MindSpore's nn.LossBase(reduction="mean"): subclasses write construct(logits, labels) with
    ops and return self.get_loss(x) (x times weights, then the reduction: "mean" over every
    element, "sum", or "none"). Any Cell whose construct(logits, labels) records ops and returns
    a scalar is a Model's loss_fn."""

    smoothing = 0.0
    _sparse_ce = False  # the loss is the mean sparse softmax cross-entropy (the trainer's eval loss)

    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError("%s: reduction must be 'mean', 'sum' or 'none', got %r" % (type(self).__name__, reduction))
        self.reduction = reduction

    def _eager(self, *args, **kwargs):
        """A loss on values (outside a graph): the cross-entropies computed here in double,
        returned as float32 (PyNative's loss_fn(pred, label).asnumpy())."""
        import numpy as np
        if type(self) not in (SoftmaxCrossEntropyWithLogits, CrossEntropyLoss) or len(args) != 2 or kwargs:
            raise RuntimeError("%s called outside a graph: Tessera computes SoftmaxCrossEntropyWithLogits and "
                               "CrossEntropyLoss on values; other losses run inside a Model's or value_and_grad's "
                               "graph" % type(self).__name__)
        z, y = (a.asnumpy() if isinstance(a, Tensor) else np.asarray(a) for a in args)
        z = z.astype(np.float64)
        ls = z - z.max(axis=-1, keepdims=True)
        ls = ls - np.log(np.exp(ls).sum(axis=-1, keepdims=True))
        if y.shape == z.shape and y.dtype.kind == "f":
            per = -(y * ls).sum(axis=-1)
        else:
            if getattr(self, "sparse", True) is False:
                raise ValueError("SoftmaxCrossEntropyWithLogits(sparse=False): labels %s must have the logits' shape %s"
                                 % (y.shape, z.shape))
            yi = y.astype(np.int64).reshape(z.shape[:-1])
            per = -np.take_along_axis(ls, yi[..., None], axis=-1)[..., 0]
            if self.smoothing:
                per = (1 - self.smoothing) * per - self.smoothing * ls.mean(axis=-1)
        r = {"mean": per.mean, "sum": per.sum}.get(self.reduction)
        return Tensor(np.asarray(r() if r else per, np.float32))

    def get_loss(self, x, weights=1.0):
        x = as_tensor(x)
        if not (isinstance(weights, (int, float)) and weights == 1.0):
            x = Tensor(x._b, x._b.binary(x._v, as_value(weights, like=x), BIN["mul"]))
        if self.reduction == "none" or x.ndim == 0:
            return x
        return Tensor(x._b, x._b.reduce(x._v, RED[self.reduction], list(range(x.ndim)), False))

    def get_axis(self, x):
        return tuple(range(as_tensor(x).ndim))


def _dense_ce(logits, labels, cls):
    """-sum(labels * log_softmax(logits), -1) per row: labels dense (the logits' shape, float)."""
    b = logits._b
    if labels.shape != logits.shape:
        raise ValueError("%s(sparse=False): labels %s must have the logits' shape %s (class probabilities); "
                         "class ids need sparse=True" % (cls, labels.shape, logits.shape))
    if labels.dtype != logits.dtype:
        raise ValueError("%s(sparse=False): labels of dtype %s with %s logits: class ids need sparse=True, or "
                         "ops.OneHot(...)(labels, depth, Tensor(1.0, ms.float32), Tensor(0.0, ms.float32)) first"
                         % (cls, labels.dtype, logits.dtype))
    ls = b.softmax(logits._v, -1, True)
    per = b.reduce(b.binary(ls, labels._v, BIN["mul"]), RED["sum"], [logits.ndim - 1], False)
    return Tensor(b, b.scale(per, -1.0, 0.0))


class SoftmaxCrossEntropyWithLogits(LossBase):
    """SoftmaxCrossEntropyWithLogits(sparse=False, reduction="none"), MindSpore's: logits (N, C);
    labels class ids (N,) with sparse=True, or (N, C) probabilities (e.g. ops.OneHot's) with
    sparse=False; reduction "mean" / "sum" over the rows, or "none" (the (N,) losses: a Model
    trains a scalar, so give "mean" there). sparse=True with "mean" is Tessera's fused loss
    (ts_softmax_cross_entropy); the other forms are recorded from ops."""

    def __init__(self, sparse=False, reduction="none", label_smoothing=0.0):
        super().__init__(reduction)
        self.sparse = check_bool(sparse, "sparse", "SoftmaxCrossEntropyWithLogits")
        self.smoothing = check_float(label_smoothing, "label_smoothing", "SoftmaxCrossEntropyWithLogits", 0.0, 1.0)
        if self.smoothing and not (self.sparse and reduction == "mean"):
            raise ValueError("SoftmaxCrossEntropyWithLogits: label_smoothing only with sparse=True, reduction='mean'")
        self._sparse_ce = self.sparse and reduction == "mean"

    def construct(self, logits, labels):
        logits, labels = as_tensor(logits), as_tensor(labels)
        b = logits._b
        if self.sparse:
            if labels.dtype not in (_int("int32"), _int("int64")):
                raise ValueError("SoftmaxCrossEntropyWithLogits(sparse=True): labels must be class ids (int32/int64), "
                                 "got %s" % (labels.dtype,))
            if self.reduction == "mean":
                return Tensor(b, b.softmax_ce(logits._v, labels._v, float(self.smoothing)))
            C = logits.shape[-1]
            labels = Tensor(b, b.one_hot(labels._v, C, -1, 1.0, 0.0, _dtype_name(logits.dtype)))
        return self.get_loss(_dense_ce(logits, labels, "SoftmaxCrossEntropyWithLogits"))


def _int(name):
    from .common import dtype
    return getattr(dtype, name)


class CrossEntropyLoss(LossBase):
    """CrossEntropyLoss(weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    class ids (Tessera's fused loss, ignore_index -100 ignored) or, labels of the logits' shape,
    class probabilities."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        if weight is not None or ignore_index != -100 or reduction != "mean":
            raise ValueError("CrossEntropyLoss: only weight=None, ignore_index=-100, reduction='mean'")
        self.smoothing = check_float(label_smoothing, "label_smoothing", "CrossEntropyLoss", 0.0, 1.0)
        self._sparse_ce = True

    def construct(self, logits, labels):
        logits, labels = as_tensor(logits), as_tensor(labels)
        if labels.shape == logits.shape and labels.dtype == logits.dtype:
            if self.smoothing:
                raise ValueError("CrossEntropyLoss: label_smoothing with class probabilities is not supported")
            return self.get_loss(_dense_ce(logits, labels, "CrossEntropyLoss"))
        return Tensor(logits._b, logits._b.softmax_ce(logits._v, labels._v, float(self.smoothing)))


_Loss = LossBase  # the name Model and older code use


# ---- MindSpore's regression and binary losses, written with ops as MindSpore writes them ----
def _ops():
    from . import ops
    return ops


def _values(w):
    """A loss's weight (a Tensor, array or list) as a graph constant."""
    if isinstance(w, Tensor):
        return as_tensor(w)
    import numpy as np
    return as_tensor(Tensor(np.asarray(w, np.float32)))


def _loss_args(logits, labels, who):
    logits, labels = as_tensor(logits), as_tensor(labels)
    if labels.dtype != logits.dtype:
        raise ValueError("%s: labels of dtype %s with %s logits: the targets are values of the logits' type (give the "
                         "data set float32 targets)" % (who, labels.dtype, logits.dtype))
    return logits, labels


class MSELoss(LossBase):
    """MSELoss(reduction="mean"): (logits - labels)^2, reduced (the two broadcast)."""

    def construct(self, logits, labels):
        logits, labels = _loss_args(logits, labels, "MSELoss")
        return self.get_loss(_ops().square(logits - labels))


class L1Loss(LossBase):
    """L1Loss(reduction="mean"): |logits - labels|, reduced."""

    def construct(self, logits, labels):
        logits, labels = _loss_args(logits, labels, type(self).__name__)
        return self.get_loss(_ops().abs(logits - labels))


class MAELoss(L1Loss):
    """MAELoss(reduction="mean"): MindSpore's other name of L1Loss."""


class RMSELoss(LossBase):
    """RMSELoss(): sqrt(mean((logits - labels)^2))."""

    def __init__(self):
        super().__init__("mean")

    def construct(self, logits, labels):
        logits, labels = _loss_args(logits, labels, "RMSELoss")
        return _ops().sqrt(self.get_loss(_ops().square(logits - labels)))


class SmoothL1Loss(LossBase):
    """SmoothL1Loss(beta=1.0, reduction="none") (MindSpore's default reduction): per element
    0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = logits - labels), written as
    0.5 m^2 / beta + (|d| - m) with m = min(|d|, beta)."""

    def __init__(self, beta=1.0, reduction="none"):
        super().__init__(reduction)
        self.beta = check_float(beta, "beta", "SmoothL1Loss", 0.0, min_open=True)

    def construct(self, logits, labels):
        ops = _ops()
        logits, labels = _loss_args(logits, labels, "SmoothL1Loss")
        d = ops.abs(logits - labels)
        m = ops.minimum(d, self.beta)
        return self.get_loss(ops.square(m) * (0.5 / self.beta) + (d - m))


class BCEWithLogitsLoss(LossBase):
    """BCEWithLogitsLoss(reduction="mean", weight=None, pos_weight=None): the sigmoid and binary
    cross-entropy in one, per element (1 - y) x + (1 + (p - 1) y) (log(1 + exp(-|x|)) + max(-x, 0)),
    times weight (p: pos_weight, 1 without; both broadcast along the last axis)."""

    def __init__(self, reduction="mean", weight=None, pos_weight=None):
        super().__init__(reduction)
        self.weight, self.pos_weight = weight, pos_weight

    def construct(self, logits, labels):
        ops = _ops()
        x, y = _loss_args(logits, labels, "BCEWithLogitsLoss")
        soft = ops.log(ops.exp(-ops.abs(x)) + 1.0) + ops.maximum(-x, 0.0)
        coef = 1.0 if self.pos_weight is None else (_values(self.pos_weight) - 1.0) * y + 1.0
        loss = (1.0 - y) * x + coef * soft
        return self.get_loss(loss, 1.0 if self.weight is None else _values(self.weight))


class NLLLoss(LossBase):
    """NLLLoss(weight=None, ignore_index=-100, reduction="mean"): logits are log-probabilities
    (N, C), labels class ids (N): -w[y] logits[n, y] per row; "mean" divides by the summed weights
    of the rows counted; a row whose label is ignore_index counts for nothing."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self.weight = weight
        self.ignore_index = check_int(ignore_index, "ignore_index", "NLLLoss")

    def construct(self, logits, labels):
        ops = _ops()
        logits, labels = as_tensor(logits), as_tensor(labels)
        if logits.ndim != 2 or labels.ndim != 1 or labels.shape[0] != logits.shape[0]:
            raise ValueError("NLLLoss: logits (N, C) and labels (N) of class ids, got %s and %s"
                             % (logits.shape, labels.shape))
        C = logits.shape[1]
        if 0 <= self.ignore_index < C:
            raise ValueError("NLLLoss: ignore_index %d is a class of the %d: Tessera ignores only labels outside "
                             "[0, C) (one_hot gives their rows zeros)" % (self.ignore_index, C))
        hot = ops.one_hot(labels, C, 1.0, 0.0)  # an ignored label (outside [0, C)): a row of zeros
        if self.weight is not None:
            hot = hot * _values(self.weight)
        per = -ops.sum(hot * logits, 1)
        if self.reduction == "none":
            return per
        total = ops.sum(per)
        if self.reduction == "sum":
            return total
        return total / ops.sum(hot)


class WithLossCell(Cell):
    """WithLossCell(backbone, loss_fn): construct(data, label) = loss_fn(backbone(data), label).
    As MindSpore's (auto_prefix=False), the parameters keep the backbone's names.
    Model(WithLossCell(net, loss), optimizer=opt) trains exactly as Model(net, loss, opt);
    metrics need the backbone's logits: Model(net, loss, opt, metrics=...)."""

    def __init__(self, backbone, loss_fn):
        super().__init__(auto_prefix=False)
        if not isinstance(backbone, Cell):
            raise TypeError("WithLossCell: backbone must be an nn.Cell, got %r" % (backbone,))
        if not isinstance(loss_fn, Cell):
            raise TypeError("WithLossCell: loss_fn must be an nn.Cell (a loss), got %r" % (loss_fn,))
        backbone._init_cell()
        # not sub-cells by attribute: no name prefix (MindSpore's auto_prefix=False)
        self.__dict__["_backbone"] = backbone
        self.__dict__["_loss_fn"] = loss_fn

    @property
    def backbone_network(self):
        return self._backbone

    @property
    def _trainer(self):  # a Model's trainer sits on the backbone (save_checkpoint(net_with_loss))
        return self._backbone.__dict__.get("_trainer")

    def construct(self, data, label):
        return self._loss_fn(self._backbone(data), label)

    def cells_and_names(self, prefix=""):
        yield prefix, self
        for p, c in self._backbone.cells_and_names(prefix):
            if c is not self._backbone:
                yield p, c

    def parameters_and_names(self, prefix=""):
        yield from self._backbone.parameters_and_names(prefix)

    def set_train(self, mode=True):
        self._backbone.set_train(mode)
        self.__dict__["training"] = bool(mode)
        return self


def _unwrap_with_loss(network, metrics):
    """Model(network, loss_fn=None): (backbone, loss_fn) of an nn.WithLossCell, trained as
    Model(backbone, loss_fn) (the trainer needs the logits apart from the loss: evaluation,
    metrics). Any other network is refused, saying what to write."""
    if not isinstance(network, WithLossCell) or type(network).construct is not WithLossCell.construct:
        raise ValueError("Model(network, loss_fn=None): Tessera takes the loss apart from the network's logits "
                         "(the trainer evaluates and reports metrics from the logits); give Model(backbone, "
                         "loss_fn=..., optimizer=...) or Model(nn.WithLossCell(backbone, loss_fn), optimizer=...), "
                         "got %s" % type(network).__name__)
    if metrics:
        # MindSpore refuses this too: "If `metrics` is set, `eval_network` must not be None"
        raise ValueError("Model(nn.WithLossCell(...), loss_fn=None, metrics=%r): metrics need an eval_network when "
                         "loss_fn is None (as in MindSpore), and Tessera has no eval_network: give Model(backbone, "
                         "loss_fn, optimizer, metrics=...) (the same training)" % (metrics,))
    return network._backbone, network._loss_fn


def _check_loss_fn(loss_fn, zoo, metrics):
    """Model's loss_fn: an nn.Cell (a tessera.nn loss, or a Cell whose construct(logits, labels)
    records ops and returns a scalar)."""
    if not isinstance(loss_fn, Cell):
        raise ValueError("Model: loss_fn must be an nn.Cell: a tessera.nn loss or a Cell whose construct(logits, "
                         "labels) returns a scalar loss, got %r" % (loss_fn,))
    ce = bool(getattr(loss_fn, "_sparse_ce", False))
    if zoo and not ce:
        raise ValueError("Model: a tessera.zoo network trains with Tessera's sparse softmax cross-entropy "
                         "(built in C); loss_fn must be nn.SoftmaxCrossEntropyWithLogits(sparse=True, "
                         "reduction='mean'), got %s (write the network as a Cell for another loss)"
                         % type(loss_fn).__name__)
    if isinstance(loss_fn, LossBase) and loss_fn.reduction == "none":
        raise ValueError("Model: loss_fn %s(reduction='none') gives one loss per sample; Tessera trains a scalar "
                         "loss: give reduction='mean' (MindSpore would follow the gradient of their sum and "
                         "report their mean)" % type(loss_fn).__name__)
    if not ce and "loss" in (metrics or ()):
        raise ValueError("Model: metrics 'loss' with loss_fn %s: Tessera's evaluation loss is the mean softmax "
                         "cross-entropy of the logits, not this loss_fn's; drop 'loss' from metrics, or use "
                         "nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')" % type(loss_fn).__name__)


def _loss_value(loss, loss_fn):
    """The graph value of what loss_fn returned: a float scalar (one element is taken as one)."""
    name = type(loss_fn).__name__
    if isinstance(loss, (tuple, list)):
        raise ValueError("loss_fn %s returned %d values: the loss must be one scalar Tensor" % (name, len(loss)))
    if not isinstance(loss, Tensor) or loss._data is not None:
        raise ValueError("loss_fn %s returned %r: the loss must be a Tensor computed from the logits and labels "
                         "with ops" % (name, loss))
    from .common.dtype import float32, float16, bfloat16
    if loss.dtype not in (float32, float16, bfloat16):
        raise ValueError("loss_fn %s returned a %s Tensor: the loss must be a float" % (name, loss.dtype))
    shp = loss.shape
    n = 1
    for d in shp:
        n *= d
    if shp and n == 1:
        return loss._b.reshape(loss._v, [])
    if shp:
        raise ValueError("loss_fn %s returned a Tensor of shape %s: Tessera trains a scalar loss; reduce it (e.g. "
                         "ops.ReduceMean()(loss), or reduction='mean')" % (name, shp))
    return loss._v


# ---- optimizers: descriptions turned into optimizer.* keys ----
def _learning_rate(lr, where):
    """An optimizer's learning_rate as MindSpore takes it: (float, None, None) for a number or a
    Tensor of one value; (None, float32 rates, None) for a list / tuple / numpy array / 1-D Tensor
    of per-step rates (dynamic_lr's lists); (None, None, schedule) for a LearningRateSchedule."""
    import numpy as np
    from .learning_rate_schedule import LearningRateSchedule
    if isinstance(lr, LearningRateSchedule):
        return None, None, lr
    if isinstance(lr, (bool, str, bytes, dict)) or isinstance(lr, Tensor) and lr._data is None:
        raise TypeError("For '%s', the 'learning_rate' should be int, float, Tensor, Iterable or LearningRateSchedule, "
                        "but got %s." % (where, describe(lr)))
    if isinstance(lr, (int, float)):
        if not lr >= 0 or lr == float("inf"):
            raise ValueError("For '%s', the 'learning_rate' must be a finite number >= 0, but got %r." % (where, lr))
        return float(lr), None, None
    try:
        a = lr.asnumpy() if isinstance(lr, Tensor) else np.asarray(lr if not hasattr(lr, "__next__") else list(lr))
        a = a.astype(np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError("For '%s', the 'learning_rate' should be int, float, Tensor, Iterable or LearningRateSchedule, "
                        "but got %s (%s)." % (where, describe(lr), e)) from None
    if a.ndim == 0:
        return _learning_rate(float(a), where)
    if a.ndim > 1:
        raise ValueError("For '%s', if 'learning_rate' is a Tensor or a list, it must have 1 dimension (one rate per "
                         "step), but got shape %s." % (where, a.shape))
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("For '%s', the 'learning_rate' list must hold finite rates >= 0 (one per step), got %d "
                         "values%s." % (where, a.size, "" if a.size == 0 else " (min %g)" % np.nanmin(a)))
    return None, np.ascontiguousarray(a, dtype=np.float32), None


def _same_lr(a, b):
    """Two learning_rate arguments that give every step the same rate."""
    import numpy as np
    if a is b:
        return True
    try:
        x, y = _learning_rate(a, "group"), _learning_rate(b, "group")
    except (TypeError, ValueError):
        return False
    if x[2] is not None or y[2] is not None:
        return x[2] is y[2]
    if x[0] is not None or y[0] is not None:
        return x[0] == y[0] or x[1] is not None and np.all(x[1] == y[0]) or y[1] is not None and np.all(y[1] == x[0])
    return x[1].shape == y[1].shape and np.array_equal(x[1], y[1])


def _fnmatch_escape(name):
    """A parameter name as an optimizer.param_groups pattern matching only itself."""
    return "".join("[%s]" % c if c in "*?[]\\" else c for c in name)


def _lr_scale(group_lr, base, where):
    """The factor that turns the optimizer's learning rates (base, as _learning_rate returns them)
    into a group's (group_lr, MindSpore's 'lr' of the group), refused where none does: Tessera scales
    the one schedule per group. Rates compared in f32, as the update uses them."""
    import numpy as np
    g = _learning_rate(group_lr, where)
    if g[2] is not None or base[2] is not None:
        if g[2] is base[2]:
            return 1.0
        raise ValueError("%s: a parameter group whose learning rate is a LearningRateSchedule (%s) other than the "
                         "optimizer's (%s) is not supported: give the groups' rates as numbers or per-step lists in a "
                         "constant ratio" % (where, describe(group_lr), describe(base[2] if base[2] is not None
                                                                             else base[0] if base[0] is not None
                                                                             else "a list of rates")))
    gr = np.float32(g[0]) if g[0] is not None else g[1]
    br = np.float32(base[0]) if base[0] is not None else base[1]
    gr, br = np.atleast_1d(gr).astype(np.float32), np.atleast_1d(br).astype(np.float32)
    if gr.size != br.size and min(gr.size, br.size) > 1:
        raise ValueError("%s: a parameter group's learning rates (%d steps) and the optimizer's (%d) differ in length"
                         % (where, gr.size, br.size))
    gr, br = np.broadcast_arrays(gr, br)
    nz = br != 0
    if not nz.any():
        if gr.any():
            raise ValueError("%s: a parameter group's own learning rate (%s) beside the optimizer's learning_rate 0: "
                             "Tessera scales the optimizer's rates per group" % (where, describe(group_lr)))
        return 1.0
    k = int(np.argmax(nz))
    scale = float(np.float64(gr[k]) / np.float64(br[k]))
    for s in (scale, np.nextafter(scale, 0.0), np.nextafter(scale, np.inf)):  # exact where a factor is
        got = (br.astype(np.float64) * float(s)).astype(np.float32)
        if np.array_equal(got, gr):
            return float(s)
    got = (br.astype(np.float64) * scale).astype(np.float32)
    if not np.all(np.abs(got.astype(np.float64) - gr) <= 2.5e-7 * np.abs(gr.astype(np.float64))):
        i = int(np.argmax(np.abs(got.astype(np.float64) - gr) > 2.5e-7 * np.abs(gr.astype(np.float64))))
        raise ValueError("%s: a parameter group's learning rates are not a constant multiple of the optimizer's "
                         "(step %d: %g where %g x %g = %g): Tessera scales the optimizer's schedule per group"
                         % (where, i, gr[i], br[i], scale, got[i]))
    return scale


def _param_groups(groups, learning_rate, weight_decay, where):
    """MindSpore's parameter groups ([{"params": [...], "weight_decay": wd, "lr": lr}, ...,
    {"order_params": [...]}]) as (parameters, weight decay, names without decay, param_groups,
    learning_rate): one weight decay with a set of parameters exempt from it where the groups are
    only that (optimizer.no_decay_params), else optimizer.param_groups, each parameter whose
    learning rate or decay differs from the optimizer's in a group of its own (its rate a constant
    multiple of the optimizer's: a number, or per-step rates in a constant ratio; the optimizer's
    learning_rate is the first group's where every group has its own, as it is then unused).
    grad_centralization is refused."""
    keys = ("params", "lr", "weight_decay", "grad_centralization", "order_params")
    params, decays, lrs, seen, order = [], [], [], set(), None
    for g in groups:
        if not isinstance(g, dict):
            raise TypeError("For '%s', parameter groups must all be dicts, but got %s." % (where, describe(g)))
        bad = [k for k in g if k not in keys]
        if bad:
            raise KeyError("For '%s', the key %s cannot be recognized in group params (%s)." % (where, bad,
                                                                                                ", ".join(keys)))
        if "order_params" in g:
            if len(g) > 1:
                raise ValueError("For '%s', the order params dict in group parameters should only include the "
                                 "'order_params' key." % where)
            order = list(g["order_params"])
            continue
        if g.get("grad_centralization"):
            raise ValueError("%s: grad_centralization=True is not supported" % where)
        wd = check_float(g.get("weight_decay", weight_decay), "weight_decay", where, 0.0)
        lr = g["lr"] if "lr" in g and not _same_lr(g["lr"], learning_rate) else None
        if lr is not None:
            _learning_rate(lr, where)  # (its type and values checked here)
        ps = list(g.get("params") or [])
        if not ps:
            raise ValueError("For '%s', the group 'params' must not be empty." % where)
        for p in ps:
            name = getattr(p, "name", None)
            if not isinstance(p, Parameter) or not name:
                raise TypeError("For '%s', the group 'params' must be Parameters of the network (trainable_params()), "
                                "but got %s." % (where, describe(p)))
            if name in seen:
                raise RuntimeError("For '%s', the %s parameter already exists in another group." % (where, name))
            seen.add(name)
            params.append(p)
            decays.append(wd)
            lrs.append(lr)
    if order is not None and {getattr(p, "name", None) for p in order} != seen:
        raise ValueError("For '%s', the 'order_params' should be the same parameters as the groups'." % where)
    if lrs and all(lr is not None for lr in lrs):  # the optimizer's learning_rate is unused: the first group's
        first = lrs[0]
        learning_rate = first
        lrs = [None if lr is first or _same_lr(lr, first) else lr for lr in lrs]
    nonzero = sorted({d for d in decays if d > 0})
    if all(lr is None for lr in lrs) and len(nonzero) <= 1:  # one decay, and parameters without
        wd = nonzero[0] if nonzero else 0.0
        return params, wd, [p.name for p, d in zip(params, decays) if wd > 0 and d == 0], None, learning_rate
    base = _learning_rate(learning_rate, where)
    wd = check_float(weight_decay, "weight_decay", where, 0.0)
    pg = {}
    for p, d, lr in zip(params, decays, lrs):
        scale = 1.0 if lr is None else _lr_scale(lr, base, where)
        if scale != 1.0 or d != wd:
            pg[_fnmatch_escape(p.name)] = {"lr_scale": scale, "weight_decay": d}
    return params, wd, [], pg, learning_rate


class Optimizer:
    """Base of the optimizers: `keys` are the optimizer.* config keys. learning_rate is MindSpore's:
    a float, a list (tuple, numpy array, 1-D Tensor) of per-step rates (nn.dynamic_lr's lists:
    the schedule `table`), or a LearningRateSchedule (nn.CosineDecayLR, ...: the Model computes its
    table once the run's length is known); schedule= (Tessera) a dict for optimizer.schedule, e.g.
    {"name": "cosine", "warmup_steps": 10}, with a float learning_rate only;
    clip_grad_norm= (Tessera) optimizer.clip_grad_norm. Every parameter of the network is
    trained: `params` must be the network's trainable_params() (or a list covering them)."""

    name = None

    def __init__(self, params, learning_rate, weight_decay=0.0, schedule=None, clip_grad_norm=0.0, loss_scale=1.0,
                 **extra):
        where = type(self).__name__
        groups = isinstance(params, (list, tuple)) and params and isinstance(params[0], dict)
        pgroups = None
        if groups:  # MindSpore's parameter groups: the decay set explicit, biases and norms as any other
            params, weight_decay, nodecay, pgroups, learning_rate = _param_groups(params, learning_rate, weight_decay,
                                                                                  where)
        lr, table, cell = _learning_rate(learning_rate, where)
        # MindSpore's optimizer loss_scale divides the gradients: paired with
        # FixedLossScaleManager(S, drop_overflow_update=False), whose scale Tessera's trainer
        # removes itself; the Model checks the pairing
        self.loss_scale = check_float(loss_scale, "loss_scale", type(self).__name__, 0.0, min_open=True)
        if lr is None and schedule is not None:
            raise ValueError("%s: schedule= (Tessera's schedules) takes a float learning_rate (its peak), got a %s"
                             % (type(self).__name__, "list of rates" if cell is None else type(cell).__name__))
        self.parameters = list(params) if params is not None else []
        _OPTIMIZERS.append(self)
        del _OPTIMIZERS[:-64]
        self.keys = {"optimizer.name": self.name,
                     "optimizer.weight_decay": check_float(weight_decay, "weight_decay", where, 0.0)}
        if groups:
            self.keys["optimizer.exclude_bias_and_norm"] = False
            if nodecay:
                self.keys["optimizer.no_decay_params"] = nodecay
            if pgroups:
                self.keys["optimizer.param_groups"] = pgroups
        self.learning_rate, self._lr_cell = learning_rate, cell
        if table is not None:  # every step's rate: Tessera's schedule table
            self.keys["optimizer.schedule"] = {"name": "table", "values": [float(v) for v in table]}
        elif cell is not None:  # the Model sets the table (ts_trainer_set_lr_table) once it knows the run's length
            self.keys["optimizer.lr"] = float(cell.rates(1)[0])
        else:
            self.keys["optimizer.lr"] = lr
        if schedule is not None:
            self.keys["optimizer.schedule"] = dict(schedule)
        if check_float(clip_grad_norm, "clip_grad_norm", where, 0.0):
            self.keys["optimizer.clip_grad_norm"] = float(clip_grad_norm)
        for k, v in extra.items():
            self.keys["optimizer." + k] = v


def _optimizer_call(self, gradients):
    """optimizer(grads): applies the gradients of tessera.value_and_grad (MindSpore's functional
    training step); True."""
    from .train.functional import _Grads
    if not isinstance(gradients, _Grads):
        raise TypeError("%s(gradients): the gradients of tessera.value_and_grad(fn, None, optimizer.parameters) or "
                        "tessera.grad(...) (they stay in the compiled step), got %s" % (type(self).__name__,
                                                                                        describe(gradients)))
    gradients._apply(self)
    return True


Optimizer.__call__ = _optimizer_call


class SGD(Optimizer):
    name = "sgd"

    def __init__(self, params, learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 loss_scale=1.0, **kw):
        if check_float(momentum, "momentum", "SGD", 0.0):
            self.name = "momentum"
            super().__init__(params, learning_rate, weight_decay, momentum=float(momentum),
                             dampening=check_float(dampening, "dampening", "SGD"),
                             nesterov=check_bool(nesterov, "nesterov", "SGD"), loss_scale=loss_scale, **kw)
        else:
            super().__init__(params, learning_rate, weight_decay, loss_scale=loss_scale, **kw)


class Momentum(Optimizer):
    """Momentum(params, learning_rate, momentum, weight_decay=0.0, use_nesterov=False)."""
    name = "momentum"

    def __init__(self, params, learning_rate, momentum, weight_decay=0.0, loss_scale=1.0, use_nesterov=False, **kw):
        super().__init__(params, learning_rate, weight_decay, momentum=check_float(momentum, "momentum", "Momentum", 0.0),
                         nesterov=check_bool(use_nesterov, "use_nesterov", "Momentum"), loss_scale=loss_scale, **kw)


class _AdamLike(Optimizer):
    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, **kw):
        w = type(self).__name__
        super().__init__(params, learning_rate, weight_decay,
                         betas=[check_float(beta1, "beta1", w, 0.0, 1.0), check_float(beta2, "beta2", w, 0.0, 1.0)],
                         eps=check_float(eps, "eps", w, 0.0, min_open=True), **kw)


class Adam(_AdamLike):
    name = "adam"


class AdamWeightDecay(_AdamLike):
    """AdamW (decoupled weight decay); MindSpore's default eps 1e-6."""
    name = "adamw"

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, **kw):
        super().__init__(params, learning_rate, beta1, beta2, eps, weight_decay, **kw)


AdamW = AdamWeightDecay


class Lamb(_AdamLike):
    name = "lamb"

    def __init__(self, params, learning_rate, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, **kw):
        super().__init__(params, learning_rate, beta1, beta2, eps, weight_decay, **kw)


def __getattr__(name):
    """nn.TrainOneStepCell lives with the trainer (tessera.train.one_step), the learning-rate
    schedules and lists in tessera.learning_rate_schedule and tessera.dynamic_lr (MindSpore's
    nn.CosineDecayLR, nn.cosine_decay_lr, ..., nn.dynamic_lr), the metrics in tessera.metrics
    (nn.Accuracy, ..., nn.metrics): loaded on first use."""
    if name in ("TrainOneStepCell", "TrainOneStepWithLossScaleCell", "DynamicLossScaleUpdateCell",
                "FixedLossScaleUpdateCell"):
        from .train import one_step
        return getattr(one_step, name)
    if name in ("loss", "optim", "wrap", "layer", "cell"):  # nn.loss.MSELoss(), nn.optim.Momentum: MindSpore's
        import sys                                           # submodules, whose names are all here
        return sys.modules[__name__]
    from . import dynamic_lr, learning_rate_schedule, metrics
    mods = {"dynamic_lr": dynamic_lr, "learning_rate_schedule": learning_rate_schedule, "metrics": metrics}
    if name in mods:
        return mods[name]
    for m in mods.values():
        if name in m.__all__:
            return getattr(m, name)
    raise AttributeError("module 'tessera.nn' has no attribute '%s'" % name)
