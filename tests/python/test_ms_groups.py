"""MindSpore's parameter groups, one process: groups that split the parameters into one weight
decay and none (the model zoo's `[{"params": decayed, "weight_decay": wd}, {"params": others},
{"order_params": ...}]`) give exactly those updates: after one SGD step the decayed weights moved
by lr * wd * w0 more than without decay, the others not at all (bitwise), and a bias in the
decayed group is decayed (the groups decide, not Tessera's bias-and-norm default); the same on the
command line with optimizer.no_decay_params (also on a pipeline of 2 ranks, where each name
is on one stage). Groups with their own learning rate and several weight decays (MindSpore's
optimizer docstring example; optimizer.param_groups) update each parameter at its group's rate and
decay: one SGD step against the update computed from a plain step's gradient; a group's
per-step rates in a constant ratio to the optimizer's list; every group with its own rate (the
optimizer's then unused) bitwise the same groups written with the first group's rate as the
optimizer's over 3 momentum steps. Groups Tessera cannot express (rates not in a constant ratio,
another LearningRateSchedule, grad_centralization, a key MindSpore does not know) and a name that
matches no parameter are refused."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn  # noqa: E402
import models  # noqa: E402

ms.init()


def Net():
    return models.SmallNet(16)


LR, WD = 0.5, 0.25


def step_once(make_params, weight_decay=0.0, eval_only=False, lr=LR, opt=nn.SGD, steps=1, keys=None, **kw):
    """The parameters after `steps` steps of opt (SGD, lr LR) on batches of 16, or the initial
    ones; keys: a list the optimizer's config keys are appended to."""
    ms.set_seed(3)
    net = Net()
    o = opt(make_params(net), lr, weight_decay=weight_decay, **kw)
    if keys is not None:
        keys.append(o.keys)
    m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), o, config={})
    if eval_only:
        m.eval(models.ms_data(16, 16))
    else:
        m.train(1, models.ms_data(16 * steps, 16))
    return {k: np.array(v) for k, v in net._trainer.params().items()}


def zoo_groups(net):
    # MindSpore's model zoo (ResNet's init_group_params), with Tessera's parameter names
    decayed = [p for p in net.trainable_params() if "bias" not in p.name]
    others = [p for p in net.trainable_params() if "bias" in p.name]
    return [{"params": decayed, "weight_decay": WD}, {"params": others}, {"order_params": net.trainable_params()}]


