"""Callbacks with MindSpore's names. The C trainer calls them (ts_callback): step_end after every
optimizer step, epoch_end after every epoch, end when training finishes; an exception raised in
one stops training and propagates out of Model.train. ModelCheckpoint is a description: the
trainer's own checkpointing (checkpoint.* keys) writes the files."""
import time

from .._validator import check_bool, check_int


class _Args(dict):
    __getattr__ = dict.__getitem__


class RunContext:
    """What a callback sees: original_args() has cur_step_num (global, 1-based), cur_epoch_num
    (1-based), batch_num (steps per epoch), epoch_num, net_outputs (the step's loss),
    eval_results (Model.fit's evaluation at this epoch's end: the Model's metric names and
    eval_loss; empty otherwise), and Tessera's step_info (lr, grad_norm, step_ms, samples_per_s,
    ...)."""

    def __init__(self, args, trainer):
        self._args = _Args(args)
        self._trainer = trainer

    def original_args(self):
        return self._args

    def request_stop(self):
        self._trainer.request_stop()

    def get_stop_requested(self):
        return False


class Callback:
    """Override any of on_train_begin, on_train_step_end, on_train_epoch_end, on_train_end
    (MindSpore 2.x) or begin, step_end, epoch_end, end (1.x); both are called."""

    def on_train_begin(self, run_context):
        self.begin(run_context)

    def on_train_step_end(self, run_context):
        self.step_end(run_context)

    def on_train_epoch_end(self, run_context):
        self.epoch_end(run_context)

    def on_train_end(self, run_context):
        self.end(run_context)

    def on_eval_end(self, run_context):
        """After each evaluation of Model.fit (original_args().eval_results)."""

    def begin(self, run_context):
        pass

    def step_end(self, run_context):
        pass

    def epoch_end(self, run_context):
        pass

    def end(self, run_context):
        pass


class LossMonitor(Callback):
    """Prints "epoch: E step: S, loss is L" every per_print_times steps (step within the epoch)."""

    def __init__(self, per_print_times=1):
        self.per = check_int(per_print_times, "per_print_times", "LossMonitor", 0)

    def step_end(self, run_context):
        a = run_context.original_args()
        s = (a.cur_step_num - 1) % a.batch_num + 1
        if self.per and s % self.per == 0:
            print("epoch: %d step: %d, loss is %s" % (a.cur_epoch_num, s, a.net_outputs), flush=True)


class TimeMonitor(Callback):
    """Prints the epoch's time and the time per step at the end of every epoch."""

    def __init__(self, data_size=None):
        self.data_size = check_int(data_size, "data_size", "TimeMonitor", 1, allow_none=True)
        self.t0 = None

    def begin(self, run_context):
        self.t0 = time.time()

    def step_end(self, run_context):
        if self.t0 is None:
            self.t0 = time.time()

    def epoch_end(self, run_context):
        a = run_context.original_args()
        dt = (time.time() - self.t0) * 1000 if self.t0 else 0.0
        n = self.data_size or a.batch_num
        print("epoch time: %.3f ms, per step time: %.3f ms" % (dt, dt / max(n, 1)), flush=True)
        self.t0 = time.time()


class CheckpointConfig:
    """save_checkpoint_steps (checkpoint.save_steps), keep_checkpoint_max (checkpoint.keep_max),
    integrated_save (checkpoint.format: True = whole files, the model gathered from every rank;
    False = sliced, each rank writing its own slices into one directory per checkpoint; None,
    Tessera's default: whole where nothing is cut, sliced otherwise), async_save
    (checkpoint.async). save_checkpoint_seconds, keep_checkpoint_per_n_minutes, saved_network,
    append_info, enc_key and exception_save are refused when given (ValueError naming them)."""

    def __init__(self, save_checkpoint_steps=1, save_checkpoint_seconds=0, keep_checkpoint_max=5,
                 keep_checkpoint_per_n_minutes=0, integrated_save=None, async_save=False, saved_network=None,
                 append_info=None, enc_key=None, exception_save=False):
        if save_checkpoint_seconds or keep_checkpoint_per_n_minutes:
            raise ValueError("CheckpointConfig: save_checkpoint_seconds / keep_checkpoint_per_n_minutes: time-based "
                             "saving is not supported (use save_checkpoint_steps)")
        for name, v in (("saved_network", saved_network), ("append_info", append_info), ("enc_key", enc_key)):
            if v is not None:
                raise ValueError("CheckpointConfig: %s is not supported (Tessera saves the trained network, "
                                 "unencrypted, with its position and configuration)" % name)
        if exception_save:
            raise ValueError("CheckpointConfig: exception_save is not supported (checkpoint.resume: auto resumes "
                             "from the newest readable checkpoint)")
        if integrated_save is not None and not isinstance(integrated_save, bool):
            raise ValueError("CheckpointConfig: integrated_save must be True, False or None, got %r"
                             % (integrated_save,))
        self.save_steps = check_int(save_checkpoint_steps, "save_checkpoint_steps", "CheckpointConfig", 0,
                                    allow_none=True) or 0
        self.keep_max = check_int(keep_checkpoint_max, "keep_checkpoint_max", "CheckpointConfig", 0,
                                  allow_none=True) or 0
        self.integrated_save = integrated_save
        self.async_save = check_bool(async_save, "async_save", "CheckpointConfig")


