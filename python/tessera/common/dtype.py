"""MindSpore's data types (mindspore.common.dtype, `from mindspore import dtype as mstype`).

Each is a Type object naming one of Tessera's tensor dtypes (f32, bf16, f16, i32, i64, u8); the
names MindSpore has and Tessera does not (float64, int8, int16, bool_, ...) exist so that a script
imports, and are refused with ValueError where a tensor of that type would be made (Cast,
TypeCast, astype, Tensor)."""

__all__ = ["Type", "float32", "float16", "bfloat16", "int32", "int64", "uint8", "float64", "int8", "int16",
           "uint16", "uint32", "uint64", "bool_", "complex64", "complex128", "float_", "half", "single", "double",
           "int_", "uint", "string", "tensor_type", "dtype_to_nptype", "pytype_to_dtype", "to_tessera",
           "number_type", "float_type", "int_type", "uint_type"]


class Type:
    """A MindSpore data type: name as MindSpore prints it ("Float32"), Tessera's dtype (None if
    Tessera has no such tensor type) and the numpy dtype name."""

    def __init__(self, name, ts, np_name):
        self._name, self.ts, self.np_name = name, ts, np_name

    def __repr__(self):
        return self._name

    __str__ = __repr__

    def __eq__(self, other):
        return isinstance(other, Type) and other._name == self._name

    def __hash__(self):
        return hash(self._name)


float32 = Type("Float32", "f32", "float32")
float16 = Type("Float16", "f16", "float16")
bfloat16 = Type("BFloat16", "bf16", None)
int32 = Type("Int32", "i32", "int32")
int64 = Type("Int64", "i64", "int64")
uint8 = Type("UInt8", "u8", "uint8")
float64 = Type("Float64", None, "float64")
int8 = Type("Int8", None, "int8")
int16 = Type("Int16", None, "int16")
uint16 = Type("UInt16", None, "uint16")
uint32 = Type("UInt32", None, "uint32")
uint64 = Type("UInt64", None, "uint64")
bool_ = Type("Bool", None, "bool")
complex64 = Type("Complex64", None, "complex64")
complex128 = Type("Complex128", None, "complex128")
string = Type("String", None, None)
float_, half, single, double = float32, float16, float32, float64
int_, uint = int32, uint32
tensor_type = Type  # mstype.tensor_type(mstype.float32) in MindSpore wraps the element type

int_type = (int8, int16, int32, int64)
uint_type = (uint8, uint16, uint32, uint64)
float_type = (float16, float32, float64, bfloat16)
number_type = int_type + uint_type + float_type

_ALL = [float32, float16, bfloat16, int32, int64, uint8, float64, int8, int16, uint16, uint32, uint64, bool_,
        complex64, complex128]
_BY_TS = {t.ts: t for t in _ALL if t.ts}
_BY_NAME = {}
for _t in _ALL:
    _BY_NAME[_t._name.lower()] = _t
    if _t.np_name:
        _BY_NAME[_t.np_name] = _t
    if _t.ts:
        _BY_NAME[_t.ts] = _t
_BY_NAME["bfloat16"] = bfloat16
_BY_NAME["bool_"] = bool_


def to_tessera(dt, where="dtype"):
    """Tessera's dtype name (f32, bf16, f16, i32, i64, u8) of dt: a Type (mstype.float32), a numpy
    dtype or type (np.float32), or a name ("float32", "f32"). ValueError naming `where` for a
    type Tessera has no tensors of, or an unknown one."""
    t = dt if isinstance(dt, Type) else None
    if t is None:
        name = getattr(dt, "name", None) if not isinstance(dt, str) else dt  # numpy dtype
        if name is None:
            name = getattr(dt, "__name__", str(dt))  # numpy scalar type, Python type
        name = str(name).lower().replace("mindspore.", "")
        if name in ("float", "int", "bool"):
            name = {"float": "float32", "int": "int32", "bool": "bool"}[name]
        t = _BY_NAME.get(name)
        if t is None:
            raise ValueError("%s: unknown data type %r (expected tessera.float32, float16, bfloat16, int32, "
                             "int64, uint8)" % (where, dt))
    if not t.ts:
        raise ValueError("%s: %s: Tessera has no tensors of this type (use float32, float16, bfloat16, int32, "
                         "int64 or uint8)" % (where, t))
    return t.ts


def from_tessera(ts):
    """The Type of Tessera's dtype name ts ("f32" -> float32)."""
    return _BY_TS.get(ts, ts)


def dtype_to_nptype(dt):
    """The numpy type of a Type (mstype.float32 -> numpy.float32); bfloat16 has none."""
    import numpy as np
    if not dt.np_name:
        raise ValueError("dtype_to_nptype: %s has no numpy type" % dt)
    return getattr(np, dt.np_name)


def pytype_to_dtype(obj):
    """The Type of a numpy dtype/type or Python type (float -> float32, int -> int64 as MindSpore)."""
    if obj is int:
        return int64
    if obj is float:
        return float32
    if obj is bool:
        return bool_
    name = getattr(obj, "name", None) or getattr(obj, "__name__", str(obj))
    t = _BY_NAME.get(str(name).lower())
    if t is None:
        raise ValueError("pytype_to_dtype: unknown type %r" % (obj,))
    return t
