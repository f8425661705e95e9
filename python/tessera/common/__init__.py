"""tessera.common: MindSpore's mindspore.common names (dtype, initializer, set_seed, Tensor,
Parameter)."""
from . import dtype, initializer

__all__ = ["dtype", "initializer", "set_seed", "Tensor", "Parameter"]


def set_seed(seed):
    """mindspore.common.set_seed: tessera.set_seed."""
    from ..context import set_seed as f
    return f(seed)


def __getattr__(name):  # Tensor, Parameter: tessera.tensor's (imported after this package)
    if name in ("Tensor", "Parameter"):
        from .. import tensor
        return getattr(tensor, name)
    raise AttributeError("module 'tessera.common' has no attribute %r" % name)
