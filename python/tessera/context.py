"""The job's context: MPI start, rank and size, and MindSpore's parallel / execution context
mapped onto Tessera's config keys (docs/config.md). Every value is checked by the library when it
is set: an unknown keyword or a bad value raises ValueError naming the key."""
import atexit
import os

from . import _C

_PARALLEL_KEYS = {
    # MindSpore keyword -> Tessera config key
    "parallel_mode": "parallel.mode",
    "gradients_mean": "parallel.gradients_mean",
    "full_batch": "parallel.full_batch",
    "strategy_ckpt_save_file": "parallel.strategy_ckpt_save_file",
    "strategy_ckpt_load_file": "parallel.strategy_ckpt_load_file",
    "pipeline_stages": "parallel.pipeline_stages",
    "enable_parallel_optimizer": "parallel.enable_parallel_optimizer",
    "search_mode": "parallel.search_mode",
    # Tessera's own parallel keys, by their last name
    "optimizer_shard": "parallel.optimizer_shard",
    "micro_batches": "parallel.micro_batches",
    "pipeline_schedule": "parallel.pipeline_schedule",
    "bucket_size_mb": "parallel.bucket_size_mb",
    "comm_dtype": "parallel.comm_dtype",
    "sync_batchnorm": "parallel.sync_batchnorm",
    "cluster": "parallel.cluster",
    "auto_tp": "parallel.auto_tp",
}
_CONTEXT_KEYS = {
    "seed": "train.seed",
    "threads": "train.threads",
    "device_id": "device_id",

}

_parallel = {}      # config key -> YAML text
_values = {}        # set_auto_parallel_context keyword -> the value given
_context = {}
_device_num = [None]
_started = [False]


def yaml_value(v):
    """A Python value as the YAML text ts_config_set parses."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join("%s: %s" % (yaml_value(str(k)), yaml_value(x)) for k, x in v.items()) + "}"
    raise ValueError("cannot express %r as a config value" % (v,))


def check_key(key, value):
    """Sets key=value on a default config in the library; ValueError with its message if refused."""
    _C.check_key(key, yaml_value(value) if not isinstance(value, _Raw) else value.text)


class _Raw:
    def __init__(self, text):
        self.text = text


def init(backend_name=None):
    """Starts the job: MPI through the library (a singleton job without mpirun). Idempotent."""
    if not _started[0]:
        _C.init()
        _started[0] = True
        atexit.register(_C.finalize)


def get_rank(group=None):
    """This process's rank (from the launcher's environment before init())."""
    return _C.rank_size()[0]


def get_group_size(group=None):
    """The job's number of processes."""
    return _C.rank_size()[1]


def set_auto_parallel_context(**kwargs):
    """MindSpore's set_auto_parallel_context: parallel_mode (stand_alone, data_parallel,
    semi_auto_parallel, auto_parallel, hybrid_parallel), device_num (must equal the job's
    size), gradients_mean, full_batch, strategy_ckpt_save_file, strategy_ckpt_load_file,
    pipeline_stages, enable_parallel_optimizer, search_mode, and Tessera's optimizer_shard,
    micro_batches, pipeline_schedule, bucket_size_mb, comm_dtype, sync_batchnorm, cluster,
    auto_tp. ValueError naming the key for an unknown keyword or a bad value."""
    staged, values = {}, {}
    for k, v in kwargs.items():
        if k == "device_num":
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError("device_num: expected a positive integer, got %r" % (v,))
            n = get_group_size()
            if v != n:
                raise ValueError("device_num: %d, but the job has %d processes (mpirun -n)" % (v, n))
            _device_num[0] = v
            continue
        if k not in _PARALLEL_KEYS:
            raise ValueError("set_auto_parallel_context: unknown key '%s' (expected one of: %s)"
                             % (k, ", ".join(sorted(list(_PARALLEL_KEYS) + ["device_num"]))))
        key = _PARALLEL_KEYS[k]
        text = yaml_value(v)
        _C.check_key(key, text)
        staged[key] = text
        values[k] = v
    _parallel.update(staged)
    _values.update(values)


def get_auto_parallel_context(key):
    """The value set for key (as set_auto_parallel_context took it), or None if it was not set
    (the config's default applies)."""
    if key == "device_num":
        return _device_num[0] or get_group_size()
    if key not in _PARALLEL_KEYS:
        raise ValueError("get_auto_parallel_context: unknown key '%s'" % key)
    return _values.get(key)


def reset_auto_parallel_context():
    _parallel.clear()
    _values.clear()
    _device_num[0] = None


def set_context(**kwargs):
    """MindSpore's set_context for what maps: mode (GRAPH_MODE only: Tessera compiles the whole
    step), device_target ("CPU" or "GPU": a GPU is looked for when training starts, and a machine
    without a usable one refuses the job with the reason), device_id, and Tessera's seed, threads.
    Others: ValueError."""
    staged = {}
    for k, v in kwargs.items():
        if k == "mode":
            if v not in (0, "GRAPH_MODE", "graph"):
                raise ValueError("set_context: mode: only GRAPH_MODE (0); Tessera runs whole-step graphs")
            continue
        if k == "device_target":  # "cpu"/"gpu" as MindSpore accepts them; a GPU is looked for when training starts
            v = str(v).upper()
            _C.check_key("device_target", v)
            staged["device_target"] = v
            continue
        if k not in _CONTEXT_KEYS:
            raise ValueError("set_context: unknown key '%s' (expected one of: %s)"
                             % (k, ", ".join(sorted(list(_CONTEXT_KEYS) + ["mode", "device_target"]))))
        key = _CONTEXT_KEYS[k]
        text = yaml_value(v)
        _C.check_key(key, text)
        staged[key] = text
    _context.update(staged)
    if "train.threads" in staged and int(kwargs["threads"]) > 0:
        _C.set_threads(int(kwargs["threads"]))


def set_seed(seed):
    """mindspore.set_seed: the run's seed (train.seed: parameters, shuffling, dropout)."""
    set_context(seed=seed)


def config_pairs():
    """The context's config keys as (key, YAML text) pairs."""
    return list(_context.items()) + list(_parallel.items())


class ParallelMode:
    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"
    AUTO_PARALLEL = "auto_parallel"
    HYBRID_PARALLEL = "hybrid_parallel"


GRAPH_MODE = 0
PYNATIVE_MODE = 1
