"""The job's context: MPI start, rank and size, and MindSpore's parallel / execution context
mapped onto Tessera's config keys (docs/config.md). Every value is checked by the library when it
is set: an unknown keyword or a bad value raises ValueError naming the Python keyword
(`set_auto_parallel_context(parallel_mode='data_paralel'): unknown value ...`).

Every keyword MindSpore 2.x documents for set_auto_parallel_context is either mapped onto Tessera's
config keys with the same meaning, accepted because Tessera already behaves that way, or refused
with ValueError saying what to use instead (docs/python.md, "Parallel context")."""
import atexit
import os

from . import _C

# MindSpore keyword (or Tessera's own parallel key by its last name) -> Tessera config key, the
# value passed on as given
_DIRECT = {
    "parallel_mode": "parallel.mode",
    "gradients_mean": "parallel.gradients_mean",
    "full_batch": "parallel.full_batch",
    "strategy_ckpt_save_file": "parallel.strategy_ckpt_save_file",
    "strategy_ckpt_load_file": "parallel.strategy_ckpt_load_file",
    "pipeline_stages": "parallel.pipeline_stages",
    "enable_parallel_optimizer": "parallel.enable_parallel_optimizer",
    "search_mode": "parallel.search_mode",
    "auto_parallel_search_mode": "parallel.search_mode",  # MindSpore's older name of search_mode
    "parameter_broadcast": "parallel.parameter_broadcast",
    "all_reduce_fusion_config": "parallel.all_reduce_fusion_config",
    # Tessera's own parallel keys
    "optimizer_shard": "parallel.optimizer_shard",
    "micro_batches": "parallel.micro_batches",
    "pipeline_schedule": "parallel.pipeline_schedule",
    "virtual_stages": "parallel.virtual_stages",
    "bucket_size_mb": "parallel.bucket_size_mb",
    "comm_dtype": "parallel.comm_dtype",
    "sync_batchnorm": "parallel.sync_batchnorm",
    "cluster": "parallel.cluster",
    "auto_tp": "parallel.auto_tp",
    "comm_timeout": "parallel.comm_timeout",
    "sequence_parallel": "parallel.sequence_parallel",
    "context_parallel": "parallel.context_parallel",
    "context_parallel_algo": "parallel.context_parallel_algo",
}
# the value a config key has when not set (the library's defaults; gradients_mean: MindSpore's
# False in Python, see config_pairs). test_mindspore_scripts checks them against the library's.
_CONFIG_DEFAULTS = {
    "parallel.mode": "stand_alone", "parallel.gradients_mean": False, "parallel.full_batch": False,
    "parallel.strategy_ckpt_save_file": "", "parallel.strategy_ckpt_load_file": "",
    "parallel.pipeline_stages": 1, "parallel.enable_parallel_optimizer": False,
    "parallel.search_mode": "dynamic_programming", "parallel.parameter_broadcast": False,
    "parallel.all_reduce_fusion_config": [], "parallel.optimizer_shard": "off", "parallel.micro_batches": 0,
    "parallel.pipeline_schedule": "1f1b", "parallel.virtual_stages": 1, "parallel.bucket_size_mb": 4.0,
    "parallel.comm_dtype": "f32", "parallel.sync_batchnorm": False, "parallel.cluster": "local",
    "parallel.auto_tp": 0, "parallel.comm_timeout": 300.0, "parallel.optimizer_shard_threshold_kb": 64.0,
    "parallel.optimizer_shard_group": 0, "parallel.sequence_parallel": False,
    "parallel.context_parallel": 0, "parallel.context_parallel_algo": "auto",
}
# keywords MindSpore has that Tessera refuses: what to use instead
_REFUSED = {
    "group_ckpt_save_file": "Tessera's communication groups follow from the layout; strategy_ckpt_save_file "
                            "saves the layouts",
    "dump_local_norm": "Tessera has no local-norm dump (log.metrics records the loss and gradient norm)",
    "dump_local_norm_path": "Tessera has no local-norm dump (log.metrics records the loss and gradient norm)",
    "dump_device_local_norm": "Tessera has no local-norm dump (log.metrics records the loss and gradient norm)",
    "grad_accumulation_step": "use Model(..., config={'train.micro_batch_size': batch_size // steps})",
    "sharding_propagation": "use search_mode='sharding_propagation'",
}

