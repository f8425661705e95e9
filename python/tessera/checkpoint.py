"""Checkpoints as dicts of numpy arrays (safetensors files, and MindSpore's .ckpt files;
docs/checkpoints.md).

load_checkpoint returns views into the file's memory (no copy; the arrays keep it open). A
Tessera training checkpoint holds "param.<name>" (trainable), "state.<name>" (BatchNorm
statistics), optimizer slots and the position; load_checkpoint strips the "param."/"state."
prefixes (the names are the network's), and keeps the other entries under their own names.
A MindSpore checkpoint (protobuf, told apart by its first bytes) reads as MindSpore reads it:
its tags, the append_info strings as str values; load_param_into_net takes MindSpore's names of
the layers' parameters (BatchNorm's gamma, beta, moving_mean, moving_variance, LayerNorm's gamma,
beta, Embedding's embedding_table) for the library's. A file name ending in .ckpt is written in
MindSpore's format, with those names, so MindSpore's load_checkpoint reads it."""
import os
import tempfile

from . import _C


def _ms_aliases(net):
    """{library name: MindSpore name} of the network's layer parameters that MindSpore names
    otherwise (bn.weight -> bn.gamma, bn.running_mean -> bn.moving_mean, ...)."""
    out = {}
    if net is None or not hasattr(net, "cells_and_names"):
        return out
    for path, c in net.cells_and_names():
        pre = path + "." if path else ""
        for ms_name, lib in getattr(type(c), "_leaf_alias", {}).items():
            out[pre + lib] = pre + ms_name
    return out


def _bn_aliases(names):
    """{library name: MindSpore name} from names alone, for a network whose layers are not at
    hand: a BatchNorm is a prefix P with P.running_mean (P.weight/bias/running_mean/running_var ->
    P.gamma/beta/moving_mean/moving_variance)."""
    out = {}
    for n in names:
        if n.endswith(".running_mean"):
            p = n[:-len("running_mean")]
            out.update({p + "weight": p + "gamma", p + "bias": p + "beta", p + "running_mean": p + "moving_mean",
                        p + "running_var": p + "moving_variance"})
    return out


def _from_ms_names(rename, d):
    """d with MindSpore's names of the network's layer parameters replaced by the library's
    (rename: MindSpore's name -> the library's; where the library's own name is not there too)."""
    if not any(k in rename for k in d):
        return d
    out = {}
    for k, v in d.items():
        lib = rename.get(k)
        out[lib if lib is not None and lib not in d else k] = v
    return out


def _names_filter(filter_prefix, specify_prefix, choice_func, who):
    """MindSpore's filter_prefix / specify_prefix / choice_func as one predicate on names."""
    def prefixes(p, what):
        if p is None:
            return ()
        if isinstance(p, str):
            p = (p,)
        if not isinstance(p, (list, tuple)) or not p or not all(isinstance(x, str) and x for x in p):
            raise TypeError("For '%s', the '%s' must be a non-empty string or a list/tuple of them, but got %r"
                            % (who, what, p))
        return tuple(p)
    fp, sp = prefixes(filter_prefix, "filter_prefix"), prefixes(specify_prefix, "specify_prefix")
    if choice_func is not None and not callable(choice_func):
        raise TypeError("For '%s', the 'choice_func' must be callable, but got %r" % (who, choice_func))

    def keep(name):
        if sp and not name.startswith(sp):
            return False
        if fp and name.startswith(fp):
            return False
        return choice_func is None or bool(choice_func(name))
    return keep


def _ms_value(v):
    """An append_dict value in a .ckpt, as MindSpore stores it: int -> Int64, float -> Float32,
    bool -> UInt8 (Tessera writes no Bool), a str -> a str value, an array as it is."""
    import numpy as np
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return np.array(v, np.uint8)
    if isinstance(v, int):
        return np.array(v, np.int64)
    if isinstance(v, float):
        return np.array(v, np.float32)
    return np.asarray(v)


def _save_mindspore(path, arrays, append_dict):
    """arrays ({name: array}) and append_dict to path in MindSpore's format (the C writer picks
    it from the .ckpt name)."""
    import numpy as np
    tensors, meta = {}, {}
    for k, v in arrays.items():
        tensors[k] = np.asarray(v, order="C")
    for k, v in (append_dict or {}).items():
        v = _ms_value(v)
        if isinstance(v, str):
            meta[str(k)] = v
        else:
            tensors[str(k)] = v
    _C.st_save(path, tensors, meta)


