"""tessera.dataset.vision: MindSpore's image transforms (mindspore.dataset.vision) that Tessera's C
pipeline has, as data.transforms items (docs/config.md, "Transforms"). An argument the pipeline
cannot honour is refused with ValueError naming it. c_transforms / py_transforms are the same
classes under MindSpore 1.x's module names."""
import enum

from .._op import Op
from ..._validator import check_float, check_int, check_int_or_tuple


def _floats(value, name, where, minimum=None, min_open=False):
    if not isinstance(value, (list, tuple)):
        raise TypeError("For '%s', the '%s' must be a list or tuple of floats, but got %s %r."
                        % (where, name, type(value).__name__, value))
    return [check_float(v, "%s[%d]" % (name, i), where, minimum, min_open=min_open) for i, v in enumerate(value)]

__all__ = ["Rescale", "Normalize", "HWC2CHW", "ToTensor", "RandomCrop", "CenterCrop", "Resize",
           "RandomHorizontalFlip", "RandomVerticalFlip", "RandomErasing", "Decode", "Inter", "Border"]


class Inter(enum.IntEnum):
    """Interpolation modes (mindspore.dataset.vision.Inter); Tessera's resize is bilinear."""
    NEAREST = 0
    LINEAR = 1
    BILINEAR = 1
    CUBIC = 2
    BICUBIC = 2
    AREA = 3
    PILCUBIC = 4
    ANTIALIAS = 5


class Border(str, enum.Enum):
    """Padding modes (mindspore.dataset.vision.Border); Tessera pads with zeros (CONSTANT)."""
    CONSTANT = "constant"
    EDGE = "edge"
    REFLECT = "reflect"
    SYMMETRIC = "symmetric"


def _size(size, where="size"):
    """An int (the shorter side / a square), or (height, width): positive ints."""
    t = check_int_or_tuple(size, "size", where, n=2, minimum=1, lengths=(1, 2))
    return [int(v) for v in size] if isinstance(size, (tuple, list)) else t[0]


class Rescale(Op):
    """x * rescale + shift, to float32."""

    def __init__(self, rescale, shift=0.0):
        self.rescale, self.shift = check_float(rescale, "rescale", "Rescale"), check_float(shift, "shift", "Rescale")

    def items(self, have_float):
        return [{"name": "to_float", "scale": self.rescale, "shift": self.shift}]


class Normalize(Op):
    """Per-channel (x - mean) / std on HWC images; on u8 images (MindSpore's usual place, mean/std
    in pixel units) a to_float with scale 1 is inserted first."""

    def __init__(self, mean, std, is_hwc=True):
        if not is_hwc:
            raise ValueError("Normalize(is_hwc=False): only HWC images (put HWC2CHW after Normalize)")
        self.mean = _floats(mean, "mean", "Normalize")
        self.std = _floats(std, "std", "Normalize", 0.0, min_open=True)

    def items(self, have_float):
        pre = [] if have_float else [{"name": "to_float", "scale": 1.0}]
        return pre + [{"name": "normalize", "mean": self.mean, "std": self.std}]


class HWC2CHW(Op):
    """HWC -> CHW."""

    def items(self, have_float):
        return [{"name": "hwc_to_chw"}]


class ToTensor(Op):
    """u8 HWC -> float32 CHW in [0, 1]."""

    def __init__(self, output_type=None):
        if output_type is not None:
            from ...common.dtype import to_tessera
            if to_tessera(output_type, "ToTensor(output_type)") != "f32":
                raise ValueError("ToTensor(output_type=%r): only float32 (add transforms.TypeCast after it)"
                                 % (output_type,))

    def items(self, have_float):
        return [{"name": "to_float", "scale": 1.0 / 255}, {"name": "hwc_to_chw"}]


class RandomCrop(Op):
    """Zero padding (int, or 2/4 equal values) then a crop at a random offset."""

    def __init__(self, size, padding=None, pad_if_needed=False, fill_value=0, padding_mode=Border.CONSTANT):
        _size(size, "RandomCrop")
        if padding is None:
            p = 0
        else:
            pads = check_int_or_tuple(padding, "padding", "RandomCrop", n=4, minimum=0, lengths=(1, 2, 4))
            if len(set(pads)) != 1:
                raise ValueError("RandomCrop(padding=%r): only the same padding on every side" % (padding,))
            p = pads[0]
        if fill_value not in (0, (0, 0, 0)):
            raise ValueError("RandomCrop(fill_value=%r): Tessera pads with 0" % (fill_value,))
        if padding_mode not in (Border.CONSTANT, "constant"):
            raise ValueError("RandomCrop(padding_mode=%r): only Border.CONSTANT (zeros)" % (padding_mode,))
        if pad_if_needed:
            raise ValueError("RandomCrop(pad_if_needed=True): not supported (Resize first)")
        self.size, self.p = size, p

    def items(self, have_float):
        return [{"name": "random_crop", "size": _size(self.size), "padding": self.p}]


class CenterCrop(Op):
    def __init__(self, size):
        _size(size, "CenterCrop")
        self.size = size

    def items(self, have_float):
        return [{"name": "center_crop", "size": _size(self.size)}]


class Resize(Op):
    """Bilinear resize (Inter.LINEAR, MindSpore's default); other interpolations are refused."""

    def __init__(self, size, interpolation=Inter.LINEAR):
        if interpolation != Inter.LINEAR:
            raise ValueError("Resize(interpolation=%r): Tessera's resize is bilinear (Inter.LINEAR)" % (interpolation,))
        _size(size, "Resize")
        self.size = size

    def items(self, have_float):
        return [{"name": "resize", "size": _size(self.size)}]


class RandomHorizontalFlip(Op):
    def __init__(self, prob=0.5):
        self.p = check_float(prob, "prob", type(self).__name__, 0.0, 1.0)

    def items(self, have_float):
        return [{"name": "hflip", "p": self.p}]


class RandomVerticalFlip(RandomHorizontalFlip):
    def items(self, have_float):
        return [{"name": "vflip", "p": self.p}]


class RandomErasing(Op):
    """torchvision's RandomErasing (value 0) on CHW float images."""

    def __init__(self, prob=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False, max_attempts=10):
        if value != 0:
            raise ValueError("RandomErasing(value=%r): Tessera erases with 0" % (value,))
        self.p = check_float(prob, "prob", "RandomErasing", 0.0, 1.0)
        self.scale = _floats(scale, "scale", "RandomErasing", 0.0)
        self.ratio = _floats(ratio, "ratio", "RandomErasing", 0.0, min_open=True)
        if len(self.scale) != 2 or len(self.ratio) != 2:
            raise ValueError("For 'RandomErasing', the 'scale' and 'ratio' must be (min, max) pairs, but got %r and %r."
                             % (scale, ratio))

    def items(self, have_float):
        return [{"name": "random_erasing", "p": self.p, "scale": self.scale, "ratio": self.ratio}]


class Decode(Op):
    """Accepted and does nothing: Tessera's sources (ImageFolderDataset's PNG/JPEG files included)
    yield decoded u8 HWC images already."""

    def __init__(self, to_pil=False):
        pass

    def items(self, have_float):
        return []