class TestGroups(models.ScratchCase):
    prefix = "tessera-msgroups-"

    def test_decay_and_no_decay(self):
        w0 = step_once(lambda n: n.trainable_params(), eval_only=True)
        plain = step_once(lambda n: n.trainable_params())
        grouped = step_once(zoo_groups)
        self.assertEqual(sorted(w0), ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"])
        for k in ("fc1.bias", "fc2.bias"):  # the group without weight_decay: as without decay, bitwise
            self.assertTrue(np.array_equal(grouped[k], plain[k]), k)
        for k in ("fc1.weight", "fc2.weight"):  # SGD: p -= lr (g + wd p)
            np.testing.assert_allclose(grouped[k] - plain[k], -LR * WD * w0[k], rtol=1e-4, atol=2e-7, err_msg=k)
            self.assertGreater(np.abs(w0[k]).max(), 0.01)
        # a bias in the decayed group is decayed: the groups decide
        every = step_once(lambda n: [{"params": n.trainable_params(), "weight_decay": WD}])
        np.testing.assert_allclose(every["fc2.bias"] - plain["fc2.bias"], -LR * WD * w0["fc2.bias"], rtol=1e-4,
                                   atol=2e-7)
        # the default weight_decay applies to a group without its own; 0 there: nothing decays
        none = step_once(lambda n: [{"params": n.trainable_params()}])
        for k in plain:
            self.assertTrue(np.array_equal(none[k], plain[k]), k)

    def test_own_rates_and_decays(self):
        # MindSpore's optimizer docstring: [{'params': conv_params, 'weight_decay': 0.01},
        # {'params': no_conv_params, 'lr': 0.01}, {'order_params': net.trainable_params()}]
        w0 = step_once(lambda n: n.trainable_params(), eval_only=True)
        plain = step_once(lambda n: n.trainable_params())
        g = {k: (w0[k] - plain[k]) / LR for k in w0}  # the first step's gradient (same batch, same start)
        keys = []

        def doc_groups(n):
            fc1 = [p for p in n.trainable_params() if p.name.startswith("fc1")]
            fc2 = [p for p in n.trainable_params() if p.name.startswith("fc2")]
            return [{"params": fc1, "weight_decay": 0.1}, {"params": fc2, "lr": 0.05},
                    {"order_params": n.trainable_params()}]
        got = step_once(doc_groups, weight_decay=0.2, keys=keys)
        want = {k: w0[k] - LR * (g[k] + 0.1 * w0[k]) for k in ("fc1.weight", "fc1.bias")}
        want.update({k: w0[k] - 0.05 * (g[k] + 0.2 * w0[k]) for k in ("fc2.weight", "fc2.bias")})
        for k in want:  # SGD: p -= lr_group (g + wd_group p)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-6, err_msg=k)
            self.assertGreater(np.abs(got[k] - plain[k]).max(), 1e-4, k)
        pg = keys[0]["optimizer.param_groups"]  # only the parameters that differ from the optimizer's
        self.assertEqual(sorted(pg), ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"])
        self.assertEqual(pg["fc1.weight"], {"lr_scale": 1.0, "weight_decay": 0.1})
        self.assertEqual(pg["fc2.weight"]["weight_decay"], 0.2)
        self.assertEqual(np.float32(LR * pg["fc2.bias"]["lr_scale"]), np.float32(0.05))
        # per-step rates in a constant ratio to the optimizer's list
        table = np.array(nn.cosine_decay_lr(0.01, LR, 8, 4, 2), np.float32)
        got = step_once(lambda n: [{"params": n.trainable_params()[:2], "lr": table * np.float32(0.25)},
                                   {"params": n.trainable_params()[2:]}], lr=table)
        for k, r in (("fc1.weight", table[0] * np.float32(0.25)), ("fc2.weight", table[0])):
            np.testing.assert_allclose(got[k], w0[k] - r * g[k], rtol=1e-4, atol=1e-6, err_msg=k)
        # every group with its own rate: the optimizer's learning_rate unused, bitwise the groups
        # written with the first group's rate as the optimizer's (3 momentum steps)
        mom = dict(opt=nn.Momentum, steps=3, momentum=0.9)
        a = step_once(lambda n: [{"params": n.trainable_params()[:2], "lr": 0.05},
                                 {"params": n.trainable_params()[2:], "lr": 0.3}], lr=0.123, **mom)
        b = step_once(lambda n: [{"params": n.trainable_params()[:2]},
                                 {"params": n.trainable_params()[2:], "lr": 0.3}], lr=0.05, **mom)
        for k in a:
            self.assertTrue(np.array_equal(a[k], b[k]), k)

    def test_command_line(self):
        y = os.path.join(self.dir, "c.yaml")
        with open(y, "w") as f:
            f.write("model: {name: mlp, hidden: [16]}\n" + pyutil.YAML_BASE % dict(data=pyutil.FASHION, limit=32,
                                                                                   epochs=1, batch=16))
            f.write("optimizer: {name: sgd, lr: 0.5, weight_decay: 0.25, exclude_bias_and_norm: false}\n")
        b = pyutil.tessera_bin()
        rc, out = pyutil.run([b, "train", y, "--set", "optimizer.no_decay_params=[fc1.bias, 'fc2.*']",
                              "--set", "log.progress=off"], self.dir)
        self.assertEqual(rc, 0, out)
        rc, out = pyutil.run([b, "train", y, "--set", "optimizer.no_decay_params=[fc1.bais]"], self.dir)
        self.assertEqual(rc, 2, out)
        self.assertIn("optimizer.no_decay_params: 'fc1.bais' matches no trainable parameter", out)
        # a pipeline of 2 stages: each name is on one rank only, and found there; a typo still refused
        mpi = pyutil.mpirun(2)
        if mpi is None:
            self.skipTest("no mpirun")
        pipe = ["--set", "parallel.mode=data_parallel", "--set", "parallel.pipeline_stages=2", "--set",
                "parallel.micro_batches=2", "--set", "log.progress=off"]
        rc, out = pyutil.run(mpi + [b, "train", y, "--set", "optimizer.no_decay_params=[fc2.bias, fc1.weight]"] + pipe,
                             self.dir)
        self.assertEqual(rc, 0, out)
        rc, out = pyutil.run(mpi + [b, "train", y, "--set", "optimizer.no_decay_params=[fc2.bais]"] + pipe, self.dir)
        self.assertNotEqual(rc, 0, out)
        self.assertIn("'fc2.bais' matches no trainable parameter", out)

    def test_refusals(self):
        net = Net()
        ps = net.trainable_params()
        o = nn.SGD([{"params": ps[:2], "lr": 0.5}, {"params": ps[2:]}], 0.5)  # the same rate: no groups
        self.assertNotIn("optimizer.param_groups", o.keys)
        with self.assertRaisesRegex(ValueError, "not a constant multiple of the optimizer's \\(step 1: "):
            nn.SGD([{"params": ps[:2], "lr": [0.1, 0.2, 0.3]}, {"params": ps[2:]}], [0.5, 0.5, 0.5])
        with self.assertRaisesRegex(ValueError, "not a constant multiple"):
            nn.SGD([{"params": ps[:2], "lr": 0.1}, {"params": ps[2:]}], [0.5, 0.25])
        with self.assertRaisesRegex(ValueError, "LearningRateSchedule \\(WarmUpLR"):
            nn.SGD([{"params": ps[:2], "lr": nn.WarmUpLR(0.1, 5)}, {"params": ps[2:]}], 0.5)
        with self.assertRaisesRegex(ValueError, "beside the optimizer's learning_rate 0"):
            nn.SGD([{"params": ps[:2], "lr": 0.1}, {"params": ps[2:]}], 0.0)
        with self.assertRaisesRegex(ValueError, "grad_centralization"):
            nn.SGD([{"params": ps, "grad_centralization": True}], 0.5)
        with self.assertRaisesRegex(KeyError, "cannot be recognized"):
            nn.SGD([{"params": ps, "momentum": 0.9}], 0.5)
        with self.assertRaisesRegex(RuntimeError, "already exists"):
            nn.SGD([{"params": ps}, {"params": ps[:1]}], 0.5)
        with self.assertRaisesRegex(ValueError, "order_params"):
            nn.SGD([{"params": ps[:2]}, {"params": ps[2:]}, {"order_params": ps[:3]}], 0.5)


if __name__ == "__main__":
    unittest.main()
