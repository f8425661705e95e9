"""tessera.common: MindSpore's mindspore.common names (dtype)."""
from . import dtype

__all__ = ["dtype"]
