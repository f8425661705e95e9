"""tessera.zoo: the C zoo's models as Cells (the config's model.* keys; the trainer builds them in
C with PyTorch's parameter names). MindSpore-like constructors: resnet50(class_num=10)."""
from .nn import Cell


class ZooCell(Cell):
    """A zoo model: its model.* config keys; construct is the C builder's (not callable here)."""

    def __init__(self, keys):
        super().__init__()
        self.__dict__["_zoo_keys"] = dict(keys)

    def construct(self, *args):
        raise RuntimeError("a tessera.zoo model is built by the C zoo (use it through tessera.Model)")

    def trainable_params(self, recurse=True):
        return []  # created by the C zoo at build time; Tessera's optimizer trains all of them

    def __repr__(self):
        return "ZooCell(%s)" % ", ".join("%s=%r" % kv for kv in self._zoo_keys.items())


def resnet(depth, class_num=10, cifar=True, zero_init_residual=False, bn_momentum=0.1, bn_eps=1e-5):
    """torchvision's ResNet (18, 34, 50, 101, 152; cifar=True: the 3x3 stem without max-pool) or
    He et al.'s CIFAR ResNet (6n+2: 20, 32, 56, 110)."""
    return ZooCell({"model.name": "resnet", "model.depth": int(depth), "model.num_classes": int(class_num),
                    "model.cifar_stem": bool(cifar), "model.zero_init_residual": bool(zero_init_residual),
                    "model.bn_momentum": float(bn_momentum), "model.bn_eps": float(bn_eps)})


def resnet18(class_num=10, **kw):
    return resnet(18, class_num, **kw)


def resnet20(class_num=10, **kw):
    return resnet(20, class_num, **kw)


def resnet50(class_num=10, **kw):
    return resnet(50, class_num, **kw)


def mlp(hidden=(512, 256), num_classes=10):
    return ZooCell({"model.name": "mlp", "model.hidden": [int(h) for h in hidden], "model.num_classes": int(num_classes)})


def lenet5(num_class=10):
    return ZooCell({"model.name": "lenet5", "model.num_classes": int(num_class)})


def convnet(channels=(32, 64), num_classes=10):
    return ZooCell({"model.name": "convnet", "model.channels": [int(c) for c in channels],
                    "model.num_classes": int(num_classes)})


def gpt(n_layer, n_head, n_embd, vocab_size=256, block_size=0, dropout=0.0, bias=True, tie_weights=False):
    return ZooCell({"model.name": "gpt", "model.n_layer": n_layer, "model.n_head": n_head, "model.n_embd": n_embd,
                    "model.vocab_size": vocab_size, "model.block_size": block_size, "model.dropout": dropout,
                    "model.bias": bias, "model.tie_weights": tie_weights})
