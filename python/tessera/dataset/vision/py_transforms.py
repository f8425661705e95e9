"""mindspore.dataset.vision.py_transforms (MindSpore 1.x): the same classes as tessera.dataset.vision."""
from . import *  # noqa: F401,F403
