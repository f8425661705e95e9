"""tessera.dataset.vision: MindSpore's image transforms (mindspore.dataset.vision) that Tessera's C
pipeline has, as data.transforms items (docs/config.md, "Transforms"). An argument the pipeline
cannot honour is refused with ValueError naming it. c_transforms / py_transforms are the same
classes under MindSpore 1.x's module names."""
import enum

from .._op import Op

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


def _size(size):
    return size if isinstance(size, int) else list(size)


class Rescale(Op):
    """x * rescale + shift, to float32."""

    def __init__(self, rescale, shift=0.0):
        self.rescale, self.shift = float(rescale), float(shift)

    def items(self, have_float):
        return [{"name": "to_float", "scale": self.rescale, "shift": self.shift}]


class Normalize(Op):
    """Per-channel (x - mean) / std on HWC images; on u8 images (MindSpore's usual place, mean/std
    in pixel units) a to_float with scale 1 is inserted first."""

    def __init__(self, mean, std, is_hwc=True):
        if not is_hwc:
            raise ValueError("Normalize(is_hwc=False): only HWC images (put HWC2CHW after Normalize)")
        self.mean, self.std = [float(m) for m in mean], [float(s) for s in std]

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
        if padding is None:
            p = 0
        elif isinstance(padding, int):
            p = padding
        else:
            if len(set(padding)) != 1:
                raise ValueError("RandomCrop(padding=%r): only the same padding on every side" % (padding,))
            p = padding[0]
        if fill_value not in (0, (0, 0, 0)):
            raise ValueError("RandomCrop(fill_value=%r): Tessera pads with 0" % (fill_value,))
        if padding_mode not in (Border.CONSTANT, "constant"):
            raise ValueError("RandomCrop(padding_mode=%r): only Border.CONSTANT (zeros)" % (padding_mode,))
        if pad_if_needed:
            raise ValueError("RandomCrop(pad_if_needed=True): not supported (Resize first)")
        self.size, self.p = size, int(p)

    def items(self, have_float):
        return [{"name": "random_crop", "size": _size(self.size), "padding": self.p}]


class CenterCrop(Op):
    def __init__(self, size):
        self.size = size

    def items(self, have_float):
        return [{"name": "center_crop", "size": _size(self.size)}]


class Resize(Op):
    """Bilinear resize (Inter.LINEAR, MindSpore's default); other interpolations are refused."""

    def __init__(self, size, interpolation=Inter.LINEAR):
        if interpolation != Inter.LINEAR:
            raise ValueError("Resize(interpolation=%r): Tessera's resize is bilinear (Inter.LINEAR)" % (interpolation,))
        self.size = size

    def items(self, have_float):
        return [{"name": "resize", "size": _size(self.size)}]


class RandomHorizontalFlip(Op):
    def __init__(self, prob=0.5):
        self.p = float(prob)

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
        self.p, self.scale, self.ratio = float(prob), [float(x) for x in scale], [float(x) for x in ratio]

    def items(self, have_float):
        return [{"name": "random_erasing", "p": self.p, "scale": self.scale, "ratio": self.ratio}]


class Decode(Op):
    """Accepted and does nothing: Tessera's sources (ImageFolderDataset's PNG/JPEG files included)
    yield decoded u8 HWC images already."""

    def __init__(self, to_pil=False):
        pass

    def items(self, have_float):
        return []
