"""tessera.train: Model, the callbacks and the metrics (MindSpore's mindspore.train)."""
from .callback import (Callback, CheckpointConfig, EarlyStopping, LossMonitor, ModelCheckpoint, RunContext,
                       TimeMonitor)
from .model import Model
from ..metrics import (Accuracy, F1, Fbeta, Loss, MAE, MSE, Metric, Precision, Recall,  # noqa: F401
                       Top1CategoricalAccuracy, Top5CategoricalAccuracy, TopKCategoricalAccuracy)

__all__ = ["Model", "Callback", "RunContext", "LossMonitor", "TimeMonitor", "ModelCheckpoint", "CheckpointConfig",
           "EarlyStopping", "Metric", "Accuracy",
           "TopKCategoricalAccuracy", "Top1CategoricalAccuracy", "Top5CategoricalAccuracy", "Loss", "Precision", "Recall",
           "Fbeta", "F1", "MAE", "MSE"]
