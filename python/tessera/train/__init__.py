"""tessera.train: Model and the callbacks (MindSpore's mindspore.train)."""
from .callback import (Callback, CheckpointConfig, LossMonitor, ModelCheckpoint, RunContext, TimeMonitor)
from .model import Model

__all__ = ["Model", "Callback", "RunContext", "LossMonitor", "TimeMonitor", "ModelCheckpoint", "CheckpointConfig"]
