"""Models written with tessera.nn that mirror the C zoo's mlp and convnet (same names, same ops),
and the data set / Model set-up matching pyutil.YAML_BASE, for the YAML-vs-Python tests; the
MindSpore-surface tests' data, Model and scratch-folder test case (test_ms_*.py). Imported after
pyutil.require()."""
import os
import shutil
import tempfile
import unittest

import tessera as ts
from tessera import nn
from tessera import dataset as ds
from tessera.dataset import vision

FASHION = "/usr/share/datasets/fashion-mnist"


class MLP(nn.Cell):
    """The zoo's mlp with hidden [h1, h2]: flatten, fc1 + ReLU, fc2 + ReLU, fc3."""

    def __init__(self, h1=64, h2=32, strategies=None):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(784, h1, activation="relu")
        self.fc2 = nn.Dense(h1, h2)
        self.relu = nn.ReLU()
        self.fc3 = nn.Dense(h2, 10)
        for name, s in (strategies or {}).items():
            getattr(self, name).matmul.shard(s)

    def construct(self, x):
        return self.fc3(self.relu(self.fc2(self.fc1(self.flatten(x)))))


class SmallNet(nn.Cell):
    """flatten, fc1 (784 -> hidden) + ReLU, fc2 (hidden -> 10): the MindSpore-surface tests' net."""

    def __init__(self, hidden=32):
        super().__init__()
        self.flat = nn.Flatten()
        self.fc1 = nn.Dense(784, hidden)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(hidden, 10)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(self.flat(x))))


class ConvNet(nn.Cell):
    """The zoo's convnet: 2 x (conv 3x3 without bias + BN + ReLU + max-pool 2), flatten, fc."""

    def __init__(self, c1=8, c2=16):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, pad_mode="same", has_bias=False)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, pad_mode="same", has_bias=False)
        self.bn2 = nn.BatchNorm2d(c2)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(c2 * 7 * 7, 10)

    def construct(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.pool(self.relu(self.bn2(self.conv2(x))))
        return self.fc(self.flatten(x))


def dataset(limit, batch, shards=None, shard_id=None, usage="train"):
    d = ds.FashionMnistDataset(FASHION, usage=usage, num_samples=limit, shuffle=True, num_shards=shards,
                               shard_id=shard_id)
    d = d.map([vision.Rescale(1.0 / 255), vision.Normalize([0.2860], [0.3530]), vision.HWC2CHW()],
              input_columns="image")
    return d.batch(batch)


def train(net, epochs, limit, batch, opt="momentum", shards=None, callbacks=(), extra=None):
    ts.set_seed(3)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    if opt == "momentum":
        o = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    elif opt == "adam":
        o = nn.Adam(net.trainable_params(), 0.002)
    else:
        o = opt  # an optimizer object
    cfg = {"log.metrics": "ck/metrics.jsonl", "train.log_every": 1, "data.test_limit": 128}
    cfg.update(extra or {})
    model = ts.Model(net, loss, o, metrics={"acc", "loss"}, config=cfg)
    rank = ts.get_rank() if shards else None
    model.train(epochs, dataset(limit, batch // (shards or 1), shards, rank),
                callbacks=[ts.ModelCheckpoint("run", "ck", ts.CheckpointConfig(save_checkpoint_steps=0))] +
                list(callbacks))
    return model


class Transformer(nn.Cell):
    """A one-block pre-LN transformer over an image's 28 rows as tokens (28 features each): a
    Dense embedding to 32, LayerNorm, causal MultiHeadAttention (4 heads) and a GELU MLP with
    residuals, the mean over the tokens, a Dense classifier. tp > 1: Megatron's cuts given with
    shard() (q/k/v and fc1 column-parallel, out_proj and fc2 row-parallel, attention by heads);
    cp > 1: the attention's sequence cut (ring attention)."""

    def __init__(self, tp=1, cp=1):
        super().__init__()
        self.embed = nn.Dense(28, 32)
        self.ln1 = nn.LayerNorm(32, epsilon=1e-5)
        self.attn = nn.MultiHeadAttention(32, 4)
        self.ln2 = nn.LayerNorm(32, epsilon=1e-5)
        self.fc1 = nn.Dense(32, 64)
        self.gelu = nn.GELU()
        self.fc2 = nn.Dense(64, 32)
        self.head = nn.Dense(32, 10)
        if tp > 1 or cp > 1:
            col, row = ((1, cp, 1), (tp, 1), (tp,)), ((1, cp, tp), (1, tp), (1,))
            for d in (self.attn.q_proj, self.attn.k_proj, self.attn.v_proj, self.fc1):
                d.shard(col)
            for d in (self.attn.out_proj, self.fc2):
                d.shard(row)
            self.attn.shard(((1, cp, tp, 1),) * 3)
            self.embed.shard(((1, cp, 1), (1, 1), (1,)))

    def construct(self, x):
        h = self.embed(x.reshape(x.shape[0], 28, 28))
        h = h + self.attn(self.ln1(h))
        h = h + self.fc2(self.gelu(self.fc1(self.ln2(h))))
        return self.head(h.mean(1))


# ---- the MindSpore-surface tests (test_ms_*.py) ----
def ms_data(n, batch=16, scale=1 / 255):
    """The first n Fashion-MNIST training images in order (no shuffle), rescaled by scale (no
    normalisation), CHW, in batches of batch."""
    d = ds.FashionMnistDataset(FASHION, usage="train", num_samples=n, shuffle=False)
    return d.map([vision.Rescale(scale), vision.HWC2CHW()], input_columns="image").batch(batch)


def ms_model(net, **kw):
    """Model(net) with sparse softmax cross-entropy (mean) and Momentum(lr 0.01, 0.9); kw go to Model."""
    return ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                    nn.Momentum(net.trainable_params(), 0.01, 0.9), **kw)


class ScratchCase(unittest.TestCase):
    """Each test runs in a scratch folder of its own (the working directory; prefix names it), with
    the auto-parallel context reset; the folder is removed afterwards."""
    prefix = "tessera-py-"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix=self.prefix)
        self.cwd = os.getcwd()
        os.chdir(self.dir)
        ts.reset_auto_parallel_context()

    def tearDown(self):
        os.chdir(self.cwd)
        shutil.rmtree(self.dir, ignore_errors=True)
