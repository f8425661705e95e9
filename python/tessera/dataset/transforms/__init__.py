"""tessera.dataset.transforms: MindSpore's general transforms (mindspore.dataset.transforms):
TypeCast and Compose. c_transforms / py_transforms are MindSpore 1.x's names of this module."""
from .._op import Op

__all__ = ["TypeCast", "Compose", "OneHot"]


class TypeCast(Op):
    """On the label column: accepted (labels are int32 class ids already; an integer type is
    required). On images: a cast (float32, float16, bfloat16, int32, int64, uint8)."""

    def __init__(self, data_type):
        from ...common.dtype import to_tessera
        self.dtype = to_tessera(data_type, "TypeCast(data_type)")

    def items(self, have_float):
        return [{"name": "cast", "dtype": self.dtype}]


class Compose(Op):
    """A list of transforms applied in order (dataset.map(operations=Compose([...])) is map of
    the list). Python functions in it run where map runs them (GeneratorDataset)."""

    def __init__(self, transforms):
        ts = list(transforms)
        for t in ts:
            if not isinstance(t, Op) and not callable(t):
                raise ValueError("Compose: %r is neither a tessera.dataset transform (vision.*, transforms.TypeCast) "
                                 "nor a Python function" % (t,))
        self.transforms = ts

    def flat(self):
        """The transforms, nested Composes expanded."""
        out = []
        for t in self.transforms:
            out += t.flat() if isinstance(t, Compose) else [t]
        return out

    def items(self, have_float):
        out = []
        for t in self.flat():
            its = t.items(have_float)
            out += its
            have_float = have_float or any(i["name"] == "to_float" for i in its)
        return out


class OneHot(Op):
    """Refused: Tessera's loss takes class ids (nn.SoftmaxCrossEntropyWithLogits(sparse=True))."""

    def __init__(self, num_classes, smoothing_rate=0.0):
        raise ValueError("transforms.OneHot: Tessera's labels are class ids; drop the OneHot map and use "
                         "nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean') (label smoothing: "
                         "its label_smoothing=%r)" % (smoothing_rate,))
