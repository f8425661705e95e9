"""MindSpore's "Simple Linear Function Fitting" tutorial (mindspore.cn, the beginner's regression:
a Dense(1, 1) fits y = 2x + 3 with noise, nn.loss.MSELoss, Momentum, Model.train with LossMonitor,
then the trained parameters printed). Only the imports changed (`mindspore` -> `tessera`), and the
data's numpy generator is seeded (np.random.seed) so that the run repeats. Run by
test_ms_regression.py."""
import numpy as np
from tessera import dataset as ds
from tessera.common.initializer import Normal
from tessera import nn
from tessera import Model
from tessera.train.callback import LossMonitor

np.random.seed(3)


def get_data(num, w=2.0, b=3.0):
    for _ in range(num):
        x = np.random.uniform(-10.0, 10.0)
        noise = np.random.normal(0, 1)
        y = x * w + b + noise
        yield np.array([x]).astype(np.float32), np.array([y]).astype(np.float32)


def create_dataset(num_data, batch_size=16, repeat_size=1):
    input_data = ds.GeneratorDataset(list(get_data(num_data)), column_names=['data', 'label'])
    input_data = input_data.batch(batch_size)
    input_data = input_data.repeat(repeat_size)
    return input_data


data_number = 1600
batch_number = 16
repeat_number = 1

ds_train = create_dataset(data_number, batch_size=batch_number, repeat_size=repeat_number)


class LinearNet(nn.Cell):
    def __init__(self):
        super(LinearNet, self).__init__()
        self.fc = nn.Dense(1, 1, Normal(0.02), Normal(0.02))

    def construct(self, x):
        x = self.fc(x)
        return x


net = LinearNet()
model_params = net.trainable_params()
for param in model_params:
    print(param, param.asnumpy())

net_loss = nn.loss.MSELoss()
opt = nn.Momentum(net.trainable_params(), learning_rate=0.005, momentum=0.9)
model = Model(net, net_loss, opt)

epoch = 1
model.train(epoch, ds_train, callbacks=[LossMonitor(10)], dataset_sink_mode=False)

for param in net.trainable_params():
    print(param, param.asnumpy())
