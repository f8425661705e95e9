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
from .._validator import check_bool, check_int, describe
from .callback import ModelCheckpoint, RunContext, _as_callback

_METRICS = {"acc": "top1", "accuracy": "top1", "top_1_accuracy": "top1", "top_5_accuracy": "top5", "loss": "loss"}


def _metric_specs(metrics):
    """Model's metrics as [(name, trainer figure or None, metric object or None)]: a set / list of
    names (acc, accuracy, top_1_accuracy, top_5_accuracy, loss), or MindSpore's dict {name: Metric
    object or one of those names}. An object of a built-in class that is one of the trainer's
    figures (Accuracy, Top1/Top5CategoricalAccuracy, Loss) is read from the trainer's evaluation;
    any other (Precision, F1, a user's Metric subclass: clear/update/eval) is updated with the
    logits of each evaluation batch."""
    from .. import metrics as M
    if metrics is None:
        return []
    if isinstance(metrics, str):
        raise ValueError("Model: metrics must be a set of names or a dict {name: Metric}, got the string %r (write "
                         "{%r})" % (metrics, metrics))
    out = []
    items = metrics.items() if isinstance(metrics, dict) else ((m, m) for m in metrics)
    for name, m in items:
        if isinstance(m, str):
            if m not in _METRICS:
                raise ValueError("Model: metric '%s' unknown (expected: %s, or a Metric object in a dict: "
                                 "{'Accuracy': nn.Accuracy()})" % (m, ", ".join(sorted(_METRICS))))
            out.append((name, _METRICS[m], None))
        elif all(callable(getattr(m, f, None)) for f in ("clear", "update", "eval")):
            builtin = type(m) in (M.Accuracy, M.TopKCategoricalAccuracy, M.Top1CategoricalAccuracy,
                                  M.Top5CategoricalAccuracy, M.Loss)
            out.append((name, m._key if builtin and m._key else None, m))
        else:
            raise ValueError("Model: metrics[%r] is %r: expected a metric name or a Metric object (clear, update, "
                             "eval)" % (name, m))
    return out



def _own_parameters(net):
    """Each of the network's Parameters knows the network (weakly): Parameter.asnumpy() reads its
    trainer's current values."""
    import weakref
    ref = weakref.ref(net)
    for _, p in net.parameters_and_names():
        p.__dict__["_owner"] = ref

