"""Argument validation of the public Python surface (issue #33): wrong types are TypeErrors and
out-of-range values ValueErrors, each naming the function or layer, the argument and the value
(MindSpore's "For 'Dense', the 'out_channels' must be an int, but got float 16.7."); nothing is
truncated or coerced silently. Model.train/eval/fit/predict, callbacks (Callback instances or
objects with the callback methods), nn layers and optimizers, ops primitives, zoo networks, data
sets and samplers, Parameter, set_context / set_auto_parallel_context."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn, ops, zoo  # noqa: E402
import tessera.dataset as ds  # noqa: E402
import tessera.dataset.vision as vision  # noqa: E402
import models  # noqa: E402

ms.init()


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flat = nn.Flatten()
        self.fc = nn.Dense(784, 10)

    def construct(self, x):
        return self.fc(self.flat(x))


def data(n=32, batch=16):
    return models.ms_data(n, batch)


def model():
    return models.ms_model(Net(), metrics={"acc"})


class Steps:
    """Not a Callback: an object with MindSpore's callback methods (accepted, called)."""

    def __init__(self):
        self.n = 0

    def on_train_step_end(self, run_context):
        self.n += 1


class OldStyle:
    """1.x method names only."""

    def __init__(self):
        self.ends = 0

    def epoch_end(self, run_context):
        self.ends += 1