_parallel = {}      # config key -> YAML text
_cfg = {}           # config key -> the Python value it was set to
_values = {}        # set_auto_parallel_context keyword -> the value given
_extra = {}         # accepted MindSpore keywords without a config key of their own -> value
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


def _library_reason(e, key):
    """The library's message for key without its CLI framing ('--set k=v: k: ...')."""
    m = str(e)
    if m.startswith("--set "):
        i = m.find(": ")
        m = m[i + 2:] if i >= 0 else m
    if m.startswith(key + ": "):
        m = m[len(key) + 2:]
    return m


def check_key(key, value, where=None):
    """Sets key=value on a default config in the library; ValueError with its message if refused,
    naming `where` (the Python argument, e.g. "set_context(seed=...)") or else the config key."""
    text = yaml_value(value) if not isinstance(value, _Raw) else value.text
    try:
        _C.check_key(key, text)
    except ValueError as e:
        raise ValueError("%s: %s" % (where or ("config key '%s' = %r" % (key, value)), _library_reason(e, key))) \
            from None


def _check_kw(fn, kw, value, key, shown=None):
    """check_key for the Python keyword kw of function fn (the message names fn(kw=value))."""
    try:
        check_key(key, value, "%s(%s=%r)" % (fn, kw, value if shown is None else shown))
    except ValueError as e:
        # a value of the wrong Python type (1.5 or True for an integer, 1 for a bool) is a TypeError,
        # as in MindSpore; a value of the right type out of range stays a ValueError
        m = str(e)
        if ("integer" in m and (isinstance(value, bool) or not _int_like(value))) or \
                ("true or false" in m and not isinstance(value, bool)):
            raise TypeError(m) from None
        raise


def _int_like(v):
    import numbers
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


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


def _did_you_mean(word, names):
    import difflib
    m = difflib.get_close_matches(word, sorted(names), 1)
    return " (did you mean '%s'?)" % m[0] if m else ""


def _bad(kw, v, why, exc=ValueError):
    return exc("set_auto_parallel_context(%s=%r): %s" % (kw, v, why))


def _bool(kw, v):
    if not isinstance(v, bool):
        raise _bad(kw, v, "expected True or False", TypeError)
    return v


def _dict(kw, v, allowed):
    if not isinstance(v, dict):
        raise _bad(kw, v, "expected a dict with keys among %s" % ", ".join(allowed))
    for k in v:
        if k not in allowed:
            raise _bad(kw, v, "unknown key '%s' (expected: %s)" % (k, ", ".join(allowed)))
    return v