class Model:
    """Model(network, loss_fn=None, optimizer=None, metrics=None, amp_level="O0", config=None).
    metrics: names among acc, accuracy, loss, top_1_accuracy, top_5_accuracy. config (Tessera):
    extra config keys {"train.log_every": 10, ...} applied last."""

    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, amp_level="O0", config=None,
                 eval_network=None, loss_scale_manager=None, boost_level="O0", gradient_accumulation_steps=1,
                 eval_indexes=None, keep_batchnorm_fp32=None):
        if not isinstance(network, Cell):
            raise TypeError("Model: network must be a tessera.nn.Cell, got %r" % (network,))
        zoo = getattr(network, "_zoo_keys", None)
        from .. import nn as _nn
        self._predict_only = False
        if loss_fn is None and optimizer is None and not metrics and not isinstance(network, _nn.WithLossCell):
            # MindSpore's Model(network) for inference: predict / infer_predict_layout only. The
            # trainer still builds a training graph: with the sparse cross-entropy, never trained.
            self._predict_only = True
            loss_fn = _nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        if loss_fn is None:  # MindSpore's form where the network outputs the loss: nn.WithLossCell
            network, loss_fn = _nn._unwrap_with_loss(network, metrics)
            zoo = getattr(network, "_zoo_keys", None)
        specs = _metric_specs(metrics)
        _nn._check_loss_fn(loss_fn, zoo is not None, ["loss"] if any(s[1] == "loss" for s in specs) else [])
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise ValueError("Model: optimizer must be a tessera.nn optimizer, got %r" % (optimizer,))
        if optimizer is not None and zoo is None and optimizer.parameters:
            want = {p.name for p in network.trainable_params()}
            have = {getattr(p, "name", None) for p in optimizer.parameters}
            if want - have:
                raise ValueError("%s: Tessera trains every parameter of the network; params lacks %s"
                                 % (type(optimizer).__name__, ", ".join(sorted(want - have)[:5])))
        lv = {"O0": 0, "O1": 1, "O2": 2, "O3": 3}
        if amp_level not in lv:
            raise ValueError("Model: amp_level: O0, O1, O2 or O3, got %r" % (amp_level,))
        net_amp = getattr(network, "_amp_level", None)  # amp.auto_mixed_precision(network, level)
        if net_amp and amp_level != "O0" and net_amp != amp_level:
            raise ValueError("Model: amp_level=%r, but amp.auto_mixed_precision marked the network %r (Tessera's "
                             "amp applies to the whole network: give one level)" % (amp_level, net_amp))
        if amp_level == "O0" and net_amp:
            amp_level = net_amp
        from ..amp import LossScaleManager
        if loss_scale_manager is not None and not isinstance(loss_scale_manager, LossScaleManager):
            raise TypeError("Model: loss_scale_manager must be a FixedLossScaleManager or DynamicLossScaleManager, "
                            "got %r" % (loss_scale_manager,))
        ols = getattr(optimizer, "loss_scale", 1.0) if optimizer is not None else 1.0
        if ols != 1.0:
            # MindSpore: the optimizer's loss_scale divides the gradients, which only a
            # FixedLossScaleManager(S, drop_overflow_update=False) leaves scaled (by S)
            from ..amp import FixedLossScaleManager
            pair = isinstance(loss_scale_manager, FixedLossScaleManager) and \
                not loss_scale_manager.drop_overflow_update and loss_scale_manager.loss_scale == ols
            if not pair:
                m = loss_scale_manager
                got = "None" if m is None else "%s(%g%s)" % (type(m).__name__, m.loss_scale, ", drop_overflow_update=%s"
                                                             % m.drop_overflow_update if hasattr(m, "drop_overflow_update")
                                                             else "")
                raise ValueError("Model: %s(loss_scale=%g) divides the gradients by %g, which MindSpore pairs with "
                                 "FixedLossScaleManager(%g, drop_overflow_update=False) only (the trainer then removes "
                                 "the scale once); got loss_scale_manager=%s: give the optimizer loss_scale=1.0, or "
                                 "that manager" % (type(optimizer).__name__, ols, ols, ols, got))
        if boost_level not in ("O0", None):
            raise ValueError("Model: boost_level=%r is not supported (O0 only)" % (boost_level,))
        if eval_network is not None or eval_indexes is not None:
            raise ValueError("Model: eval_network / eval_indexes are not supported (evaluation runs the network's "
                             "own forward graph with the loss_fn)")
        if keep_batchnorm_fp32 is not None and not keep_batchnorm_fp32:
            raise ValueError("Model: keep_batchnorm_fp32=False is not supported (batch norm statistics and gamma/beta "
                             "stay f32 at every amp level but O3)")
        if isinstance(gradient_accumulation_steps, bool) or not isinstance(gradient_accumulation_steps, int) or \
                gradient_accumulation_steps < 1:
            raise ValueError("Model: gradient_accumulation_steps must be an int >= 1, got %r"
                             % (gradient_accumulation_steps,))
        self.network, self.loss_fn, self.optimizer = network, loss_fn, optimizer
        self.metrics = specs
        self.amp = lv[amp_level]
        self.amp_dtype = getattr(network, "_amp_dtype", None)
        self.loss_scale_manager = loss_scale_manager
        self.accum = gradient_accumulation_steps
        self.extra = dict(config or {})
        for k, v in self.extra.items():
            context.check_key(k, v)
        self._trainer = None
        self._in_fit = False
        self._trained_epochs = 0  # epochs trained so far (a second train continues)
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
            rules = _stage_rules(self.network, self._pipeline_stages())
            if rules:
                k["parallel.stages"] = rules
        return k

    def _pipeline_stages(self):
        """The job's pipeline stages as set (1 under auto_parallel: its search picks the stages and
        their cut itself, the cells' pipeline_stage is not used)."""
        mode = self.extra.get("parallel.mode", context.get_auto_parallel_context("parallel_mode"))
        if mode == "auto_parallel":
            return 1
        p = self.extra.get("parallel.pipeline_stages", context.get_auto_parallel_context("pipeline_stages"))
        return int(p) if p is not None else 1

    def _shards(self, ds):
        n = ds.num_shards or 1
        full = bool(context.get_auto_parallel_context("full_batch"))  # hybrid_parallel: True unless set
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
        if self.accum > 1:  # MindSpore's: each micro-step one batch of the data set, the update every accum
            k["train.micro_batch_size"] = k["train.batch_size"]
            k["train.batch_size"] *= self.accum
        k["train.epochs"] = int(epochs)
        k["train.eval_every"] = -2  # MindSpore's train evaluates nothing (Model.eval / fit do)
        every = getattr(self, "_fit_eval_every", None)  # Model.fit's valid_frequency (epochs)
        if every == 1:
            k["train.eval_every"] = 0  # at every epoch's end (and the last step)
        elif every:
            spe = train_ds.get_dataset_size() // self.accum  # this shard's batches per epoch: the steps
            k["train.eval_every"] = every * spe
        if self.amp:
            k["train.amp_level"] = "O%d" % self.amp
            if self.amp_dtype:
                k["train.amp_dtype"] = self.amp_dtype
        if self.loss_scale_manager is not None:
            k.update(self.loss_scale_manager.keys())
        from ..profiler import active_keys
        k.update(active_keys())
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
        size = context.get_group_size()
        mode = dict(pairs).get("parallel.mode", '"stand_alone"').strip('"')
        if size > 1 and mode == "stand_alone":
            # MindSpore would train `size` independent copies (each on the whole data, writing the
            # same checkpoints); `tessera train` on several ranks defaults to data_parallel instead
            raise ValueError("Model: the job has %d processes (mpirun -n %d) but parallel_mode is stand_alone%s: each "
                             "would train its own copy; set ms.set_auto_parallel_context(parallel_mode="
                             "ms.ParallelMode.DATA_PARALLEL, gradients_mean=True) (or another layout), or run one "
                             "process" % (size, size, "" if "parallel.mode" in dict(pairs) else " (not set)"))
        if resume:
            pairs.append(("checkpoint.resume", yaml_value(resume)))
        zoo = getattr(self.network, "_zoo_keys", None) is not None
        try:
            t = _C.Trainer(pairs, None if zoo else self._build)
        except ValueError as e:  # the library names config keys: say which Python argument set each
            raise ValueError(_python_names(str(e))) from None
        plan = t.info()["plan"]  # auto_parallel: the searched plan, said once by rank 0
        if plan and plan != getattr(self, "parallel_plan", None) and t.info()["rank"] == 0:
            print("tessera: %s" % plan, flush=True)
        self.parallel_plan = plan or None
        old = self.network.__dict__.get("_trainer")
        self.network.__dict__["_trainer"] = t
        _own_parameters(self.network)
        from ..nn import _collect_pending
        pending = _collect_pending(self.network)
        if old is not None and old is not t and resume is None and old is not self._trainer:
            # the network trained (or loaded) through another Model: its parameters are the
            # network's, as in MindSpore, so this trainer starts from their current values
            carried = dict(old.params())  # views into the old store, copied by the load below
            carried.update(pending)  # values set or loaded since
            pending = carried
        if pending:
            from ..checkpoint import load_param_into_net
            load_param_into_net(self.network, pending)
        self._trainer, self._keys_used = t, keys
        self._lr_cover(t)
        return t

    def _lr_cover(self, t, steps=0, next_step=False):
        """An optimizer whose learning_rate is a LearningRateSchedule: the trainer's table of rates
        (ts_trainer_set_lr_table) made to cover the run's steps, and `steps` (a run about to be
        lengthened), or with next_step the trainer's next step (TrainOneStepCell's and
        value_and_grad's steps, which no run length bounds; the trainer asked only then)."""
        cell = getattr(self.optimizer, "_lr_cell", None) if self.optimizer is not None else None
        if cell is None:
            return
        if next_step:
            steps = t.info()["step"] + 1
        need = max(int(steps), t.info()["lr_steps"], 1)
        have = self.__dict__.get("_lr_have")
        if have and have[0] is t and have[1] >= need:
            return
        if have and have[0] is t:
            need = max(need, 2 * have[1])  # grown by doubling: a step-by-step caller costs O(steps) in all
        t.set_lr_table(cell.rates(need))
        self.__dict__["_lr_have"] = (t, need)

    def _continue(self, t, epochs):
        """t.continue_epochs(epochs), a LearningRateSchedule's table lengthened first."""
        info = t.info()
        spe = max(info["steps_per_epoch"], 1)
        self._lr_cover(t, (info["step"] + epochs * spe + spe - 1) // spe * spe)
        t.continue_epochs(epochs)

    def _resumed(self, keys, strict=True):
        """A trainer for keys resumed from the current trainer's state (a checkpoint in $TMPDIR,
        removed once every rank has read it). strict=False: another configuration (its config
        hash differs; the library warns)."""
        h = hashlib.sha1(repr(sorted(keys.items())).encode() + os.getcwd().encode()).hexdigest()[:12]
        # each rank its own file (where the layout cuts the model, rank 0 writes and the save copies
        # it to the others: ts_trainer_save), so ranks with other checkpoint keys, other working
        # directories or no shared $TMPDIR all find theirs
        path = os.path.join(tempfile.gettempdir(), "tessera-eval-%d-%s-r%d.safetensors"
                            % (os.getuid(), h, context.get_rank()))
        self._trainer.save(path)
        if not strict:
            keys = dict(keys)
            keys["checkpoint.strict"] = False
        try:
            t = self._create(keys, resume=path)
        finally:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        return t

    def _build(self, b, x, targets):
        prev = _tensor._current[0]
        _tensor._current[0] = b
        try:
            self.network.set_train(bool(b.training))
            logits = self.network(Tensor(b, x))
            loss = self.loss_fn(logits, Tensor(b, targets)) if targets is not None else None
            from ..nn import _loss_value
            return as_value(logits), (_loss_value(loss, self.loss_fn) if loss is not None else None)
        finally:
            _tensor._current[0] = prev

    # ---- train / eval ----
    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False, sink_size=-1, initial_epoch=0,
              valid_dataset=None):
        """Trains for `epoch` epochs (train.epochs) on train_dataset; callbacks: Callback objects
        and ModelCheckpoint. A Python exception raised in a callback stops training and is
        re-raised here. dataset_sink_mode=True (every step is one compiled graph fed by the C
        pipeline in either mode) calls the step callbacks once per sink, as MindSpore does: with
        sink_size=-1 a sink is an epoch (a pass over the data); with sink_size=K an "epoch" is K
        steps (train.steps = epoch x K, the data running on across them)."""
        if self._predict_only:
            raise ValueError("Model.train: Model(network) without loss_fn and optimizer only predicts; give "
                             "Model(network, loss_fn, optimizer)")
        where = "Model.fit" if getattr(self, "_in_fit", False) else "Model.train"
        epochs = check_int(epoch, "epoch", where, 1)
        _check_dataset(train_dataset, "train_dataset", where)
        if valid_dataset is not None:
            _check_dataset(valid_dataset, "valid_dataset", where)
        cbs = _check_callbacks(callbacks, where)
        dataset_sink_mode = check_bool(dataset_sink_mode, "dataset_sink_mode", where)
        sink_size = check_int(sink_size, "sink_size", where, 1, also=(-1,))
        initial_epoch = check_int(initial_epoch, "initial_epoch", where, 0)
        if sink_size > 0 and not dataset_sink_mode:
            raise ValueError("Model.train: sink_size=%d needs dataset_sink_mode=True (MindSpore ignores it "
                             "otherwise)" % sink_size)
        if initial_epoch:
            raise ValueError("Model.train: initial_epoch is not supported (a second train continues where the "
                             "first stopped; a checkpoint resumes with checkpoint.resume)")
        sink = sink_size if dataset_sink_mode else 0  # 0: per-step callbacks; -1: per epoch; K: per K steps
        keys = self._keys(epoch, train_dataset, valid_dataset, cbs)
        if sink > 0:
            if self._trainer is not None:
                raise ValueError("Model.train: sink_size on a Model that has trained already is not supported (make "
                                 "a new Model, or train without sink_size)")
            keys["train.steps"] = epochs * sink
        done = self._trained_epochs
        t = self._trainer
        if t is not None and done:
            # MindSpore's second train continues the same network: parameters, optimizer state,
            # step count and data order carried over (as one train of the summed epochs)
            keys["train.epochs"] = done + epochs
            same = {k: v for k, v in keys.items() if k != "train.epochs"} == \
                {k: v for k, v in self._keys_used.items() if k != "train.epochs"}
            if same:  # the same run, lengthened
                t.clear_callbacks()
                self._continue(t, epochs)
                self._keys_used = keys
            else:  # another data set or config: a trainer resumed from the state reached
                t = self._resumed(keys, strict=False)
                self._continue(t, epochs)  # its steps per epoch may differ: `epochs` from here
        elif t is not None and keys == self._keys_used:  # built by infer_train_layout for these keys
            t.clear_callbacks()
        else:
            t = self._create(keys)
        self._trained_epochs = done + epochs
        info = t.info()
        spe = info["steps_per_epoch"]
        base_step = info["step"]
        # the trainer's epoch index at this call's first step (a run stopped inside an epoch
        # continues in it); this call's epochs count from it
        last = {"loss": None, "base_epoch": None}
        net = self.network

        def args(step, ep, loss, s=None):
            # this call's steps and epochs (MindSpore counts them per train call)
            if sink > 0:  # an epoch is `sink` steps
                return dict(cur_step_num=step - base_step, cur_epoch_num=max(1, -(-(step - base_step) // sink)),
                            batch_num=sink, epoch_num=epochs, net_outputs=loss, step_info=s, train_network=net,
                            rank=info["rank"])
            b = last["base_epoch"] if last["base_epoch"] is not None else ep
            return dict(cur_step_num=step - base_step, cur_epoch_num=ep - b + 1, batch_num=spe,
                        epoch_num=epochs, net_outputs=loss, step_info=s, train_network=net, rank=info["rank"],
                        eval_results=dict(last.get("eval") or {}))

        user = [c for c in cbs if not isinstance(c, ModelCheckpoint)]
        if user:
            def step_end(s):
                if last["base_epoch"] is None:
                    last["base_epoch"] = s["epoch"]
                last["loss"] = s["loss"]
                last["step"] = s["step"]
                rc = RunContext(args(s["step"], s["epoch"], s["loss"], s), t)
                n = s["step"] - base_step
                if sink == -1 and (s["batch"] + 1) % spe != 0:  # once per sink: the epoch's last step
                    return
                if sink > 0 and n % sink != 0:
                    return
                for c in user:
                    c.on_train_step_end(rc)
                if sink > 0:  # the sink's end is the epoch's
                    for c in user:
                        c.on_train_epoch_end(rc)

            def epoch_end(e):
                if sink > 0:
                    return
                rc = RunContext(args(last.get("step", base_step), e, last["loss"]), t)
                for c in user:
                    c.on_train_epoch_end(rc)
                last["eval"] = None  # an epoch's evaluation (Model.fit) is seen by that epoch's end only

            def eval_end(r):
                # Model.fit's evaluation, run by the trainer before the epoch's end: MindSpore's
                # eval_results (the Model's metric names, and eval_loss) for on_eval_end and then
                # on_train_epoch_end (EarlyStopping reads them there)
                res = {name: r[key] for name, key, _ in (self.metrics or []) if key}
                res["eval_loss"] = r["loss"]
                last["eval"] = res
                rc = RunContext(args(last.get("step", base_step), r["epoch"], last["loss"]), t)
                for c in user:
                    f = getattr(c, "on_eval_end", None)
                    if callable(f):
                        f(rc)

            def train_end():
                b = last["base_epoch"] or 0
                rc = RunContext(args(last.get("step", base_step), b + epochs - 1, last["loss"]), t)
                for c in user:
                    c.on_train_end(rc)

            t.add_callback(step_end=step_end, epoch_end=epoch_end, eval_end=eval_end, train_end=train_end)
            rc0 = RunContext(args(base_step, 0, None), t)
            for c in user:
                c.on_train_begin(rc0)
        t.fit()

    def fit(self, epoch, train_dataset, valid_dataset=None, valid_frequency=1, callbacks=None,
            dataset_sink_mode=False, valid_dataset_sink_mode=False, sink_size=-1, initial_epoch=0):
        """train, evaluating valid_dataset every valid_frequency epochs (the trainer's evaluation
        of it after those epochs' last steps; the callbacks' on_eval_end... are the trainer's
        eval records), then returns eval(valid_dataset) of the final parameters."""
        check_int(epoch, "epoch", "Model.fit", 1)
        _check_dataset(train_dataset, "train_dataset", "Model.fit")
        if valid_dataset is not None:
            _check_dataset(valid_dataset, "valid_dataset", "Model.fit")
        valid_frequency = check_int(valid_frequency, "valid_frequency", "Model.fit", 1)
        check_bool(valid_dataset_sink_mode, "valid_dataset_sink_mode", "Model.fit")
        extra = None
        if valid_dataset is not None and valid_frequency < epoch:
            if sink_size > 0 and dataset_sink_mode:
                raise ValueError("Model.fit: valid_frequency with sink_size is not supported (evaluate at the end: "
                                 "valid_frequency >= epoch)")
            extra = valid_frequency
        self._fit_eval_every = extra
        self._in_fit = True
        try:
            self.train(epoch, train_dataset, callbacks=callbacks, valid_dataset=valid_dataset,
                       dataset_sink_mode=dataset_sink_mode, sink_size=sink_size, initial_epoch=initial_epoch)
        finally:
            self._fit_eval_every = None
            self._in_fit = False
        return self.eval(valid_dataset) if valid_dataset is not None else None

    def eval(self, valid_dataset, callbacks=None, dataset_sink_mode=False):
        """Evaluates the current parameters on valid_dataset: {metric name: value} for the
        metrics given to Model (acc/accuracy/top_1_accuracy as a fraction, top_5_accuracy, loss).
        dataset_sink_mode changes nothing (the C pipeline feeds either way); callbacks are refused."""
        if self._predict_only:
            raise ValueError("Model.eval: Model(network) without loss_fn only predicts; give Model(network, loss_fn, "
                             "optimizer, metrics=...)")
        _check_dataset(valid_dataset, "valid_dataset", "Model.eval")
        if _check_callbacks(callbacks, "Model.eval"):
            raise ValueError("Model.eval: callbacks are not supported (the returned dict holds the metrics)")
        check_bool(dataset_sink_mode, "dataset_sink_mode", "Model.eval")
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
            t = self._resumed(keys)
        specs = self.metrics or [("acc", "top1", None)]
        r = t.evaluate() if any(key for _, key, _ in specs) else {}
        out = {}
        for name, key, m in specs:
            if key:
                out[name] = r[key]
        py = [(name, m) for name, key, m in specs if not key]
        if py:
            out.update(self._eval_metrics(t, valid_dataset, py))
        return {name: out[name] for name, _, _ in specs}

    def _eval_metrics(self, t, ds, metrics):
        """Metric objects computed here: each batch of ds forward through the evaluation graph
        (Model.predict's), update(logits, labels) with Tensors of values, then eval()."""
        import numpy as np
        if context.get_group_size() > 1:
            raise ValueError("Model.eval: metrics %s are computed in Python from each batch's logits, on one process "
                             "only; on %d ranks use Accuracy, Top1/Top5CategoricalAccuracy or Loss (the trainer's "
                             "figures, over every rank)" % (", ".join(repr(n) for n, _ in metrics),
                                                            context.get_group_size()))
        for _, m in metrics:
            m.clear()
        n = 0
        for x, y in ds.create_tuple_iterator():
            logits = t.forward(np.ascontiguousarray(x))
            for _, m in metrics:
                m.update(Tensor(logits), Tensor(np.asarray(y)))
            n += 1
        if n == 0:
            raise ValueError("Model.eval: the evaluation data set has no batches")
        return {name: m.eval() for name, m in metrics}

    def predict(self, *predict_data):
        """The network's output (logits, numpy) on predict_data: a Tensor or numpy array of
        samples of the network's input shape and dtype, run through the evaluation graph with
        the current parameters (under a layout that cuts the model, every rank gives the same
        samples). The Model must have a trainer: after train, eval, or load_distributed_checkpoint
        into its network."""
        if len(predict_data) != 1:
            raise ValueError("Model.predict: one input (the network's), got %d" % len(predict_data))
        x = self._input(predict_data[0], "Model.predict")
        return self._need_trainer("predict", x).forward(x)

    @staticmethod
    def _input(x, where="Model.predict", name="predict_data"):
        """A Tensor or numpy array (or nested lists of numbers) as a contiguous numpy array."""
        import numpy as np
        if x is None or isinstance(x, (str, bytes, dict, bool)) or (not hasattr(x, "asnumpy") and not hasattr(
                x, "__array__") and not isinstance(x, (list, tuple))):
            raise TypeError("For '%s', the '%s' must be a Tensor or a numpy array, but got %s."
                            % (where, name, describe(x)))
        a = np.ascontiguousarray(x.asnumpy() if hasattr(x, "asnumpy") else x)
        if a.dtype.kind not in "biuf":
            raise TypeError("For '%s', the '%s' must hold numbers, but got an array of dtype %s."
                            % (where, name, a.dtype))
        return a

    def _need_trainer(self, what, x=None):
        """The trainer; none yet and x given (samples): built for x's sample shape (the network's
        parameters as initialised, or as loaded into it)."""
        t = self._trainer or getattr(self.network, "_trainer", None)
        if t is None and x is not None:
            import numpy as np
            from ..dataset import GeneratorDataset
            from .one_step import _OneBatch
            if x.ndim < 1 or len(x) < 1:
                raise ValueError("Model.%s: expected a batch of samples, got an array of shape %s" % (what, x.shape))
            size, rank = context.get_group_size(), context.get_rank()
            mode = context.get_auto_parallel_context("parallel_mode")
            shard = size > 1 and mode != "stand_alone" and not context.get_auto_parallel_context("full_batch")
            y = np.zeros(len(x), np.int32)  # labels only shape the training graph built beside
            data = GeneratorDataset(_OneBatch(x, y, size if shard else 1), ["data", "label"], shuffle=False,
                                    **(dict(num_shards=size, shard_id=rank) if shard else {})).batch(len(x))
            keys = self._keys(1, data, None, [])
            keys["train.eval_batch_size"] = len(x)
            t = self._create(keys)
        if t is None:
            raise ValueError("Model.%s: the network has not been built yet: train or eval it first, or give the "
                             "samples (Tessera builds the network for their shape)" % what)
        return t

    @staticmethod
    def _layout_dict(t):
        # MindSpore's layout list: [device matrix, tensor map, slice shape, field size, uniform split,
        # optimizer shard group]
        return {k: [dev, tm, list(sl), 0, True, ""] for k, (dev, tm, sl, _) in t.layouts().items()}

    def infer_train_layout(self, train_dataset, dataset_sink_mode=True, sink_size=-1):
        """{parameter name: [device matrix, tensor map, slice shape, field size, uniform split,
        optimizer shard group]} of the training network under the parallel context, as
        MindSpore returns it (the tensor map counting device axes from the right, -1
        replicated). Builds the trainer train() would (the next train uses it)."""
        _check_dataset(train_dataset, "train_dataset", "Model.infer_train_layout")
        if self._trainer is None:
            self._create(self._keys(1, train_dataset, None, []))
        return self._layout_dict(self._trainer)

    def infer_predict_layout(self, *predict_data):
        """The parameters' layouts of the network for prediction (infer_train_layout's form):
        Tessera predicts with the training network's layout, so this is the trained (or
        evaluated) network's."""
        x = self._input(predict_data[0], "Model.infer_predict_layout") if predict_data else None
        return self._layout_dict(self._need_trainer("infer_predict_layout", x))

    @property
    def train_network(self):
        return self.network


def _stage_rules(net, P):
    """parallel.stages rules (cell path -> stage) from the cells' pipeline_stage, as MindSpore
    assigns them: a cell's operators are on its stage; a sub-cell inherits its parent's stage
    unless it sets its own. A rule is written for each largest subtree on one stage; operators of
    a cell whose subtree spans stages (and of cells no staged cell contains) follow their inputs.
    None when no cell sets a stage or the job has no pipeline (pipeline_stages 1: ignored, as in
    MindSpore). ValueError for a stage outside 0..P-1 or a stage no cell is on."""
    eff, explicit, kids = {}, {}, {}

    def walk(path, cell, inherited):
        s = cell._stage if cell._stage is not None else inherited
        eff[path] = s
        if cell._stage is not None:
            explicit[path] = cell._stage
        kids[path] = [(path + "." + k if path else k, c) for k, c in cell._cells.items()]
        for p, c in kids[path]:
            walk(p, c, s)

    walk("", net, None)
    if not explicit or P <= 1:
        return None
    for path, s in explicit.items():
        if s >= P:
            raise ValueError("pipeline_stage: cell '%s' is on stage %d, but set_auto_parallel_context("
                             "pipeline_stages=%d) has stages 0..%d" % (path or type(net).__name__, s, P, P - 1))
    missing = sorted(set(range(P)) - {s for s in eff.values() if s is not None})
    if missing:
        raise ValueError("pipeline_stage: no cell is on stage %s of the %d pipeline stages (every stage needs "
                         "cells: set cell.pipeline_stage on the network's cells)"
                         % (", ".join(str(m) for m in missing), P))
    rules = {}

    def subtree(path):
        yield eff[path]
        for p, _ in kids[path]:
            yield from subtree(p)

    def emit(path):
        st = set(subtree(path))
        if path and len(st) == 1 and eff[path] is not None:
            rules[path] = eff[path]
            return
        for p, _ in kids[path]:
            emit(p)

    emit("")
    return rules


# config keys the Model sets -> the Python argument that set them (for the library's messages)
_PY_ARGS = [
    ("train.batch_size", "the data set's batch(n) (x num_shards; x gradient_accumulation_steps)"),
    ("train.micro_batch_size", "the data set's batch(n) with gradient_accumulation_steps"),
    ("train.eval_batch_size", "the evaluation data set's batch(n)"),
    ("train.epochs", "Model.train's epoch"),
    ("train.steps", "Model.train's epoch x sink_size"),
    ("train.amp_level", "Model's amp_level / amp.auto_mixed_precision"),
    ("train.loss_scale", "Model's loss_scale_manager"),
    ("optimizer.lr", "the optimizer's learning_rate"),
    ("optimizer.schedule.values", "the optimizer's learning_rate (a list: one rate per step)"),
    ("optimizer.", "the optimizer's arguments"),
    ("data.train_limit", "the data set's num_samples"),
    ("data.", "the data set's arguments"),
    ("checkpoint.", "ModelCheckpoint / CheckpointConfig"),
    ("parallel.", "set_auto_parallel_context"),
    ("model.", "the network"),
]


def _python_names(msg):
    """The library's message with the Python arguments behind the config keys it names."""
    seen = []
    for key, arg in _PY_ARGS:
        if key in msg and arg not in seen and not any(k != key and k.startswith(key) and a in seen for k, a in _PY_ARGS):
            seen.append(arg)
    return msg + (" [in Python: %s]" % "; ".join(seen) if seen else "")


def _check_dataset(d, name, where):
    """A tessera.dataset data set (a MindSpore-shaped one: keys() for the trainer, batch_size)."""
    if d is None or not (callable(getattr(d, "keys", None)) and hasattr(d, "batch_size")) or isinstance(d, dict):
        raise TypeError("For '%s', the '%s' must be a tessera.dataset data set (FashionMnistDataset(...), "
                        "GeneratorDataset(...), ... .batch(n)), but got %s." % (where, name, describe(d)))


def _check_callbacks(cbs, where):
    """callbacks: None, a Callback (or an object with MindSpore's callback methods), or a list /
    tuple of them: the list, duck-typed objects wrapped as Callbacks. TypeError naming the
    argument, the element's index and type otherwise."""
    if cbs is None:
        return []
    one = not isinstance(cbs, (list, tuple))
    items = [cbs] if one else list(cbs)
    out = []
    for i, c in enumerate(items):
        w = _as_callback(c)
        if w is None:
            raise TypeError("For '%s', the 'callbacks' must be a Callback or a list/tuple of Callback (objects with "
                            "on_train_step_end, on_train_epoch_end, ... methods), but %s is %s."
                            % (where, "it" if one else "element %d" % i, describe(c)))
        out.append(w)
    return out


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