class EarlyStopping(Callback):
    """EarlyStopping(monitor="eval_loss", min_delta=0, patience=0, verbose=False, mode="auto",
    baseline=None, restore_best_weights=False): MindSpore's: at each epoch's end the monitored
    value ("loss": the step's training loss; "eval_loss" or a metric name of the Model: Model.fit's
    evaluation of that epoch) is compared with the best so far; after `patience` epochs without
    an improvement of more than min_delta (lower is better for losses, mae, mse, ...; higher
    otherwise; mode "min"/"max" to say), training stops (the epoch's remaining callbacks run).
    baseline: an improvement must also beat it to reset the wait; restore_best_weights: the
    parameters of the best epoch are loaded back when it stops. Every rank sees the same
    evaluation (the trainer's, over every rank), so every rank stops alike."""

    _LOWER = ("hausdorff_distance", "mae", "mse", "loss", "perplexity", "mean_surface_distance",
              "root_mean_square_distance", "eval_loss")

    def __init__(self, monitor="eval_loss", min_delta=0, patience=0, verbose=False, mode="auto", baseline=None,
                 restore_best_weights=False):
        if not isinstance(monitor, str):
            raise TypeError("For 'EarlyStopping', the 'monitor' must be a str, but got %r." % (monitor,))
        if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)):
            raise TypeError("For 'EarlyStopping', the 'min_delta' must be a float or int, but got %r." % (min_delta,))
        if mode not in ("auto", "min", "max"):
            raise ValueError("For 'EarlyStopping', the 'mode' must be 'auto', 'min' or 'max', but got %r." % (mode,))
        if baseline is not None and (isinstance(baseline, bool) or not isinstance(baseline, (int, float))):
            raise TypeError("For 'EarlyStopping', the 'baseline' must be a float, int or None, but got %r."
                            % (baseline,))
        self.monitor, self.min_delta, self.mode, self.baseline = monitor, abs(float(min_delta)), mode, baseline
        self.patience = check_int(patience, "patience", "EarlyStopping", 0)
        self.verbose = check_bool(verbose, "verbose", "EarlyStopping")
        self.restore_best_weights = check_bool(restore_best_weights, "restore_best_weights", "EarlyStopping")
        self._lower = mode == "min" or (mode == "auto" and monitor in self._LOWER)
        self.on_train_begin(None)

    def _better(self, a, b):
        return a < b - self.min_delta if self._lower else a > b + self.min_delta

    def on_train_begin(self, run_context):
        self.wait, self.stopped_epoch, self.best_weights = 0, 0, None
        self.best = float("inf") if self._lower else float("-inf")

    def _value(self, a):
        if self.monitor == "loss":
            v = a.get("net_outputs")
        else:
            v = (a.get("eval_results") or {}).get(self.monitor)
        if v is None:
            return None
        v = float(v.asnumpy() if hasattr(v, "asnumpy") else v)
        return v

    def on_train_epoch_end(self, run_context):
        a = run_context.original_args()
        cur = self._value(a)
        if cur is None:
            if self.verbose:
                have = ["loss"] + sorted(a.get("eval_results") or {})
                print("EarlyStopping: %r is not available at epoch %d (have: %s)" % (self.monitor, a["cur_epoch_num"],
                                                                                     ", ".join(have)), flush=True)
            return
        net = a.get("train_network")
        t = getattr(net, "_trainer", None)
        self.wait += 1
        if self._better(cur, self.best):
            self.best = cur
            if self.restore_best_weights and t is not None:
                import numpy as np
                self.best_weights = {k: np.array(v) for k, v in t.params().items()}
            if self.baseline is None or self._better(cur, self.baseline):
                self.wait = 0
        if self.wait >= self.patience:
            self.stopped_epoch = a["cur_epoch_num"]
            run_context.request_stop()
            if self.restore_best_weights and self.best_weights is not None and t is not None:
                if self.verbose:
                    print("Restoring model weights from the end of the best epoch.", flush=True)
                from ..checkpoint import load_param_into_net
                load_param_into_net(net, self.best_weights)

    def on_train_end(self, run_context):
        if self.stopped_epoch > 0 and self.verbose:
            print("Epoch %05d: early stopping" % self.stopped_epoch, flush=True)


