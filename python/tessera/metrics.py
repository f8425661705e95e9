"""MindSpore's metrics (mindspore.nn.Accuracy, ..., mindspore.train.Accuracy): objects a Model's
`metrics` dict names, e.g. Model(net, loss, opt, metrics={"Accuracy": nn.Accuracy()}); Model.eval
returns {"Accuracy": 0.87}.

Accuracy (classification), TopKCategoricalAccuracy with k 1 or 5 (Top1/Top5CategoricalAccuracy)
and Loss are the trainer's own evaluation figures (computed in C over the test split, every rank
alike: `_key`). The others, and a user's Metric subclass, are computed here from the evaluation
graph's logits, batch by batch: Model.eval runs the network forward on each batch of the data set
(as Model.predict does) and calls update(logits, labels) with Tensors of values, then eval(): one
process only. Their update/eval also work by hand on numpy arrays or Tensors of values, as in
MindSpore."""
import numpy as np

from .tensor import Tensor

__all__ = ["Metric", "Accuracy", "TopKCategoricalAccuracy", "Top1CategoricalAccuracy", "Top5CategoricalAccuracy",
           "Loss", "Precision", "Recall", "Fbeta", "F1", "MAE", "MSE"]


class Metric:
    """Base class: clear() resets, update(*inputs) adds a batch, eval() gives the value."""

    _key = None  # the trainer's evaluation figure it is ("top1", "top5", "loss"), if any

    def __init__(self):
        self.clear()

    def clear(self):
        raise NotImplementedError

    def update(self, *inputs):
        raise NotImplementedError

    def eval(self):
        raise NotImplementedError

    @staticmethod
    def _convert_data(data):
        """A Tensor of values, list or numpy array as a numpy array."""
        if isinstance(data, Tensor):
            return data.asnumpy()
        if isinstance(data, (list, tuple, np.ndarray, int, float, np.number)):
            return np.asarray(data)
        raise TypeError("The input data type must be a Tensor, list or numpy.ndarray, but got %s." % type(data).__name__)

    def _pred_label(self, inputs, where):
        if len(inputs) != 2:
            raise ValueError("For '%s.update', it needs 2 inputs (predicted value, true value), but got %d."
                             % (where, len(inputs)))
        y_pred, y = self._convert_data(inputs[0]), self._convert_data(inputs[1])
        if y.ndim == y_pred.ndim and y.ndim > 1 and y.shape == y_pred.shape:  # one-hot labels
            y = y.argmax(axis=-1)
        if y_pred.ndim != 2 or y.reshape(-1).shape[0] != y_pred.shape[0]:
            raise ValueError("For '%s.update', the predicted value must be (N, C) and the true value N class ids or "
                             "(N, C) one-hot, but got shapes %s and %s." % (where, y_pred.shape, y.shape))
        y = y.reshape(-1).astype(np.int64)
        if len(y) and (y.min() < 0 or y.max() >= y_pred.shape[1]):
            raise ValueError("For '%s.update', the true value holds class %d, outside the %d classes of the predicted "
                             "value." % (where, y.min() if y.min() < 0 else y.max(), y_pred.shape[1]))
        return y_pred, y


class Accuracy(Metric):
    """The fraction of samples whose largest logit is their class (eval_type 'classification')."""

    _key = "top1"

    def __init__(self, eval_type="classification"):
        if eval_type != "classification":
            raise ValueError("For 'Accuracy', eval_type %r is not supported (Tessera's models classify: "
                             "'classification')" % (eval_type,))
        self.eval_type = eval_type
        super().__init__()

    def clear(self):
        self._correct, self._total = 0, 0

    def update(self, *inputs):
        y_pred, y = self._pred_label(inputs, type(self).__name__)
        self._correct += int((y_pred.argmax(axis=1) == y).sum())
        self._total += len(y)

    def eval(self):
        if self._total == 0:
            raise RuntimeError("The 'Accuracy' can not be calculated, because the number of samples is 0.")
        return self._correct / self._total


class TopKCategoricalAccuracy(Metric):
    """The fraction of samples whose class is among their k largest logits."""

    def __init__(self, k):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError("For 'TopKCategoricalAccuracy', the 'k' must be a positive int, but got %r." % (k,))
        self.k = k
        self._key = {1: "top1", 5: "top5"}.get(k)
        super().__init__()

    def clear(self):
        self._correct, self._total = 0, 0

    def update(self, *inputs):
        y_pred, y = self._pred_label(inputs, type(self).__name__)
        # a class is in the top k when fewer than k logits are larger than its own (ties count for it)
        mine = y_pred[np.arange(len(y)), y]
        self._correct += int(((y_pred > mine[:, None]).sum(axis=1) < self.k).sum())
        self._total += len(y)

    def eval(self):
        if self._total == 0:
            raise RuntimeError("The 'TopKCategoricalAccuracy' can not be calculated, because the number of samples "
                               "is 0.")
        return self._correct / self._total


