"""mindspore.dataset.transforms.c_transforms (MindSpore 1.x): the same classes as tessera.dataset.transforms."""
from . import *  # noqa: F401,F403