class ModelCheckpoint(Callback):
    """Checkpoints <directory>/<prefix>-<step>.safetensors (Tessera's files; sliced layouts write
    a directory per step), written by the trainer: checkpoint.dir, .prefix, .save_steps,
    .keep_max, and the last step's. A directory per rank (directory="./ckpt_" + str(get_rank()))
    gets a whole copy on each rank (refused with integrated_save=False: a sliced checkpoint is one
    directory all ranks write into)."""

    def __init__(self, prefix="CKP", directory=None, config=None):
        if not isinstance(prefix, str) or not prefix:
            raise TypeError("For 'ModelCheckpoint', the 'prefix' must be a non-empty str, but got %s %r."
                            % (type(prefix).__name__, prefix))
        if directory is not None and not isinstance(directory, (str, bytes)) and not hasattr(directory, "__fspath__"):
            raise TypeError("For 'ModelCheckpoint', the 'directory' must be a str or None, but got %s %r."
                            % (type(directory).__name__, directory))
        if config is not None and not isinstance(config, CheckpointConfig):
            raise TypeError("For 'ModelCheckpoint', the 'config' must be a CheckpointConfig or None, but got %s %r."
                            % (type(config).__name__, config))
        self.prefix = prefix
        self.directory = directory or "."
        self.config = config or CheckpointConfig()

    @property
    def latest_ckpt_file_name(self):
        """MindSpore's: the path of the newest checkpoint this callback's directory holds (the one
        its `latest` file names; None before the first is written)."""
        import os
        from .. import _C
        latest = os.path.join(os.fspath(self.directory), "latest")
        if not os.path.isfile(latest):
            return None
        p = _C.ckpt_resolve(latest)
        return p if p != latest else None

    def keys(self):
        k = {"checkpoint.dir": self.directory, "checkpoint.prefix": self.prefix,
             "checkpoint.save_steps": self.config.save_steps, "checkpoint.keep_max": self.config.keep_max,
             "checkpoint.save_last": True}
        if self.config.integrated_save is not None:
            k["checkpoint.format"] = "whole" if self.config.integrated_save else "sliced"
        if self.config.async_save:
            k["checkpoint.async"] = True
        return k


_METHODS = ("on_train_begin", "on_train_step_end", "on_train_epoch_end", "on_train_end",
            "begin", "step_end", "epoch_end", "end", "on_train_step_begin", "on_train_epoch_begin",
            "step_begin", "epoch_begin")


class _Duck(Callback):
    """An object that is not a Callback but has its methods (MindSpore calls callbacks by their
    methods): each of Tessera's calls goes to the object's 2.x method, else its 1.x one."""

    def __init__(self, obj):
        self.obj = obj

    def _call(self, new, old, rc):
        f = getattr(self.obj, new, None) or getattr(self.obj, old, None)
        if callable(f):
            f(rc)

    def on_train_begin(self, rc):
        self._call("on_train_begin", "begin", rc)

    def on_train_step_end(self, rc):
        self._call("on_train_step_end", "step_end", rc)

    def on_train_epoch_end(self, rc):
        self._call("on_train_epoch_end", "epoch_end", rc)

    def on_train_end(self, rc):
        self._call("on_train_end", "end", rc)


def _as_callback(c):
    """c as a Callback: itself, an object with callback methods wrapped, or None (not a callback:
    a number, a string, a class instead of an instance, ...)."""
    if isinstance(c, Callback):
        return c
    if c is None or isinstance(c, type) or isinstance(c, (str, bytes, int, float, list, tuple, dict)):
        return None
    if any(callable(getattr(c, m, None)) for m in _METHODS):
        return _Duck(c)
    return None
