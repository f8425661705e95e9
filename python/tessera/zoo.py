"""tessera.zoo: the C zoo's models as Cells (the config's model.* keys; the trainer builds them in
C with PyTorch's parameter names). MindSpore-like constructors: resnet50(class_num=10)."""
from ._validator import check_bool, check_float, check_int, check_int_list
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
    w = "zoo.resnet"
    return ZooCell({"model.name": "resnet", "model.depth": check_int(depth, "depth", w, 1),
                    "model.num_classes": check_int(class_num, "class_num", w, 1),
                    "model.cifar_stem": check_bool(cifar, "cifar", w),
                    "model.zero_init_residual": check_bool(zero_init_residual, "zero_init_residual", w),
                    "model.bn_momentum": check_float(bn_momentum, "bn_momentum", w, 0.0, 1.0),
                    "model.bn_eps": check_float(bn_eps, "bn_eps", w, 0.0, min_open=True)})


def resnet18(class_num=10, **kw):
    return resnet(18, class_num, **kw)


def resnet20(class_num=10, **kw):
    return resnet(20, class_num, **kw)


def resnet50(class_num=10, **kw):
    return resnet(50, class_num, **kw)


def mlp(hidden=(512, 256), num_classes=10):
    return ZooCell({"model.name": "mlp", "model.hidden": check_int_list(hidden, "hidden", "zoo.mlp", 1),
                    "model.num_classes": check_int(num_classes, "num_classes", "zoo.mlp", 1)})


def lenet5(num_class=10):
    return ZooCell({"model.name": "lenet5", "model.num_classes": check_int(num_class, "num_class", "zoo.lenet5", 1)})


def convnet(channels=(32, 64), num_classes=10):
    return ZooCell({"model.name": "convnet", "model.channels": check_int_list(channels, "channels", "zoo.convnet", 1),
                    "model.num_classes": check_int(num_classes, "num_classes", "zoo.convnet", 1)})


def gpt(n_layer, n_head, n_embd, vocab_size=256, block_size=0, dropout=0.0, bias=True, tie_weights=False):
    w = "zoo.gpt"
    return ZooCell({"model.name": "gpt", "model.n_layer": check_int(n_layer, "n_layer", w, 1),
                    "model.n_head": check_int(n_head, "n_head", w, 1), "model.n_embd": check_int(n_embd, "n_embd", w, 1),
                    "model.vocab_size": check_int(vocab_size, "vocab_size", w, 1),
                    "model.block_size": check_int(block_size, "block_size", w, 0),
                    "model.dropout": check_float(dropout, "dropout", w, 0.0, 1.0),
                    "model.bias": check_bool(bias, "bias", w), "model.tie_weights": check_bool(tie_weights, "tie_weights", w)})