class TestArgs(models.ScratchCase):
    prefix = "tessera-msargs-"

    def raises(self, exc, text, f, *a, **kw):
        with self.assertRaises(exc) as cm:
            f(*a, **kw)
        self.assertIn(text, str(cm.exception))

    # ---- Model ----
    def test_callbacks(self):
        m = model()
        self.raises(TypeError, "For 'Model.train', the 'callbacks' must be a Callback or a list/tuple of Callback",
                    m.train, 1, data(), callbacks=[42])
        self.raises(TypeError, "but element 1 is int 42.", m.train, 1, data(), callbacks=[ms.LossMonitor(), 42])
        self.raises(TypeError, "but it is str 'loss'.", m.train, 1, data(), callbacks="loss")
        self.raises(TypeError, "but element 0 is type", m.train, 1, data(), callbacks=[ms.LossMonitor])
        self.raises(TypeError, "For 'Model.fit', the 'callbacks'", m.fit, 1, data(), callbacks=(None,))
        self.raises(TypeError, "For 'Model.eval', the 'callbacks'", m.eval, data(), callbacks=[3.5])
        self.assertIsNone(m._trainer)  # refused before anything was built
        # duck-typed callbacks are accepted and called; a tuple and None are fine
        s, o = Steps(), OldStyle()
        m.train(1, data(), callbacks=(s, o))
        self.assertEqual((s.n, o.ends), (2, 1))
        model().train(1, data(), callbacks=None)

    def test_train_arguments(self):
        m = model()
        self.raises(TypeError, "For 'Model.train', the 'train_dataset' must be a tessera.dataset data set",
                    m.train, 1, None)
        self.raises(TypeError, "but got list [1, 2].", m.train, 1, [1, 2])
        self.raises(TypeError, "For 'Model.train', the 'epoch' must be an int, but got float 1.5.", m.train, 1.5, data())
        self.raises(TypeError, "the 'epoch' must be an int, but got bool True.", m.train, True, data())
        self.raises(TypeError, "the 'epoch' must be an int, but got str '2'.", m.train, "2", data())
        self.raises(ValueError, "For 'Model.train', the 'epoch' must be a positive int, but got 0.", m.train, 0, data())
        self.raises(TypeError, "For 'Model.train', the 'dataset_sink_mode' must be a bool, but got str 'no'.",
                    m.train, 1, data(), dataset_sink_mode="no")
        self.raises(ValueError, "the 'sink_size' must be a positive int or -1, but got 0.", m.train, 1, data(),
                    dataset_sink_mode=True, sink_size=0)
        self.raises(TypeError, "the 'sink_size' must be an int, but got float 2.0.", m.train, 1, data(),
                    dataset_sink_mode=True, sink_size=2.0)
        self.raises(TypeError, "For 'Model.train', the 'valid_dataset'", m.train, 1, data(), valid_dataset=5)
        self.raises(TypeError, "For 'Model.fit', the 'train_dataset'", m.fit, 1, None)
        self.raises(TypeError, "For 'Model.fit', the 'epoch' must be an int, but got str '3'.", m.fit, "3", data(),
                    data())
        self.raises(TypeError, "For 'Model.fit', the 'valid_frequency' must be an int, but got float 1.5.",
                    m.fit, 2, data(), data(), valid_frequency=1.5)
        self.raises(ValueError, "For 'Model.fit', the 'valid_frequency' must be a positive int, but got 0.",
                    m.fit, 2, data(), data(), valid_frequency=0)
        self.raises(TypeError, "For 'Model.eval', the 'valid_dataset' must be a tessera.dataset data set", m.eval, None)
        self.raises(TypeError, "but got NoneType None.", m.eval, None)
        self.raises(TypeError, "For 'Model.predict', the 'predict_data' must be a Tensor or a numpy array, but got "
                    "NoneType None.", m.predict, None)
        self.raises(TypeError, "the 'predict_data' must hold numbers", m.predict, np.array([["a"]]))
        self.assertIsNone(m._trainer)
        self.raises(ValueError, "epoch", m.train, -1, data())

    # ---- nn ----
    def test_nn_ints(self):
        self.raises(TypeError, "For 'Dense', the 'out_channels' must be an int, but got float 16.7.", nn.Dense, 784, 16.7)
        self.raises(TypeError, "For 'Dense', the 'in_channels' must be an int, but got float 784.0.", nn.Dense, 784.0, 16)
        self.raises(TypeError, "For 'Dense', the 'out_channels' must be an int, but got bool True.", nn.Dense, 784, True)
        self.raises(ValueError, "For 'Dense', the 'out_channels' must be a positive int, but got 0.", nn.Dense, 784, 0)
        self.raises(TypeError, "For 'Dense', the 'has_bias' must be a bool, but got str 'no'.", nn.Dense, 4, 4,
                    has_bias="no")
        d = nn.Dense(np.int64(784), np.int32(16))  # numpy integers are ints
        self.assertEqual((d.in_channels, d.out_channels), (784, 16))
        self.assertIs(type(d.out_channels), int)
        self.raises(TypeError, "For 'Conv2d', the 'kernel_size' must be an int or a tuple of 1 or 2 ints, but got "
                    "float 3.0.", nn.Conv2d, 3, 8, 3.0)
        self.raises(TypeError, "For 'Conv2d', the 'kernel_size' must be an int or a tuple of ints, but element 1 is "
                    "float 3.5.", nn.Conv2d, 3, 8, (3, 3.5))
        self.raises(TypeError, "For 'Conv2d', the 'stride' must be an int", nn.Conv2d, 3, 8, 3, stride=1.5)
        self.raises(TypeError, "For 'Conv2d', the 'out_channels' must be an int, but got float 8.5.", nn.Conv2d, 3, 8.5, 3)
        self.raises(TypeError, "For 'Conv2d', the 'group' must be an int", nn.Conv2d, 4, 8, 3, group=2.0)
        self.raises(TypeError, "For 'Conv2d', the 'padding' must be an int", nn.Conv2d, 3, 8, 3, pad_mode="pad",
                    padding=1.5)
        self.raises(ValueError, "For 'Conv2d', the 'padding' must be an int or a tuple of 4 ints", nn.Conv2d, 3, 8, 3,
                    pad_mode="pad", padding=(1, 1))
        self.raises(TypeError, "For 'MaxPool2d', the 'kernel_size' must be an int", nn.MaxPool2d, 2.0)
        self.raises(TypeError, "For 'AvgPool2d', the 'stride' must be an int", nn.AvgPool2d, 2, 1.5)
        self.raises(TypeError, "For 'AdaptiveAvgPool2d', the 'output_size'", nn.AdaptiveAvgPool2d, 1.0)
        self.raises(TypeError, "For 'BatchNorm2d', the 'num_features' must be an int, but got float 16.5.",
                    nn.BatchNorm2d, 16.5)
        self.raises(TypeError, "For 'BatchNorm2d', the 'momentum' must be a float, but got str '0.9'.",
                    nn.BatchNorm2d, 16, momentum="0.9")
        self.raises(TypeError, "For 'LayerNorm', the 'normalized_shape'", nn.LayerNorm, 8.0)
        self.raises(TypeError, "For 'Embedding', the 'vocab_size' must be an int, but got float 100.5.",
                    nn.Embedding, 100.5, 8)
        self.raises(TypeError, "For 'Embedding', the 'embedding_size' must be an int", nn.Embedding, 100, "8")
        self.raises(TypeError, "For 'MultiHeadAttention', the 'num_heads' must be an int, but got float 2.0.",
                    nn.MultiHeadAttention, 8, 2.0)
        self.raises(TypeError, "For 'Softmax', the 'axis' must be an int", nn.Softmax, 1.0)
        self.raises(TypeError, "For 'Dropout', the 'keep_prob' must be a float or None, but got str '0.5'.", nn.Dropout, "0.5")
        self.raises(TypeError, "For 'SoftmaxCrossEntropyWithLogits', the 'sparse' must be a bool, but got int 1.",
                    nn.SoftmaxCrossEntropyWithLogits, 1)

    def test_optimizers(self):
        self.raises(TypeError, "For 'Momentum', the 'learning_rate' should be int, float, Tensor, Iterable or "
                    "LearningRateSchedule, but got str '0.1'.", nn.Momentum, [], "0.1", 0.9)
        self.raises(TypeError, "For 'Momentum', the 'momentum' must be a float, but got str '0.9'.", nn.Momentum, [],
                    0.1, "0.9")
        self.raises(TypeError, "For 'Adam', the 'beta1' must be a float", nn.Adam, [], 0.1, beta1="0.9")
        self.raises(ValueError, "For 'Adam', the 'weight_decay' must be >= 0", nn.Adam, [], 0.1, weight_decay=-1.0)
        self.raises(TypeError, "For 'SGD', the 'nesterov' must be a bool", nn.SGD, [], 0.1, 0.9, nesterov=1)

    # ---- ops, zoo ----
    def test_ops_zoo(self):
        self.raises(TypeError, "For 'MatMul', the 'transpose_b' must be a bool, but got int 1.", ops.MatMul, False, 1)
        self.raises(TypeError, "For 'Concat', the 'axis' must be an int, but got float 1.0.", ops.Concat, 1.0)
        self.raises(TypeError, "For 'OneHot', the 'axis' must be an int", ops.OneHot, 1.0)
        self.raises(TypeError, "For 'ReduceMean', the 'keep_dims' must be a bool", ops.ReduceMean, 1)
        self.raises(TypeError, "For 'Softmax', the 'axis' must be an int", ops.Softmax, "1")
        self.raises(TypeError, "For 'zoo.mlp', the 'hidden' must be a list or tuple of ints, but element 0 is float "
                    "64.5.", zoo.mlp, (64.5,))
        self.raises(TypeError, "For 'zoo.lenet5', the 'num_class' must be an int, but got float 10.5.", zoo.lenet5, 10.5)
        self.raises(TypeError, "For 'zoo.resnet', the 'depth' must be an int", zoo.resnet, 20.0)
        self.raises(TypeError, "For 'zoo.gpt', the 'n_head' must be an int", zoo.gpt, 2, 2.0, 16)

    # ---- data sets ----
    def test_dataset(self):
        F = pyutil.FASHION
        d = ds.FashionMnistDataset(F, usage="train", num_samples=32, shuffle=False)
        self.raises(TypeError, "For 'batch', the 'batch_size' must be an int, but got float 16.5.", d.batch, 16.5)
        self.raises(ValueError, "For 'batch', the 'batch_size' must be a positive int, but got 0.", d.batch, 0)
        self.raises(TypeError, "For 'batch', the 'drop_remainder' must be a bool, but got int 1.", d.batch, 16, 1)
        self.raises(TypeError, "For 'batch', the 'num_parallel_workers' must be an int", d.batch, 16,
                    num_parallel_workers=2.0)
        self.raises(TypeError, "For 'repeat', the 'count' must be an int", d.repeat, 2.0)
        self.raises(TypeError, "For 'shuffle', the 'buffer_size' must be an int", d.shuffle, 4.5)
        self.raises(TypeError, "For 'map', the 'num_parallel_workers' must be an int", d.map, [vision.HWC2CHW()],
                    "image", num_parallel_workers=1.5)
        self.raises(TypeError, "For 'FashionMnistDataset', the 'num_samples' must be an int or None, but got float "
                    "10.5.", ds.FashionMnistDataset, F, num_samples=10.5)
        self.raises(TypeError, "For 'FashionMnistDataset', the 'shard_id' must be an int or None, but got float 0.5.",
                    ds.FashionMnistDataset, F, num_shards=2, shard_id=0.5)
        self.raises(TypeError, "For 'FashionMnistDataset', the 'num_parallel_workers'", ds.FashionMnistDataset, F,
                    num_parallel_workers=2.5)
        self.raises(TypeError, "For 'FashionMnistDataset', the 'shuffle' must be a bool or None, but got str 'no'.",
                    ds.FashionMnistDataset, F, shuffle="no")
        self.raises(TypeError, "For 'FashionMnistDataset', the 'dataset_dir' must be a str", ds.FashionMnistDataset,
                    None)
        src = [(np.zeros(2, np.float32), np.int32(0))] * 4
        self.raises(TypeError, "For 'GeneratorDataset', the 'num_parallel_workers' must be an int or None, but got "
                    "float 2.0.", ds.GeneratorDataset, src, ["data", "label"], num_parallel_workers=2.0)
        self.raises(TypeError, "For 'GeneratorDataset', the 'num_samples'", ds.GeneratorDataset, src,
                    ["data", "label"], num_samples=2.5)
        self.raises(TypeError, "For 'DistributedSampler', the 'num_shards' must be an int, but got float 2.0.",
                    ds.DistributedSampler, 2.0, 0)
        self.raises(TypeError, "For 'DistributedSampler', the 'shuffle' must be a bool", ds.DistributedSampler, 1, 0,
                    shuffle="yes")
        self.raises(TypeError, "For 'SequentialSampler', the 'num_samples'", ds.SequentialSampler, None, 4.0)
        self.assertEqual(d.batch(np.int64(16)).batch_size, 16)

    def test_vision(self):
        """The image transforms truncated or coerced (RandomCrop(padding=2.5) -> 2, prob="0.5")."""
        self.raises(TypeError, "For 'RandomCrop', the 'padding' must be an int or a tuple", vision.RandomCrop, 28,
                    padding=2.5)
        self.raises(TypeError, "For 'RandomCrop', the 'size' must be an int", vision.RandomCrop, 28.0)
        self.raises(ValueError, "For 'Resize', the 'size[0]' must be a positive int, but got 0.", vision.Resize, (0, 32))
        self.raises(TypeError, "For 'Resize', the 'size' must be an int or a tuple of ints, but element 1 is float",
                    vision.Resize, (32, 32.5))
        self.raises(TypeError, "For 'CenterCrop', the 'size' must be an int", vision.CenterCrop, "24")
        self.raises(TypeError, "For 'RandomHorizontalFlip', the 'prob' must be a float, but got str '0.5'.",
                    vision.RandomHorizontalFlip, "0.5")
        self.raises(ValueError, "For 'RandomVerticalFlip', the 'prob' must be >= 0 and <= 1, but got 1.5.",
                    vision.RandomVerticalFlip, 1.5)
        self.raises(ValueError, "For 'Normalize', the 'std[0]' must be > 0, but got 0.0.", vision.Normalize, [0.5],
                    [0.0])
        self.raises(TypeError, "For 'Normalize', the 'mean' must be a list or tuple of floats", vision.Normalize, 0.5,
                    [1.0])
        self.raises(TypeError, "For 'Rescale', the 'rescale' must be a float", vision.Rescale, "1/255")
        self.raises(ValueError, "For 'RandomErasing', the 'scale' and 'ratio' must be (min, max) pairs",
                    vision.RandomErasing, scale=(0.1,))
        self.assertEqual(vision.RandomCrop(28, padding=(2, 2, 2, 2)).p, 2)
        self.assertEqual(vision.Resize(np.int64(32)).items(False)[0]["size"], 32)
        self.assertEqual(vision.Resize([32, 24]).items(False)[0]["size"], [32, 24])

    # ---- callbacks' own arguments, Parameter, contexts ----
    def test_misc(self):
        self.raises(TypeError, "For 'LossMonitor', the 'per_print_times' must be an int, but got float 1.5.",
                    ms.LossMonitor, 1.5)
        self.raises(TypeError, "For 'CheckpointConfig', the 'save_checkpoint_steps' must be an int or None, but got "
                    "float 2.5.", ms.CheckpointConfig, save_checkpoint_steps=2.5)
        self.raises(TypeError, "For 'CheckpointConfig', the 'keep_checkpoint_max'", ms.CheckpointConfig,
                    keep_checkpoint_max="5")
        self.raises(TypeError, "For 'ModelCheckpoint', the 'config' must be a CheckpointConfig", ms.ModelCheckpoint,
                    "net", "ckpt", {"save_checkpoint_steps": 5})
        self.raises(TypeError, "For 'Parameter', the 'shape' must be a list or tuple of ints, but element 1 is float "
                    "4.5.", ms.Parameter, (3, 4.5), "normal")
        self.raises(TypeError, "For 'Parameter', the 'requires_grad' must be a bool, but got str 'no'.", ms.Parameter,
                    (3, 4), "normal", requires_grad="no")
        self.raises(TypeError, "For 'Parameter', the 'name' must be a str or None, but got int 5.", ms.Parameter,
                    (3, 4), "normal", name=5)
        self.raises(TypeError, "set_context(seed=True): expected a non-negative integer", ms.set_context, seed=True)
        self.raises(TypeError, "set_context(threads=2.0)", ms.set_context, threads=2.0)
        self.raises(ValueError, "set_context(seed=-1)", ms.set_context, seed=-1)
        self.raises(TypeError, "set_auto_parallel_context(pipeline_stages=2.0)", ms.set_auto_parallel_context,
                    pipeline_stages=2.0)
        self.raises(TypeError, "set_auto_parallel_context(gradients_mean=1)", ms.set_auto_parallel_context,
                    gradients_mean=1)
        self.raises(TypeError, "set_auto_parallel_context(device_num=2.5): expected a positive integer",
                    ms.set_auto_parallel_context, device_num=2.5)


if __name__ == "__main__":
    unittest.main()