def _checkpoint_name(name, fmt, who):
    """The file a save writes: MindSpore's format= ("ckpt" | "safetensors"; None: by the name)
    appends its suffix where the name lacks it, as MindSpore does. Returns (path, is_ckpt)."""
    name = os.fspath(name)
    if fmt is None:
        return name, name.endswith(".ckpt")
    if fmt not in ("ckpt", "safetensors"):
        raise ValueError("For '%s', the 'format' must be 'ckpt' or 'safetensors', but got %r" % (who, fmt))
    if fmt == "safetensors" and name.endswith(".ckpt"):
        raise ValueError("For '%s', format='safetensors' with a .ckpt name (%s): a .ckpt file is MindSpore's "
                         "format" % (who, name))
    suffix = "." + fmt
    return (name if name.endswith(suffix) else name + suffix), fmt == "ckpt"


def save_checkpoint(save_obj, ckpt_file_name, integrated_save=True, async_save=False, append_dict=None,
                    enc_key=None, enc_mode="AES-GCM", choice_func=None, crc_check=False, format=None, **kwargs):
    """save_obj: a dict {name: numpy array} (or a list of {"name", "data"}), or a network trained
    through a Model. A file name ending in .ckpt (or format="ckpt", which adds the suffix, as
    MindSpore does) is written in MindSpore's format, readable by mindspore.load_checkpoint: a
    network's parameters and BatchNorm statistics under MindSpore's names (gamma, beta,
    moving_mean, moving_variance, embedding_table), append_dict's values beside them. Any other
    name (or format="safetensors") is a safetensors file; for a trained network, its whole
    training checkpoint (parameters, optimizer state, position: what Tessera resumes from).
    Where every rank holds the whole model (stand-alone, data parallel) the calling rank writes it
    alone (`if rank == 0: save_checkpoint(net, f)` works); where the layout cuts it, the call is
    collective (every rank must make it; a rank missing for min(comm_timeout, 30 s) makes it fail,
    naming the rank) and each rank with its own file name gets a copy. integrated_save=False: a
    sliced checkpoint, the directory ckpt_file_name (collective). choice_func(name) -> bool keeps
    the names it accepts (not for a training checkpoint). The file is written atomically."""
    if kwargs:
        raise TypeError("save_checkpoint: unexpected argument(s) %s" % ", ".join(sorted(kwargs)))
    if enc_key is not None:
        raise ValueError("save_checkpoint: enc_key is not supported (checkpoints are written unencrypted)")
    if async_save:
        raise ValueError("save_checkpoint: async_save is not supported here (CheckpointConfig(async_save=True) "
                         "saves in the background during training)")
    if not isinstance(crc_check, bool):
        raise TypeError("save_checkpoint: crc_check must be a bool, got %r" % (crc_check,))
    keep = _names_filter(None, None, choice_func, "save_checkpoint")
    path, ms_format = _checkpoint_name(ckpt_file_name, format, "save_checkpoint")
    t = getattr(save_obj, "_trainer", None) if not isinstance(save_obj, (dict, list)) else None
    if t is not None:
        if ms_format:
            if not integrated_save:
                raise ValueError("save_checkpoint: integrated_save=False (a sliced checkpoint, a directory) with "
                                 "a .ckpt name: a MindSpore .ckpt file holds the whole network")
            _save_net_mindspore(save_obj, t, path, append_dict, keep)
            return
        if append_dict:
            raise ValueError("save_checkpoint: append_dict with a trained network is not supported (the "
                             "checkpoint holds its position and configuration)")
        if choice_func is not None:
            raise ValueError("save_checkpoint: choice_func with a trained network and a safetensors name: the "
                             "training checkpoint is whole (a .ckpt name saves the chosen parameters)")
        t.save(path, not integrated_save)
        return
    if isinstance(save_obj, list):
        save_obj = {d["name"]: d["data"] for d in save_obj}
    if not isinstance(save_obj, dict):
        raise TypeError("save_checkpoint: a dict of numpy arrays or a trained network, got %r" % (save_obj,))
    import numpy as np
    tensors = {k: np.asarray(v) for k, v in save_obj.items() if keep(k) and not isinstance(v, str)}
    if ms_format:
        extra = dict(append_dict or {})
        extra.update({k: v for k, v in save_obj.items() if keep(k) and isinstance(v, str)})
        _save_mindspore(path, tensors, extra)
        return
    meta = {str(k): str(v) for k, v in (append_dict or {}).items()}
    _C.st_save(path, tensors, meta)