class Top1CategoricalAccuracy(TopKCategoricalAccuracy):
    def __init__(self):
        super().__init__(1)


class Top5CategoricalAccuracy(TopKCategoricalAccuracy):
    def __init__(self):
        super().__init__(5)


class Loss(Metric):
    """The mean of the losses given to update (in Model.eval: the mean softmax cross-entropy)."""

    _key = "loss"

    def clear(self):
        self._sum, self._n = 0.0, 0

    def update(self, *inputs):
        if len(inputs) != 1:
            raise ValueError("For 'Loss.update', it needs 1 input (loss), but got %d." % len(inputs))
        a = self._convert_data(inputs[0])
        if a.ndim > 1:
            raise ValueError("For 'Loss.update', the loss must be a scalar or 1-D, but got shape %s." % (a.shape,))
        self._sum += float(a.mean()) if a.size else 0.0
        self._n += 1

    def eval(self):
        if self._n == 0:
            raise RuntimeError("The 'Loss' can not be calculated, because the number of samples is 0.")
        return self._sum / self._n


class _Confusion(Metric):
    """Per-class counts of true positives, predicted and actual positives (classification)."""

    def __init__(self, eval_type="classification"):
        if eval_type != "classification":
            raise ValueError("For '%s', eval_type %r is not supported ('classification')"
                             % (type(self).__name__, eval_type))
        self.eval_type = eval_type
        super().__init__()

    def clear(self):
        self._tp = self._pred = self._true = None

    def update(self, *inputs):
        y_pred, y = self._pred_label(inputs, type(self).__name__)
        c = y_pred.shape[1]
        if self._tp is None:
            self._tp, self._pred, self._true = np.zeros(c), np.zeros(c), np.zeros(c)
        elif len(self._tp) != c:
            raise ValueError("For '%s.update', %d classes, but earlier batches had %d." % (type(self).__name__, c,
                                                                                          len(self._tp)))
        p = y_pred.argmax(axis=1)
        self._tp += np.bincount(y[p == y], minlength=c)[:c]
        self._pred += np.bincount(p, minlength=c)[:c]
        self._true += np.bincount(y, minlength=c)[:c]

    def _counts(self):
        if self._tp is None:
            raise RuntimeError("The '%s' can not be calculated, because the number of samples is 0."
                               % type(self).__name__)
        return self._tp, self._pred, self._true


def _ratio(a, b):
    return np.divide(a, b, out=np.zeros_like(a, dtype=np.float64), where=b > 0)


class Precision(_Confusion):
    """Per class: true positives / predicted positives (0 where a class was never predicted);
    eval(average=True): their mean."""

    def eval(self, average=False):
        tp, pred, _ = self._counts()
        r = _ratio(tp, pred)
        return float(r.mean()) if average else r


class Recall(_Confusion):
    """Per class: true positives / actual positives; eval(average=True): their mean."""

    def eval(self, average=False):
        tp, _, true = self._counts()
        r = _ratio(tp, true)
        return float(r.mean()) if average else r


class Fbeta(_Confusion):
    """Per class: (1 + beta^2) precision recall / (beta^2 precision + recall); eval(average=True):
    their mean."""

    def __init__(self, beta):
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0:
            raise ValueError("For 'Fbeta', the 'beta' must be a positive number, but got %r." % (beta,))
        self.beta = float(beta)
        super().__init__()

    def eval(self, average=False):
        tp, pred, true = self._counts()
        p, r, b2 = _ratio(tp, pred), _ratio(tp, true), self.beta ** 2
        f = _ratio((1 + b2) * p * r, b2 * p + r)
        return float(f.mean()) if average else f


class F1(Fbeta):
    def __init__(self):
        super().__init__(1.0)


class _Regression(Metric):
    def clear(self):
        self._sum, self._n = 0.0, 0

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError("For '%s.update', it needs 2 inputs (predicted value, true value), but got %d."
                             % (type(self).__name__, len(inputs)))
        y_pred, y = self._convert_data(inputs[0]).astype(np.float64), self._convert_data(inputs[1]).astype(np.float64)
        if y_pred.shape != y.shape:
            y = y.reshape(y_pred.shape)
        e = self._err(y_pred - y)  # MindSpore's: the errors of every element summed, over the samples
        self._sum += float(e.sum())
        self._n += len(e) if e.ndim else 1

    def eval(self):
        if self._n == 0:
            raise RuntimeError("The '%s' can not be calculated, because the number of samples is 0."
                               % type(self).__name__)
        return self._sum / self._n


class MAE(_Regression):
    """The absolute errors summed over every element, divided by the number of samples."""

    @staticmethod
    def _err(d):
        return np.abs(d)


class MSE(_Regression):
    """The squared errors summed over every element, divided by the number of samples."""

    @staticmethod
    def _err(d):
        return d * d