def _special(kw, v, stage):
    """The keywords that are not one config key: stage(config key, value) for what they map to.
    True if kw was handled."""
    if kw == "device_num":
        if not _int_like(v):
            raise _bad(kw, v, "expected a positive integer", TypeError)
        if v < 1:
            raise _bad(kw, v, "expected a positive integer")
        n = get_group_size()
        if v != n:
            raise _bad(kw, v, "the job has %d processes (mpirun -n %d)" % (n, n))
    elif kw == "global_rank":
        if not isinstance(v, int) or isinstance(v, bool) or v != get_rank():
            raise _bad(kw, v, "this process is rank %d of the job (the launcher numbers the ranks)" % get_rank())
    elif kw == "dataset_strategy":
        if v not in ("full_batch", "data_parallel"):
            raise _bad(kw, v, "'full_batch' or 'data_parallel' (a per-dimension strategy of the input: give the "
                       "first operator's strategy with op.shard(...) and full_batch=True)")
        stage("parallel.full_batch", v == "full_batch")
    elif kw == "gradient_fp32_sync":
        if not _bool(kw, v):
            raise _bad(kw, v, "gradients travel in float32 unless comm_dtype says otherwise; for "
                       "half-precision gradient all-reduces use comm_dtype='bf16' or 'f16'")
        stage("parallel.comm_dtype", "f32")
    elif kw == "force_fp32_communication":
        if _bool(kw, v):
            stage("parallel.comm_dtype", "f32")
    elif kw == "loss_repeated_mean":
        if not _bool(kw, v):
            raise _bad(kw, v, "Tessera's loss under every layout is the mean over the global batch, as "
                       "loss_repeated_mean=True gives")
    elif kw == "enable_alltoall":
        if not _bool(kw, v):
            raise _bad(kw, v, "Tessera's redistribution uses AllToAll where a layout change needs one (the values "
                       "are those AllGather + split would give); remove enable_alltoall=False")
    elif kw == "pipeline_result_broadcast":
        if _bool(kw, v):
            raise _bad(kw, v, "not supported: evaluation results (Model.eval) are the same on every rank already")
    elif kw == "auto_pipeline":
        if not _bool(kw, v):
            raise _bad(kw, v, "Tessera's auto_parallel search picks the pipeline degree itself; to fix it give "
                       "auto_tp=T and pipeline_stages=P")
    elif kw == "strategy_ckpt_config":
        _dict(kw, v, ("load_file", "save_file", "only_trainable_params"))
        if "load_file" in v:
            stage("parallel.strategy_ckpt_load_file", v["load_file"] or "")
        if "save_file" in v:
            stage("parallel.strategy_ckpt_save_file", v["save_file"] or "")
        if "only_trainable_params" in v:
            _bool(kw, v["only_trainable_params"])  # loading reads only the operators' strategies either way
    elif kw == "parallel_optimizer_config":
        _dict(kw, v, ("gradient_accumulation_shard", "parallel_optimizer_threshold", "optimizer_weight_shard_size",
                      "optimizer_level"))
        if "parallel_optimizer_threshold" in v:
            stage("parallel.optimizer_shard_threshold_kb", float(v["parallel_optimizer_threshold"]))
        if "optimizer_weight_shard_size" in v:
            g = v["optimizer_weight_shard_size"]
            stage("parallel.optimizer_shard_group", 0 if g == -1 else g)
        level = v.get("optimizer_level")
        if level is not None and level not in ("level1", "level2", "level3"):
            raise _bad(kw, v, "optimizer_level: 'level1', 'level2' or 'level3'")
        if "gradient_accumulation_shard" in v:
            _bool(kw, v["gradient_accumulation_shard"])
    elif kw == "pipeline_config":
        _dict(kw, v, ("pipeline_interleave", "pipeline_scheduler"))
        sched = v.get("pipeline_scheduler", "1f1b")
        if sched not in ("1f1b", "gpipe"):
            raise _bad(kw, v, "pipeline_scheduler: '1f1b' or 'gpipe' (Tessera's schedules: gpipe, 1f1b, "
                       "interleaved_1f1b)")
        inter = v.get("pipeline_interleave", False)
        if inter and sched != "1f1b":
            raise _bad(kw, v, "pipeline_interleave with 'gpipe': Tessera interleaves only 1f1b")
        stage("parallel.pipeline_schedule", "interleaved_1f1b" if inter else sched)
    elif kw == "comm_fusion":
        _dict(kw, v, ("openstate", "allreduce", "allgather", "reducescatter"))
        if v.get("openstate", True) is not True:
            raise _bad(kw, v, "openstate=False: Tessera always fuses the gradient all-reduces into buckets (for "
                       "small buckets: {'allreduce': {'mode': 'size', 'config': MB}})")
        for op in ("allgather", "reducescatter"):
            if op in v and (v[op] or {}).get("mode", "auto") != "auto":
                raise _bad(kw, v, "%s: only mode 'auto' (Tessera fuses only the gradient all-reduce; its "
                           "ZeRO gathers are per layer)" % op)
        ar = v.get("allreduce")
        if ar is not None:
            ar = _dict(kw, ar, ("mode", "config"))
            mode = ar.get("mode", "auto")
            if mode == "size":
                stage("parallel.bucket_size_mb", float(ar.get("config")))
            elif mode == "index":
                stage("parallel.all_reduce_fusion_config", list(ar.get("config") or []))
            elif mode != "auto":
                raise _bad(kw, v, "allreduce mode: 'auto', 'size' or 'index'")
    else:
        return False
    return True


