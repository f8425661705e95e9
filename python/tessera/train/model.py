"""Model: MindSpore's high-level train/eval over Tessera's C trainer.

Model(network, loss_fn, optimizer, metrics) gathers config keys (the parallel context, the
network's: zoo model keys or recompute segments, the optimizer's, the data set's, the checkpoint
callback's) and creates a ts_trainer: with the config's zoo model for tessera.zoo networks, or with
a model builder that calls the network's construct (ts_trainer_create_custom). Training, the data
pipeline, gradient reduction, checkpoints run in C; Python callbacks are called from it."""
import hashlib
import os
import tempfile

from .. import _C
from .. import context
from .. import tensor as _tensor
from ..context import yaml_value
from ..nn import Cell, Optimizer, _Loss
from ..tensor import Tensor, as_value
from .callback import Callback, ModelCheckpoint, RunContext

_METRICS = {"acc": "top1", "accuracy": "top1", "top_1_accuracy": "top1", "top_5_accuracy": "top5", "loss": "loss"}


class Model:
    """Model(network, loss_fn=None, optimizer=None, metrics=None, amp_level="O0", config=None).
    metrics: names among acc, accuracy, loss, top_1_accuracy, top_5_accuracy. config (Tessera):
    extra config keys {"train.log_every": 10, ...} applied last."""

    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, amp_level="O0", config=None,
                 eval_network=None, loss_scale_manager=None, boost_level="O0"):
        if not isinstance(network, Cell):
            raise TypeError("Model: network must be a tessera.nn.Cell, got %r" % (network,))
        zoo = getattr(network, "_zoo_keys", None)
        if loss_fn is None:
            raise ValueError("Model: loss_fn is required (nn.SoftmaxCrossEntropyWithLogits(sparse=True, "
                             "reduction='mean'))")
        if not isinstance(loss_fn, _Loss):
            raise ValueError("Model: loss_fn must be a tessera.nn loss, got %r" % (loss_fn,))
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise ValueError("Model: optimizer must be a tessera.nn optimizer, got %r" % (optimizer,))
        if optimizer is not None and zoo is None and optimizer.parameters:
            want = {p.name for p in network.trainable_params()}
            have = {getattr(p, "name", None) for p in optimizer.parameters}
            if want - have:
                raise ValueError("%s: Tessera trains every parameter of the network; params lacks %s"
                                 % (type(optimizer).__name__, ", ".join(sorted(want - have)[:5])))
        for m in metrics or ():
            if m not in _METRICS:
                raise ValueError("Model: metric '%s' unknown (expected: %s)" % (m, ", ".join(sorted(_METRICS))))
        lv = {"O0": 0, "O1": 1, "O2": 2, "O3": 3}
        if amp_level not in lv:
            raise ValueError("Model: amp_level: O0, O1, O2 or O3, got %r" % (amp_level,))
        if loss_scale_manager is not None:
            raise ValueError("Model: loss_scale_manager: use config={'train.loss_scale': 'dynamic'}")
        self.network, self.loss_fn, self.optimizer = network, loss_fn, optimizer
        self.metrics = list(metrics or [])
        self.amp = lv[amp_level]
        self.extra = dict(config or {})
        for k, v in self.extra.items():
            context.check_key(k, v)
        self._trainer = None
        self._pairs = None
        self._eval_sig = None

    # ---- config ----
    def _net_keys(self):
        zoo = getattr(self.network, "_zoo_keys", None)
        k = {}
        if zoo is not None:
            k.update(zoo)
            k["model.label_smoothing"] = float(self.loss_fn.smoothing)
        else:
            rec = [p for p, c in self.network.cells_and_names() if c._recompute and p]
            if any(c._recompute for p, c in self.network.cells_and_names() if not p):
                k["model.recompute"] = "full"
            elif rec:
                k["model.recompute"] = "full"
                k["model.recompute_layers"] = rec
            if any(c._stage is not None for _, c in self.network.cells_and_names()):
                raise ValueError("pipeline_stage: Tessera's pipeline layout cuts only the C zoo's models into "
                                 "stages (a model built by a callback, as a Python Cell is, is refused); use a "
                                 "tessera.zoo model with set_auto_parallel_context(pipeline_stages=N)")
        return k

    def _shards(self, ds):
        n = ds.num_shards or 1
        full = context._parallel.get("parallel.full_batch") == "true"
        if ds.num_shards and not full:
            size, rank = context.get_group_size(), context.get_rank()
            if ds.num_shards != size or ds.shard_id != rank:
                raise ValueError("data set: num_shards %d / shard_id %d: Tessera shards the data over the job's %d "
                                 "ranks itself (num_shards=get_group_size(), shard_id=get_rank())"
                                 % (ds.num_shards, ds.shard_id, size))
        return 1 if full else n

    def _eval_keys(self, ds):
        k = ds.keys(train=False)
        k["train.eval_batch_size"] = ds.batch_size * self._shards(ds)
        return k

    def _keys(self, epochs, train_ds, eval_ds, callbacks):
        k = {}
        k.update(self._net_keys())
        if self.optimizer is not None:
            k.update(self.optimizer.keys)
        k.update(train_ds.keys(train=True))
        k["train.batch_size"] = train_ds.batch_size * self._shards(train_ds)
        k["train.epochs"] = int(epochs)
        k["train.eval_every"] = -1
        if self.amp:
            k["train.amp_level"] = "O%d" % self.amp
        k["log.progress"] = "off"
        if eval_ds is None:  # the training set's own test split, as the trainer reads it
            eval_ds = _test_of(train_ds)
        if eval_ds is not None:
            k.update(self._eval_keys(eval_ds))
        for cb in callbacks:
            if isinstance(cb, ModelCheckpoint):
                k.update(cb.keys())
        k.update(self.extra)
        return k

    def _create(self, keys, resume=None):
        pairs = context.config_pairs() + [(k, yaml_value(v)) for k, v in keys.items()]
        if resume:
            pairs.append(("checkpoint.resume", yaml_value(resume)))
        zoo = getattr(self.network, "_zoo_keys", None) is not None
        t = _C.Trainer(pairs, None if zoo else self._build)
        self.network.__dict__["_trainer"] = t
        pending = self.network.__dict__.pop("_pending_params", None)
        if pending:
            from ..checkpoint import load_param_into_net
            load_param_into_net(self.network, pending)
        self._trainer, self._keys_used = t, keys
        return t

    def _build(self, b, x, targets):
        prev = _tensor._current[0]
        _tensor._current[0] = b
        try:
            self.network.set_train(bool(b.training))
            logits = self.network(Tensor(b, x))
            loss = self.loss_fn(logits, Tensor(b, targets)) if targets is not None else None
            return as_value(logits), (as_value(loss) if loss is not None else None)
        finally:
            _tensor._current[0] = prev

    # ---- train / eval ----
    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False, sink_size=-1, initial_epoch=0,
              valid_dataset=None):
        """Trains for `epoch` epochs (train.epochs) on train_dataset; callbacks: Callback objects
        and ModelCheckpoint. A Python exception raised in a callback stops training and is
        re-raised here."""
        cbs = _flatten(callbacks)
        keys = self._keys(epoch, train_dataset, valid_dataset, cbs)
        t = self._create(keys)
        info = t.info()
        spe, epochs = info["steps_per_epoch"], int(epoch)
        last = {"loss": None}
        net = self.network

        def args(step, ep, loss, s=None):
            return dict(cur_step_num=step, cur_epoch_num=ep + 1, batch_num=spe, epoch_num=epochs, net_outputs=loss,
                        step_info=s, train_network=net, rank=info["rank"])

        user = [c for c in cbs if isinstance(c, Callback) and not isinstance(c, ModelCheckpoint)]
        if user:
            def step_end(s):
                last["loss"] = s["loss"]
                last["step"] = s["step"]
                rc = RunContext(args(s["step"], s["epoch"], s["loss"], s), t)
                for c in user:
                    c.on_train_step_end(rc)

            def epoch_end(e):
                rc = RunContext(args(last.get("step", 0), e, last["loss"]), t)
                for c in user:
                    c.on_train_epoch_end(rc)

            def train_end():
                rc = RunContext(args(last.get("step", 0), epochs - 1, last["loss"]), t)
                for c in user:
                    c.on_train_end(rc)

            t.add_callback(step_end=step_end, epoch_end=epoch_end, train_end=train_end)
            rc0 = RunContext(args(0, 0, None), t)
            for c in user:
                c.on_train_begin(rc0)
        t.fit()

    def fit(self, epoch, train_dataset, valid_dataset=None, valid_frequency=1, callbacks=None,
            dataset_sink_mode=False, valid_dataset_sink_mode=False, sink_size=-1, initial_epoch=0):
        self.train(epoch, train_dataset, callbacks=callbacks, valid_dataset=valid_dataset)
        return self.eval(valid_dataset) if valid_dataset is not None else None

    def eval(self, valid_dataset, callbacks=None, dataset_sink_mode=False):
        """Evaluates the current parameters on valid_dataset: {metric name: value} for the
        metrics given to Model (acc/accuracy/top_1_accuracy as a fraction, top_5_accuracy, loss)."""
        ek = self._eval_keys(valid_dataset)
        t = self._trainer
        if t is None:  # an untrained model: its initial parameters
            keys = self._keys(1, valid_dataset, valid_dataset, [])
            t = self._create(keys)
        elif any(self._keys_used.get(k) != v for k, v in ek.items()):
            # another evaluation set: a trainer for it, resumed from the current state
            keys = dict(self._keys_used)
            for k in list(keys):
                if k.startswith("data.test_") or k == "train.eval_batch_size":
                    del keys[k]
            keys.update(ek)
            h = hashlib.sha1(repr(sorted(keys.items())).encode() + os.getcwd().encode()).hexdigest()[:12]
            path = os.path.join(tempfile.gettempdir(), "tessera-eval-%d-%s.safetensors" % (os.getuid(), h))
            t.save(path)
            _C.barrier()  # rank 0 has written it before any rank reads it
            t = self._create(keys, resume=path)
            _C.barrier()  # every rank has read it
            if context.get_rank() == 0:
                os.unlink(path)
        r = t.evaluate()
        out = {}
        for m in self.metrics or ["acc"]:
            out[m] = r[_METRICS[m]]
        return out

    @property
    def train_network(self):
        return self.network


def _flatten(cbs):
    if cbs is None:
        return []
    return list(cbs) if isinstance(cbs, (list, tuple)) else [cbs]


def _test_of(ds):
    """The training set's test split with the same transforms and batch (None where the source
    has no test split of its own)."""
    import copy
    d = copy.copy(ds)
    d.usage = "test"
    d.num_samples = None
    random = ("random_crop", "hflip", "vflip", "random_erasing")
    d.ops = [op for op in ds.ops if not any(i["name"] in random for i in op.items(True))]
    try:
        d.keys(train=False)
    except ValueError:
        return None
    return d
