"""MindSpore's checkpoint format through Google's protobuf library (Debian's python3-protobuf), as
an independent reference for Tessera's hand-written reader and writer (src/io/mindspore_ckpt.c).

The message types are MindSpore's checkpoint.proto (mindspore/ccsrc/utils/checkpoint.proto),
built here from a descriptor (no protoc). `write` saves the way MindSpore's `_exec_save` does (one
Checkpoint message per value, appended; a tensor of more than `piece` bytes as several values of
its tag, each with the whole dims); `read` parses a file the way `load_checkpoint` does (values of
one tag joined). Used by scripts/make_ms_ckpt_fixture.py and tests/python/test_ms_ckpt.py."""
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool

try:
    from google.protobuf import message_factory
    _get = getattr(message_factory, "GetMessageClass", None)
except ImportError:  # pragma: no cover
    _get = None


def _classes():
    fd = descriptor_pb2.FileDescriptorProto(name="ts_ms_checkpoint.proto", package="ts_ms", syntax="proto2")
    F = descriptor_pb2.FieldDescriptorProto
    tp = fd.message_type.add(name="TensorProto")
    tp.field.add(name="dims", number=1, type=F.TYPE_INT64, label=F.LABEL_REPEATED)
    tp.field.add(name="tensor_type", number=2, type=F.TYPE_STRING, label=F.LABEL_REQUIRED)
    tp.field.add(name="tensor_content", number=3, type=F.TYPE_BYTES, label=F.LABEL_REQUIRED)
    ck = fd.message_type.add(name="Checkpoint")
    ck.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                 type_name=".ts_ms.Checkpoint.Value")
    v = ck.nested_type.add(name="Value")
    v.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_REQUIRED)
    v.field.add(name="tensor", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_REQUIRED,
                type_name=".ts_ms.TensorProto")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    d = pool.FindMessageTypeByName("ts_ms.Checkpoint")
    if _get:
        return _get(d)
    from google.protobuf import reflection  # protobuf < 4.22
    return reflection.message_factory.MessageFactory(pool).GetPrototype(d)


Checkpoint = _classes()

# numpy dtype -> MindSpore's tensor_type (str(mindspore dtype))
NP_TO_MS = {np.dtype(np.float32): "Float32", np.dtype(np.float16): "Float16", np.dtype(np.float64): "Float64",
            np.dtype(np.int8): "Int8", np.dtype(np.int16): "Int16", np.dtype(np.int32): "Int32",
            np.dtype(np.int64): "Int64", np.dtype(np.uint8): "UInt8", np.dtype(np.uint16): "UInt16",
            np.dtype(np.uint32): "UInt32", np.dtype(np.uint64): "UInt64", np.dtype(np.bool_): "Bool"}
MS_TO_NP = {v: k for k, v in NP_TO_MS.items()}


def write(path, entries, piece=512 << 20):
    """entries: list of (tag, value) where value is a numpy array, a str (append_info: "str", dims
    [0], numpy's UTF-32LE), ("BFloat16", float32 array) (the upper halves), ("random_op", bytes),
    or ("dims", dims, tensor_type, bytes) for a value written as given."""
    with open(path, "wb") as f:
        for tag, val in entries:
            if isinstance(val, str):
                pieces = [([0], "str", np.array(val).tobytes())]
            elif isinstance(val, tuple) and val[0] == "BFloat16":
                a = np.array(val[1], dtype=np.float32, order="C")
                raw = (a.view(np.uint32) >> 16).astype(np.uint16).tobytes()
                pieces = [(list(a.shape), "BFloat16", raw)]
            elif isinstance(val, tuple) and val[0] == "random_op":
                pieces = [([], "random_op", val[1])]
            elif isinstance(val, tuple) and val[0] == "dims":
                pieces = [(list(val[1]), val[2], val[3])]
            else:
                a = np.array(val, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
                raw = a.tobytes()
                pieces = [(list(a.shape), NP_TO_MS[a.dtype], raw[i:i + piece]) for i in range(0, max(len(raw), 1), piece)]
            for dims, ty, content in pieces:
                ck = Checkpoint()
                v = ck.value.add()
                v.tag = tag
                v.tensor.dims.extend(dims)
                v.tensor.tensor_type = ty
                v.tensor.tensor_content = content
                f.write(ck.SerializeToString())


def read(path):
    """[(tag, dims, tensor_type, bytes)] with the values of one tag that follow each other joined
    (and the number of values each came in)."""
    ck = Checkpoint()
    with open(path, "rb") as f:
        ck.ParseFromString(f.read())
    out = []
    for v in ck.value:
        if out and out[-1][0] == v.tag:
            t, d, ty, b, k = out[-1]
            assert list(v.tensor.dims) == d and v.tensor.tensor_type == ty, v.tag
            out[-1] = (t, d, ty, b + v.tensor.tensor_content, k + 1)
        else:
            out.append((v.tag, list(v.tensor.dims), v.tensor.tensor_type, v.tensor.tensor_content, 1))
    return out


def as_numpy(dims, ty, content):
    """MindSpore's load_checkpoint's value: a str, or a numpy array (BFloat16 as float32)."""
    if ty == "str":
        return str(np.frombuffer(content, "U%d" % (len(content) // 4))[0])
    if ty == "BFloat16":
        a = (np.frombuffer(content, np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        a = np.frombuffer(content, MS_TO_NP[ty])
    if dims == [0] and a.size == 1:
        return a.reshape(())
    return a.reshape(dims)