_SPECIAL = ("device_num", "global_rank", "dataset_strategy", "gradient_fp32_sync", "force_fp32_communication",
            "loss_repeated_mean", "enable_alltoall", "pipeline_result_broadcast", "auto_pipeline",
            "strategy_ckpt_config", "parallel_optimizer_config", "pipeline_config", "comm_fusion")


def set_auto_parallel_context(**kwargs):
    """MindSpore's set_auto_parallel_context. Every keyword MindSpore 2.x documents is mapped onto
    Tessera's parallel.* keys, accepted where Tessera already behaves so, or refused with
    ValueError naming the keyword and what to use instead; Tessera's own parallel keys are taken
    by their last name (optimizer_shard, micro_batches, pipeline_schedule, virtual_stages,
    bucket_size_mb, comm_dtype, sync_batchnorm, cluster, auto_tp, comm_timeout). Nothing is
    changed unless every keyword is accepted."""
    staged, cfg = {}, {}

    for kw, v in kwargs.items():
        def stage(key, value, kw=kw, v=v):
            _check_kw("set_auto_parallel_context", kw, value, key, shown=v)
            staged[key] = yaml_value(value)
            cfg[key] = value

        if kw in _REFUSED:
            raise _bad(kw, v, "not supported: " + _REFUSED[kw])
        if _special(kw, v, stage):
            continue
        if kw not in _DIRECT:
            raise ValueError("set_auto_parallel_context: unknown keyword '%s'%s (expected one of: %s)"
                             % (kw, _did_you_mean(kw, set(_DIRECT) | set(_SPECIAL)),
                                ", ".join(sorted(set(_DIRECT) | set(_SPECIAL)))))
        stage(_DIRECT[kw], v)
    c = dict(_cfg, **cfg)
    allv = dict(_values, **kwargs)
    want32 = [k for k in ("force_fp32_communication", "gradient_fp32_sync") if allv.get(k) is True]
    if want32 and c.get("parallel.comm_dtype", "f32") != "f32":
        raise ValueError("set_auto_parallel_context: comm_dtype=%r disagrees with %s=True (float32 gradient "
                         "communication)" % (c["parallel.comm_dtype"], want32[0]))
    if "device_num" in kwargs:
        _device_num[0] = kwargs["device_num"]
    _parallel.update(staged)
    _cfg.update(cfg)
    _values.update(kwargs)


# hybrid_parallel's defaults in Python (docs/python.md "What differs"): the rank's graph is written by
# hand, model-parallel ranks read the same samples (full_batch), and each rank's loss is seeded 1/N
# with the gradients of parameters several ranks hold summed (gradients_mean: the library's rule,
# docs/parallel-pass.md "Hybrid parallel"), so the job trains as one process does
_HYBRID_DEFAULTS = {"parallel.gradients_mean": True, "parallel.full_batch": True}


def _get_default(key):
    if key not in _cfg and key in _HYBRID_DEFAULTS and _cfg.get("parallel.mode") == "hybrid_parallel":
        return _HYBRID_DEFAULTS[key]
    return _cfg.get(key, _CONFIG_DEFAULTS.get(key))