def _save_net_mindspore(net, t, path, append_dict, keep):
    """A trained network's parameters and BatchNorm statistics, whole, under MindSpore's names:
    through a whole training checkpoint in a temporary file beside path (gathered from every rank
    where the layout cuts the model; the call is then collective), then path in MindSpore's
    format; the temporary removed."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".safetensors", dir=d)
    os.close(fd)
    try:
        t.save(tmp, False)
        tensors, _, _ = _C.st_load(tmp)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)  # the mapping stays valid
    plain = _strip({k: v for k, v in tensors.items() if k.startswith(("param.", "state."))})
    names = _ms_aliases(net)
    names.update({k: v for k, v in _bn_aliases(plain).items() if k not in names})
    out = {}
    for k, v in plain.items():
        if k.rsplit(".", 1)[-1].startswith("_const_"):
            continue  # a graph constant of several values: the network's own, not a parameter
        k = names.get(k, k)
        if keep(k):
            out[k] = v
    _save_mindspore(path, out, append_dict)


def _strip(d):
    out = {}
    for k, v in d.items():
        for p in ("param.", "state."):
            if k.startswith(p):
                k = k[len(p):]
                break
        out[k] = v
    return out


def load_checkpoint(ckpt_file_name, net=None, strict_load=False, filter_prefix=None, dec_key=None,
                    dec_mode="AES-GCM", specify_prefix=None, choice_func=None, crc_check=False,
                    remove_redundancy=False, format="ckpt", raw=False):
    """{name: numpy array} of a safetensors file (views, no copy), of a MindSpore .ckpt file (its
    tags; append_info strings as str values), or of a sliced checkpoint directory (merged first,
    into a temporary file); DIR/latest: the checkpoint that pointer names. The file's kind is read
    from its first bytes (format is accepted, "ckpt" or "safetensors"). filter_prefix /
    specify_prefix / choice_func: MindSpore's name filters. With net: also loaded into it
    (load_param_into_net)."""
    if dec_key is not None:
        raise ValueError("load_checkpoint: dec_key: encrypted checkpoints are not supported")
    if format not in ("ckpt", "safetensors"):
        raise ValueError("For 'load_checkpoint', the 'format' must be 'ckpt' or 'safetensors', but got %r" % (format,))
    for name, v in (("crc_check", crc_check), ("remove_redundancy", remove_redundancy)):
        if not isinstance(v, bool):
            raise TypeError("For 'load_checkpoint', the '%s' must be a bool, but got %r" % (name, v))
    keep = _names_filter(filter_prefix, specify_prefix, choice_func, "load_checkpoint")
    path = _C.ckpt_resolve(os.fspath(ckpt_file_name))
    tmp = None
    if _C.ckpt_is_sliced(path):
        fd, tmp = tempfile.mkstemp(suffix=".safetensors")
        os.close(fd)
        _C.ckpt_merge(path, tmp)
        path = tmp
    try:
        tensors, meta, ms_file = _C.st_load(path)
    finally:
        if tmp:
            os.unlink(tmp)  # the mapping stays valid
    tessera_file = "tessera.format" in meta  # Tessera's training checkpoint, in either container
    d = tensors if raw or (ms_file and not tessera_file) else _strip(tensors)
    if ms_file and not tessera_file:
        d = dict(d)
        d.update(meta)  # MindSpore's append_info strings
    if filter_prefix is not None or specify_prefix is not None or choice_func is not None:
        d = {k: v for k, v in d.items() if keep(k)}
    if net is not None:
        load_param_into_net(net, d, strict_load)
    return d


def load_distributed_checkpoint(network, checkpoint_filenames, predict_strategy=None, train_strategy_filename=None,
                                strict_load=False, dec_key=None, dec_mode="AES-GCM", format="ckpt"):
    """A distributed run's checkpoint into network, cut for the network's own layout: each rank
    reads only its pieces, whatever layout wrote them (through its trainer when it has one;
    else merged and kept until a Model builds it). checkpoint_filenames: the sliced checkpoint's
    directory, or MindSpore's list of per-rank files: the rank files of one sliced checkpoint
    (rank00000.safetensors, ... beside its manifest), or whole checkpoints (one per rank, each the
    whole model: the first is read). predict_strategy (infer_predict_layout's dict), when given,
    must be the network's own layout (Tessera re-cuts to it: None is enough);
    train_strategy_filename is not needed (the pieces carry their layouts) and is refused."""
    if dec_key is not None:
        raise ValueError("load_distributed_checkpoint: dec_key: encrypted checkpoints are not supported")
    if train_strategy_filename is not None:
        raise ValueError("load_distributed_checkpoint: train_strategy_filename is not needed: a Tessera sliced "
                         "checkpoint records each piece's layout (give None)")
    path = _distributed_path(checkpoint_filenames)
    t = getattr(network, "_trainer", None)
    if predict_strategy is not None:
        if not isinstance(predict_strategy, dict):
            raise TypeError("load_distributed_checkpoint: predict_strategy must be the dict infer_predict_layout "
                            "returns, got %r" % (predict_strategy,))
        if t is not None:
            from .train.model import Model
            mine = Model._layout_dict(t)
            bad = sorted(k for k in predict_strategy if k in mine and
                         list(predict_strategy[k][:3]) != [list(v) for v in mine[k][:3]])
            unknown = sorted(k for k in predict_strategy if k not in mine)
            if bad or unknown:
                raise ValueError("load_distributed_checkpoint: predict_strategy differs from the network's layout for "
                                 "%s: Tessera cuts the checkpoint for the network's own layout (pass "
                                 "model.infer_predict_layout(...) or None)" % ", ".join((bad + unknown)[:5]))
    if t is not None:
        t.load(path, bool(strict_load), False)
        return
    load_checkpoint(path, net=network, strict_load=strict_load)


def _distributed_path(names):
    """The one path a distributed checkpoint is read from (see load_distributed_checkpoint)."""
    if isinstance(names, (str, os.PathLike)):
        names = os.fspath(names)
        if _C.ckpt_is_sliced(names):
            return names
        raise ValueError("load_distributed_checkpoint: %s is not a sliced checkpoint directory (a whole file: "
                         "load_checkpoint / load_param_into_net)" % names)
    if not isinstance(names, (list, tuple)) or not names:
        raise ValueError("load_distributed_checkpoint: checkpoint_filenames must be a sliced checkpoint's directory "
                         "or a list of files, got %r" % (names,))
    names = [os.fspath(n) for n in names]
    dirs = {os.path.dirname(os.path.abspath(n)) for n in names}
    if len(dirs) == 1:
        d = dirs.pop()
        if _C.ckpt_is_sliced(d):  # the rank files of one sliced checkpoint: read through its manifest
            have = {n for n in os.listdir(d) if n.startswith("rank") and n.endswith(".safetensors")}
            given = {os.path.basename(n) for n in names}
            if given != have:
                raise ValueError("load_distributed_checkpoint: %s holds %d rank files, the list names %d (%s): give "
                                 "every rank's file, or the directory" % (d, len(have), len(given),
                                                                          ", ".join(sorted(given ^ have)[:3])))
            return d
    for n in names:
        if _C.ckpt_is_sliced(n) or _C.ckpt_is_sliced(os.path.dirname(os.path.abspath(n))):
            raise ValueError("load_distributed_checkpoint: %s is part of a sliced checkpoint but the list spans other "
                             "directories: give that checkpoint's directory" % n)
        if not os.path.isfile(n):
            raise FileNotFoundError("load_distributed_checkpoint: %s: no such file" % n)
    return names[0]  # whole checkpoints, one per rank (per-rank directories): each is the whole model


def load_param_into_net(net, parameter_dict, strict_load=False, remove_redundancy=False):
    """Copies the arrays into the network's parameters (its trainer's store: this rank's values);
    before the network is built they are kept and copied when a Model creates it. MindSpore's
    names of the layers' parameters (BatchNorm's gamma / beta / moving_mean / moving_variance,
    LayerNorm's gamma / beta, Embedding's embedding_table) load the library's; entries that are
    not arrays (a .ckpt's strings) are skipped. Returns MindSpore's pair (param_not_load,
    ckpt_not_load): the network's parameters the dict did not have (its graph constants of several
    values, which the network records itself, are not asked for), and the dict's names that
    loaded nothing (before a Model: those known after it builds the network, so [])."""
    if not isinstance(parameter_dict, dict):
        raise TypeError("For 'load_param_into_net', the argument 'parameter_dict' should be a dict, but got %s"
                        % type(parameter_dict).__name__)
    if not isinstance(remove_redundancy, bool):
        raise TypeError("For 'load_param_into_net', the 'remove_redundancy' must be a bool, but got %r"
                        % (remove_redundancy,))
    rename = {v: k for k, v in _ms_aliases(net).items()}  # MindSpore's name -> the library's
    arrays = {k: v for k, v in parameter_dict.items() if not isinstance(v, (str, bytes))}
    arrays = _from_ms_names(rename, arrays)
    t = getattr(net, "_trainer", None)
    if t is None:
        pending = dict(net.__dict__.get("_pending_params") or {})  # e.g. Parameter(Tensor(...)) values
        pending.update(arrays)
        net.__dict__["_pending_params"] = pending
        return [], []
    import numpy as np
    store = t.params()
    missing = []
    for name, dst in store.items():
        if name not in arrays:
            if not name.rsplit(".", 1)[-1].startswith("_const_"):  # (a graph constant: the network's own)
                missing.append(name)
            continue
        src = np.asarray(arrays[name])
        if src.shape != dst.shape:
            raise ValueError("load_param_into_net: '%s': checkpoint shape %s, the network's %s"
                             % (name, src.shape, dst.shape))
        np.copyto(dst, src.astype(np.float32, copy=False))
    if strict_load and missing:
        raise ValueError("load_param_into_net: not in the checkpoint: %s" % ", ".join(missing))
    unused = [k for k in parameter_dict if rename.get(k, k) not in store or isinstance(parameter_dict[k], (str, bytes))]
    return missing, unused
