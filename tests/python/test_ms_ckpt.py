"""MindSpore's .ckpt files from the Python surface, checked with Google's protobuf library
(tests/tools/ms_ckpt_proto.py builds MindSpore's checkpoint.proto; python3-protobuf): a trained
network with a BatchNorm saved as net.ckpt holds exactly MindSpore's names (gamma, beta,
moving_mean, moving_variance), types and dims, the trained values; it loads back into another
network, before its Model and after, to the same predictions; a file the library writes as
MindSpore saves one from Model.train (the network, moments.*, learning_rate, global_step, the
append_info strings, one tensor in several values) loads with load_checkpoint as MindSpore gives
it, filter_prefix / specify_prefix / choice_func as MindSpore's, load_param_into_net's pair
(param_not_load, ckpt_not_load); LayerNorm's and Embedding's MindSpore names; save_checkpoint of
a dict with append_dict (Int64 / Float32 / str values as MindSpore stores them) and format=."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn  # noqa: E402
import models  # noqa: E402
import ms_ckpt_proto as proto  # noqa: E402

ms.init()


class BNNet(nn.Cell):
    """conv 3x3 (4 channels, stride 2) + BN + ReLU, flatten, dense to 10."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=2, pad_mode="same", has_bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.flat = nn.Flatten()
        self.fc = nn.Dense(4 * 14 * 14, 10)

    def construct(self, x):
        return self.fc(self.flat(self.relu(self.bn(self.conv(x)))))


MS_NAMES = ["conv.weight", "bn.gamma", "bn.beta", "bn.moving_mean", "bn.moving_variance", "fc.weight", "fc.bias"]
LIB = {"bn.gamma": "bn.weight", "bn.beta": "bn.bias", "bn.moving_mean": "bn.running_mean",
       "bn.moving_variance": "bn.running_var"}


def trained(steps=2, seed=3):
    ms.set_seed(seed)
    net = BNNet()
    m = models.ms_model(net)
    m.train(1, models.ms_data(16 * steps))
    return net, m


def params(net):
    return {k: np.array(v) for k, v in net._trainer.params().items()}