def get_auto_parallel_context(attr_key):
    """The value of a set_auto_parallel_context keyword: as set, or what the job runs with when it
    was not set (MindSpore's defaults where Tessera behaves as they say; device_num and
    global_rank are the job's size and this rank)."""
    k = attr_key
    if k in ("device_num", "rank_num", "group_size"):
        return _device_num[0] or get_group_size()
    if k in ("global_rank", "rank_id", "rank"):
        return get_rank()
    if k in _DIRECT:
        if k in _values:
            return _values[k]
        return _get_default(_DIRECT[k])
    if k == "dataset_strategy":
        return "full_batch" if _get_default("parallel.full_batch") else "data_parallel"
    if k in ("gradient_fp32_sync", "loss_repeated_mean", "enable_alltoall"):
        return _values.get(k, True) if k != "gradient_fp32_sync" else _get_default("parallel.comm_dtype") == "f32"
    if k == "force_fp32_communication":
        return _values.get(k, False)
    if k in ("pipeline_result_broadcast",):
        return False
    if k == "auto_pipeline":
        return _values.get(k, True)
    if k == "strategy_ckpt_config":
        only = _values.get(k, {}).get("only_trainable_params", True)
        return {"load_file": _get_default("parallel.strategy_ckpt_load_file"),
                "save_file": _get_default("parallel.strategy_ckpt_save_file"), "only_trainable_params": only}
    if k == "parallel_optimizer_config":
        g = _get_default("parallel.optimizer_shard_group")
        d = dict(_values.get(k, {}))
        d.setdefault("gradient_accumulation_shard", False)
        d["parallel_optimizer_threshold"] = _get_default("parallel.optimizer_shard_threshold_kb")
        d["optimizer_weight_shard_size"] = -1 if g == 0 else g
        return d
    if k == "pipeline_config":
        s = _get_default("parallel.pipeline_schedule")
        return {"pipeline_interleave": s == "interleaved_1f1b",
                "pipeline_scheduler": "1f1b" if s == "interleaved_1f1b" else s}
    if k == "comm_fusion":
        if "comm_fusion" in _values:
            return _values["comm_fusion"]
        f = _get_default("parallel.all_reduce_fusion_config")
        ar = {"mode": "index", "config": f} if f else {"mode": "size", "config": _get_default("parallel.bucket_size_mb")}
        return {"openstate": True, "allreduce": ar}
    if k in _REFUSED:
        return {"group_ckpt_save_file": "", "grad_accumulation_step": 1}.get(k, False)
    raise ValueError("get_auto_parallel_context: unknown key '%s' (expected one of: %s)"
                     % (k, ", ".join(sorted(set(_DIRECT) | set(_SPECIAL) | {"rank_num"}))))


def reset_auto_parallel_context():
    """Every set_auto_parallel_context keyword back to its default."""
    _parallel.clear()
    _cfg.clear()
    _values.clear()
    _device_num[0] = None


_DEVICE_TARGETS = ("CPU", "GPU")


