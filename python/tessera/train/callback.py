"""Callbacks with MindSpore's names. The C trainer calls them (ts_callback): step_end after every
optimizer step, epoch_end after every epoch, end when training finishes; an exception raised in
one stops training and propagates out of Model.train. ModelCheckpoint is a description: the
trainer's own checkpointing (checkpoint.* keys) writes the files."""
import time


class _Args(dict):
    __getattr__ = dict.__getitem__


class RunContext:
    """What a callback sees: original_args() has cur_step_num (global, 1-based), cur_epoch_num
    (1-based), batch_num (steps per epoch), epoch_num, net_outputs (the step's loss), and
    Tessera's step_info (lr, grad_norm, step_ms, samples_per_s, ...)."""

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
        if not isinstance(per_print_times, int) or per_print_times < 0:
            raise ValueError("LossMonitor: per_print_times must be an int >= 0")
        self.per = per_print_times

    def step_end(self, run_context):
        a = run_context.original_args()
        s = (a.cur_step_num - 1) % a.batch_num + 1
        if self.per and s % self.per == 0:
            print("epoch: %d step: %d, loss is %s" % (a.cur_epoch_num, s, a.net_outputs), flush=True)


class TimeMonitor(Callback):
    """Prints the epoch's time and the time per step at the end of every epoch."""

    def __init__(self, data_size=None):
        self.data_size = data_size
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
    """save_checkpoint_steps (checkpoint.save_steps), keep_checkpoint_max (checkpoint.keep_max);
    save_checkpoint_seconds and keep_checkpoint_per_n_minutes are not supported (0 only)."""

    def __init__(self, save_checkpoint_steps=1, save_checkpoint_seconds=0, keep_checkpoint_max=5,
                 keep_checkpoint_per_n_minutes=0, integrated_save=True, async_save=False, saved_network=None,
                 append_info=None, enc_key=None, exception_save=False):
        if save_checkpoint_seconds or keep_checkpoint_per_n_minutes:
            raise ValueError("CheckpointConfig: time-based saving is not supported (save_checkpoint_steps)")
        self.save_steps = int(save_checkpoint_steps or 0)
        self.keep_max = int(keep_checkpoint_max or 0)


class ModelCheckpoint(Callback):
    """Checkpoints <directory>/<prefix>-<step>.safetensors (Tessera's files; sliced layouts write
    a directory per step), written by the trainer: checkpoint.dir, .prefix, .save_steps,
    .keep_max, and the last step's."""

    def __init__(self, prefix="CKP", directory=None, config=None):
        self.prefix = prefix
        self.directory = directory or "."
        self.config = config or CheckpointConfig()

    def keys(self):
        return {"checkpoint.dir": self.directory, "checkpoint.prefix": self.prefix,
                "checkpoint.save_steps": self.config.save_steps, "checkpoint.keep_max": self.config.keep_max,
                "checkpoint.save_last": True}