class TestMindSporeCkpt(models.ScratchCase):
    prefix = "tessera-msckpt-"

    def test_trained_net_as_mindspore_file(self):
        net, m = trained()
        p = params(net)
        ms.save_checkpoint(net, "net.ckpt")
        vals = proto.read("net.ckpt")  # Google's protobuf library
        self.assertEqual(sorted(v[0] for v in vals), sorted(MS_NAMES))
        for tag, dims, ty, content, _ in vals:
            a = p[LIB.get(tag, tag)]
            self.assertEqual((dims, ty), (list(a.shape), "Float32"), tag)
            self.assertTrue(np.array_equal(proto.as_numpy(dims, ty, content), a), tag)
        self.assertFalse(np.array_equal(p["bn.running_mean"], 0))  # trained statistics, not the initial ones
        self.assertEqual([f for f in os.listdir(".") if f not in ("net.ckpt",) and not f.startswith("ck")], [])  # no temporary
        # Tessera's whole training checkpoint in MindSpore's container (what `tessera ckpt merge -o
        # x.ckpt` writes): read as Tessera's, its "param."/"state." prefixes stripped
        net._trainer.save("full.ckpt")
        full = ms.load_checkpoint("full.ckpt")
        for k, v in p.items():
            self.assertTrue(np.array_equal(full[k], v), k)
        # read back: MindSpore's names; into a fresh network before its Model, the same predictions
        d = ms.load_checkpoint("net.ckpt")
        self.assertEqual(sorted(d), sorted(MS_NAMES))
        ms.set_seed(11)
        net2 = BNNet()
        self.assertEqual(ms.load_param_into_net(net2, d), ([], []))
        m2 = models.ms_model(net2)
        x = next(iter(models.ms_data(16)))[0]
        net.set_train(False)
        net2.set_train(False)
        self.assertTrue(np.array_equal(np.asarray(m.predict(x)), np.asarray(m2.predict(x))))
        # after its Model: load_param_into_net into the built network
        net3, _ = trained(steps=1, seed=5)
        self.assertFalse(np.array_equal(params(net3)["fc.weight"], p["fc.weight"]))
        self.assertEqual(ms.load_param_into_net(net3, d), ([], []))
        for k, v in params(net3).items():
            self.assertTrue(np.array_equal(v, p[k]), k)

    def test_mindspore_written_file(self):
        """As MindSpore's ModelCheckpoint writes a TrainOneStepCell's (Momentum's moments, the
        learning rate, global_step, append_info), fc.weight in 3 values."""
        net, _ = trained()
        p = params(net)
        rng = np.random.default_rng(0)
        entries = []
        for n in MS_NAMES:
            entries.append((n, (rng.standard_normal(p[LIB.get(n, n)].shape)).astype(np.float32)))
            entries.append(("moments." + n, np.zeros(p[LIB.get(n, n)].shape, np.float32)))
        entries += [("learning_rate", np.array(0.01, np.float32)), ("momentum", np.array(0.9, np.float32)),
                    ("global_step", np.array([4], np.int32)), ("epoch_num", np.array(1, np.int64)),
                    ("step_num", np.array(4, np.int64)), ("note", "trained by MindSpore")]
        proto.write("ms.ckpt", entries, piece=10 * 4 * 14 * 14)  # fc.weight's 31360 bytes in 4 values
        self.assertGreater([v[4] for v in proto.read("ms.ckpt") if v[0] == "fc.weight"][0], 1)
        want = dict(entries)
        d = ms.load_checkpoint("ms.ckpt")
        self.assertEqual(sorted(d), sorted(want))
        self.assertEqual(d["note"], "trained by MindSpore")
        self.assertEqual((d["global_step"].dtype, d["global_step"].shape), (np.int32, (1,)))
        self.assertEqual((d["epoch_num"].dtype, d["epoch_num"].shape), (np.int64, ()))
        for k, v in want.items():
            if not isinstance(v, str):
                self.assertTrue(np.array_equal(d[k], v), k)
        # MindSpore's filters
        self.assertEqual(sorted(ms.load_checkpoint("ms.ckpt", filter_prefix=["moments", "learning_rate", "momentum",
                                                                             "global_step", "epoch_num", "step_num",
                                                                             "note"])), sorted(MS_NAMES))
        self.assertEqual(sorted(ms.load_checkpoint("ms.ckpt", specify_prefix="bn.")), sorted(MS_NAMES[1:5]))
        self.assertEqual(sorted(ms.load_checkpoint("ms.ckpt", choice_func=lambda n: n.startswith("fc."))),
                         ["fc.bias", "fc.weight"])
        with self.assertRaisesRegex(TypeError, "filter_prefix"):
            ms.load_checkpoint("ms.ckpt", filter_prefix=[""])
        # into the trained network: MindSpore's pair; the values are the file's
        not_loaded, unused = ms.load_param_into_net(net, d)
        self.assertEqual(not_loaded, [])
        self.assertEqual(sorted(unused), sorted(k for k in want if k not in MS_NAMES))
        for n in MS_NAMES:
            self.assertTrue(np.array_equal(params(net)[LIB.get(n, n)], want[n]), n)
        # load_checkpoint(net=) and strict loading of a file without the BN
        not_loaded, _ = ms.load_param_into_net(net, ms.load_checkpoint("ms.ckpt", filter_prefix="bn."))
        self.assertEqual(sorted(not_loaded), ["bn.bias", "bn.running_mean", "bn.running_var", "bn.weight"])
        with self.assertRaisesRegex(ValueError, "not in the checkpoint: .*bn"):
            ms.load_checkpoint("ms.ckpt", net=net, strict_load=True, filter_prefix="bn.")

    def test_layernorm_embedding_names(self):
        class Tok(nn.Cell):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(256, 8)
                self.ln = nn.LayerNorm((8,))
                self.fc = nn.Dense(8, 10)

            def construct(self, x):  # pixel values 0..255 as ids
                ids = x.reshape(x.shape[0], 28 * 28).astype("int32")
                return self.fc(self.ln(self.emb(ids)).mean(1))

        rng = np.random.default_rng(1)
        vals = {"emb.embedding_table": rng.standard_normal((256, 8)).astype(np.float32),
                "ln.gamma": rng.standard_normal(8).astype(np.float32),
                "ln.beta": rng.standard_normal(8).astype(np.float32)}
        proto.write("tok.ckpt", list(vals.items()))
        net = Tok()
        ms.load_param_into_net(net, ms.load_checkpoint("tok.ckpt"))  # before the Model
        m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(net.trainable_params(), 0.0))
        m.predict(next(iter(models.ms_data(16, scale=1.0)))[0])
        p = params(net)
        for k, lib in (("emb.embedding_table", "emb.weight"), ("ln.gamma", "ln.weight"), ("ln.beta", "ln.bias")):
            self.assertTrue(np.array_equal(p[lib], vals[k]), k)
        ms.save_checkpoint(net, "tok_out.ckpt")
        self.assertEqual(sorted(v[0] for v in proto.read("tok_out.ckpt")),
                         ["emb.embedding_table", "fc.bias", "fc.weight", "ln.beta", "ln.gamma"])

    def test_dict_append_dict_format(self):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        ms.save_checkpoint({"w": a, "b": np.ones(3, np.float16)}, "d.ckpt",
                           append_dict={"epoch_num": 3, "lr": 0.5, "tag": "x\u00e9"})
        got = {v[0]: v for v in proto.read("d.ckpt")}
        self.assertEqual([v[0] for v in proto.read("d.ckpt")], ["w", "b", "epoch_num", "lr", "tag"])
        self.assertEqual(got["w"][1:3], ([2, 3], "Float32"))
        self.assertEqual(got["b"][1:3], ([3], "Float16"))
        self.assertEqual(got["epoch_num"][1:3], ([], "Int64"))
        self.assertEqual(got["lr"][1:3], ([], "Float32"))
        self.assertEqual(got["tag"][1:3], ([0], "str"))
        self.assertEqual(proto.as_numpy(*got["tag"][1:4]), "x\u00e9")
        self.assertTrue(np.array_equal(proto.as_numpy(*got["w"][1:4]), a))
        # format= adds its suffix, as MindSpore's; a safetensors name stays Tessera's format
        ms.save_checkpoint({"w": a}, "e", format="ckpt")
        self.assertEqual([v[0] for v in proto.read("e.ckpt")], ["w"])
        ms.save_checkpoint({"w": a}, "f", format="safetensors")
        self.assertTrue(np.array_equal(ms.load_checkpoint("f.safetensors")["w"], a))
        with open("f.safetensors", "rb") as f:
            self.assertNotEqual(f.read(1), b"\x0a")
        with self.assertRaisesRegex(ValueError, "format='safetensors' with a .ckpt name"):
            ms.save_checkpoint({"w": a}, "g.ckpt", format="safetensors")
        ms.save_checkpoint({"w": a, "v": a}, "h.ckpt", choice_func=lambda n: n == "v")
        self.assertEqual(list(ms.load_checkpoint("h.ckpt")), ["v"])


if __name__ == "__main__":
    unittest.main()
