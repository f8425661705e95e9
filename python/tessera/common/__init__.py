"""tessera.common: MindSpore's mindspore.common names (dtype, initializer)."""
from . import dtype, initializer

__all__ = ["dtype", "initializer"]
