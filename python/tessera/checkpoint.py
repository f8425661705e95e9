"""Checkpoints as dicts of numpy arrays (safetensors files; docs/checkpoints.md).

load_checkpoint returns views into the file's memory (no copy; the arrays keep it open). A
Tessera training checkpoint holds "param.<name>" (trainable), "state.<name>" (BatchNorm
statistics), optimizer slots and the position; load_checkpoint strips the "param."/"state."
prefixes (the names are the network's), and keeps the other entries under their own names."""
import os
import tempfile

from . import _C


def save_checkpoint(save_obj, ckpt_file_name, integrated_save=True, async_save=False, append_dict=None,
                    enc_key=None, enc_mode="AES-GCM", choice_func=None, **kwargs):
    """save_obj: a dict {name: numpy array} (or a list of {"name", "data"}), or a network trained
    through a Model: its whole training checkpoint (parameters, optimizer state, position). Where
    every rank holds the whole model (stand-alone, data parallel) the calling rank writes it alone
    (`if rank == 0: save_checkpoint(net, f)` works); where the layout cuts it, the call is
    collective (every rank must make it; a rank missing for min(comm_timeout, 30 s) makes it fail,
    naming the rank) and each rank with its own file name gets a copy. integrated_save=False: a
    sliced checkpoint, the directory ckpt_file_name (collective). The file is written atomically."""
    if kwargs:
        raise TypeError("save_checkpoint: unexpected argument(s) %s" % ", ".join(sorted(kwargs)))
    if enc_key is not None or choice_func is not None:
        raise ValueError("save_checkpoint: %s is not supported" % ("enc_key" if enc_key is not None else "choice_func"))
    if async_save:
        raise ValueError("save_checkpoint: async_save is not supported here (CheckpointConfig(async_save=True) "
                         "saves in the background during training)")
    t = getattr(save_obj, "_trainer", None) if not isinstance(save_obj, (dict, list)) else None
    if t is not None:
        if append_dict:
            raise ValueError("save_checkpoint: append_dict with a trained network is not supported (the "
                             "checkpoint holds its position and configuration)")
        t.save(ckpt_file_name, not integrated_save)
        return
    if isinstance(save_obj, list):
        save_obj = {d["name"]: d["data"] for d in save_obj}
    if not isinstance(save_obj, dict):
        raise TypeError("save_checkpoint: a dict of numpy arrays or a trained network, got %r" % (save_obj,))
    import numpy as np
    tensors = {k: np.asarray(v) for k, v in save_obj.items()}
    meta = {str(k): str(v) for k, v in (append_dict or {}).items()}
    _C.st_save(ckpt_file_name, tensors, meta)


def _strip(d):
    out = {}
    for k, v in d.items():
        for p in ("param.", "state."):
            if k.startswith(p):
                k = k[len(p):]
                break
        out[k] = v
    return out


def load_checkpoint(ckpt_file_name, net=None, strict_load=False, raw=False):
    """{name: numpy array} of a safetensors file (views, no copy), or of a sliced checkpoint
    directory (merged first, into a temporary file); DIR/latest: the checkpoint that pointer names.
    With net: also loaded into it (load_param_into_net)."""
    path = _C.ckpt_resolve(ckpt_file_name)
    tmp = None
    if _C.ckpt_is_sliced(path):
        fd, tmp = tempfile.mkstemp(suffix=".safetensors")
        os.close(fd)
        _C.ckpt_merge(path, tmp)
        path = tmp
    try:
        tensors, meta = _C.st_load(path)
    finally:
        if tmp:
            os.unlink(tmp)  # the mapping stays valid
    d = tensors if raw else _strip(tensors)
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


def load_param_into_net(net, parameter_dict, strict_load=False):
    """Copies the arrays into the network's parameters (its trainer's store: this rank's values);
    before the network is built they are kept and copied when a Model creates it. Returns the
    names of the network's parameters that were not in the dict (its graph constants of several
    values, which the network records itself, are not asked for)."""
    t = getattr(net, "_trainer", None)
    if t is None:
        pending = dict(net.__dict__.get("_pending_params") or {})  # e.g. Parameter(Tensor(...)) values
        pending.update(parameter_dict)
        net.__dict__["_pending_params"] = pending
        return []
    import numpy as np
    store = t.params()
    missing = []
    for name, dst in store.items():
        if name not in parameter_dict:
            if not name.rsplit(".", 1)[-1].startswith("_const_"):  # (a graph constant: the network's own)
                missing.append(name)
            continue
        src = np.asarray(parameter_dict[name])
        if src.shape != dst.shape:
            raise ValueError("load_param_into_net: '%s': checkpoint shape %s, the network's %s"
                             % (name, src.shape, dst.shape))
        np.copyto(dst, src.astype(np.float32, copy=False))
    if strict_load and missing:
        raise ValueError("load_param_into_net: not in the checkpoint: %s" % ", ".join(missing))
    return missing