def set_context(**kwargs):
    """MindSpore's set_context for what maps: mode (GRAPH_MODE, or PYNATIVE_MODE, MindSpore 2.x's
    default: Tessera compiles every training step either way, and runs networks and losses on
    values outside graphs: docs/python.md "Functional training"), device_target ("CPU" or "GPU": a GPU is looked for when training starts, and a machine
    without a usable one refuses the job with the reason), device_id, save_graphs=False (the
    default: nothing saved), and Tessera's seed, threads. Others: ValueError naming the keyword."""
    staged, mode = {}, None
    for k, v in kwargs.items():
        if k == "mode":
            if v not in (0, 1, "GRAPH_MODE", "PYNATIVE_MODE", "graph", "pynative") or isinstance(v, bool):
                raise ValueError("set_context(mode=%r): GRAPH_MODE (0) or PYNATIVE_MODE (1)" % (v,))
            mode = 1 if v in (1, "PYNATIVE_MODE", "pynative") else 0
            continue
        if k == "save_graphs":
            if v not in (False, 0):
                raise ValueError("set_context(save_graphs=%r): Tessera does not dump graphs (`tessera plan` prints "
                                 "the layout and the memory plan)" % (v,))
            continue
        if k == "device_target":  # "cpu"/"gpu" as MindSpore accepts them; a GPU is looked for when training starts
            t = str(v).upper()
            if t not in _DEVICE_TARGETS:
                raise ValueError("set_context(device_target=%r): Tessera runs on 'CPU' or 'GPU' (NVIDIA)" % (v,))
            _check_kw("set_context", k, t, "device_target", shown=v)
            staged["device_target"] = yaml_value(t)
            continue
        if k not in _CONTEXT_KEYS:
            names = list(_CONTEXT_KEYS) + ["mode", "device_target", "save_graphs"]
            raise ValueError("set_context: unknown keyword '%s'%s (expected one of: %s)"
                             % (k, _did_you_mean(k, names), ", ".join(sorted(names))))
        key = _CONTEXT_KEYS[k]
        _check_kw("set_context", k, v, key)
        staged[key] = yaml_value(v)
    _context.update(staged)
    if mode is not None:
        _MODE[0] = mode
    if "train.threads" in staged and int(kwargs["threads"]) > 0:
        _C.set_threads(int(kwargs["threads"]))


_CONTEXT_KEYS = {
    "seed": "train.seed",
    "threads": "train.threads",
    "device_id": "device_id",
}


def get_context(attr_key):
    """The value of a set_context keyword (mode: GRAPH_MODE; device_target: "CPU" unless set)."""
    if attr_key == "mode":
        return _MODE[0]
    if attr_key == "device_target":
        return _context.get("device_target", '"CPU"').strip('"')
    if attr_key == "save_graphs":
        return False
    if attr_key in _CONTEXT_KEYS:
        t = _context.get(_CONTEXT_KEYS[attr_key])
        if t is None:
            return {"seed": 1, "threads": 0, "device_id": 0}[attr_key]
        return int(t)
    raise ValueError("get_context: unknown key '%s'" % attr_key)


def set_seed(seed):
    """mindspore.set_seed: the run's seed (train.seed: parameters, shuffling, dropout)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError("set_seed(%r): expected a non-negative integer" % (seed,))
    set_context(seed=seed)


def get_seed():
    """The seed set_seed set (1 when not set)."""
    return get_context("seed")


def _resolved():
    """The parallel keys that depend on several keywords: parallel_optimizer_config's level (or
    gradient_accumulation_shard) sets optimizer_shard when enable_parallel_optimizer is True."""
    out = {}
    po = _values.get("parallel_optimizer_config") or {}
    if _cfg.get("parallel.enable_parallel_optimizer") and "parallel.optimizer_shard" not in _cfg:
        level = po.get("optimizer_level")
        if level:
            out["parallel.optimizer_shard"] = yaml_value(level[-1])
        elif po.get("gradient_accumulation_shard"):
            out["parallel.optimizer_shard"] = yaml_value("2")
    return out


def config_pairs():
    """The context's config keys as (key, YAML text) pairs. parallel.gradients_mean is False
    unless set (MindSpore's default; the YAML/CLI default is true); under hybrid_parallel
    gradients_mean and full_batch are True unless set (_HYBRID_DEFAULTS)."""
    par = dict(_parallel)
    if _cfg.get("parallel.mode") == "hybrid_parallel":
        for k, v in _HYBRID_DEFAULTS.items():
            par.setdefault(k, yaml_value(v))
    par.setdefault("parallel.gradients_mean", "false")
    par.update(_resolved())
    return list(_context.items()) + list(par.items())


class ParallelMode:
    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"
    AUTO_PARALLEL = "auto_parallel"
    HYBRID_PARALLEL = "hybrid_parallel"


GRAPH_MODE = 0
PYNATIVE_MODE = 1
_MODE = [GRAPH_MODE]  # set_context(mode=...): what get_context says (every step is compiled either way)
