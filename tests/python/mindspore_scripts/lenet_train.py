"""MindSpore's model zoo LeNet-5 (models/official/cv/lenet: src/lenet.py, src/dataset.py, train.py
and eval.py in one file, as its tutorial writes the network: weight_init=Normal(0.02)). Only the
imports changed (`import mindspore` -> `import tessera as mindspore`, MnistDataset ->
Fashion-MNIST's reader of the same IDX files), and the run is cut to a few samples (argv: DATA
TRAIN_SAMPLES TEST_SAMPLES CKPT_DIR). Trains one epoch with TimeMonitor, LossMonitor and
ModelCheckpoint, then, as eval.py does, loads the last checkpoint into a new network and prints
"============== {'Accuracy': A} ==============". """
import sys

import tessera as mindspore
import tessera.dataset as ds
import tessera.dataset.transforms as C
import tessera.dataset.vision as CV
import tessera.nn as nn
from tessera import Model, context, load_checkpoint, load_param_into_net
from tessera.common import dtype as mstype
from tessera.common.initializer import Normal
from tessera.dataset.vision import Inter
from tessera.nn.metrics import Accuracy
from tessera.train.callback import CheckpointConfig, LossMonitor, ModelCheckpoint, TimeMonitor

data_dir, n_train, n_test, ckpt_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def create_dataset(data_path, usage, num_samples, batch_size=32, repeat_size=1, num_parallel_workers=1):
    """ create dataset for train or test """
    # define dataset
    mnist_ds = ds.FashionMnistDataset(data_path, usage=usage, num_samples=num_samples, shuffle=False)

    resize_height, resize_width = 32, 32
    rescale = 1.0 / 255.0
    shift = 0.0
    rescale_nml = 1 / 0.3081
    shift_nml = -1 * 0.1307 / 0.3081

    # define map operations
    resize_op = CV.Resize((resize_height, resize_width), interpolation=Inter.LINEAR)  # Bilinear mode
    rescale_nml_op = CV.Rescale(rescale_nml, shift_nml)
    rescale_op = CV.Rescale(rescale, shift)
    hwc2chw_op = CV.HWC2CHW()
    type_cast_op = C.TypeCast(mstype.int32)

    # apply map operations on images
    mnist_ds = mnist_ds.map(operations=type_cast_op, input_columns="label", num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(operations=resize_op, input_columns="image", num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(operations=rescale_op, input_columns="image", num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(operations=rescale_nml_op, input_columns="image", num_parallel_workers=num_parallel_workers)
    mnist_ds = mnist_ds.map(operations=hwc2chw_op, input_columns="image", num_parallel_workers=num_parallel_workers)

    # apply DatasetOps
    buffer_size = 10000
    mnist_ds = mnist_ds.shuffle(buffer_size=buffer_size)  # 10000 as in LeNet train script
    mnist_ds = mnist_ds.batch(batch_size, drop_remainder=True)
    mnist_ds = mnist_ds.repeat(repeat_size)

    return mnist_ds


class LeNet5(nn.Cell):
    """
    Lenet network

    Args:
        num_class (int): Number of classes. Default: 10.
        num_channel (int): Number of channels. Default: 1.

    Returns:
        Tensor, output tensor
    Examples:
        >>> LeNet(num_class=10)

    """
    def __init__(self, num_class=10, num_channel=1, include_top=True):
        super(LeNet5, self).__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode='valid', weight_init=Normal(0.02))
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode='valid', weight_init=Normal(0.02))
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.include_top = include_top
        if self.include_top:
            self.flatten = nn.Flatten()
            self.fc1 = nn.Dense(16 * 5 * 5, 120, weight_init=Normal(0.02))
            self.fc2 = nn.Dense(120, 84, weight_init=Normal(0.02))
            self.fc3 = nn.Dense(84, num_class, weight_init=Normal(0.02))

    def construct(self, x):
        x = self.conv1(x)
        x = self.relu(x)
        x = self.max_pool2d(x)
        x = self.conv2(x)
        x = self.relu(x)
        x = self.max_pool2d(x)
        if not self.include_top:
            return x
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        x = self.fc3(x)
        return x


# train.py
context.set_context(mode=context.GRAPH_MODE, device_target="CPU")
ds_train = create_dataset(data_dir, "train", n_train, 32)
network = LeNet5(10)
net_loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
net_opt = nn.Momentum(network.trainable_params(), 0.01, 0.9)
time_cb = TimeMonitor(data_size=ds_train.get_dataset_size())
config_ck = CheckpointConfig(save_checkpoint_steps=ds_train.get_dataset_size(), keep_checkpoint_max=10)
ckpoint_cb = ModelCheckpoint(prefix="checkpoint_lenet", directory=ckpt_dir, config=config_ck)
model = Model(network, net_loss, net_opt, metrics={"Accuracy": Accuracy()})
print("============== Starting Training ==============")
model.train(1, ds_train, callbacks=[time_cb, ckpoint_cb, LossMonitor()])

# eval.py
network = LeNet5(10)
model = Model(network, net_loss, net_opt, metrics={"Accuracy": Accuracy()})
param_dict = load_checkpoint(ckpoint_cb.latest_ckpt_file_name)  # (eval.py's config.ckpt_path)
load_param_into_net(network, param_dict)
ds_eval = create_dataset(data_dir, "test", n_test, 32)
acc = model.eval(ds_eval)
print("============== {} ==============".format(acc))
