"""mindspore.Profiler over Tessera's profiler (docs/profiling.md): a Profiler made before
Model.train records every step of the Models trained while it is active (log.profile: trace), and
analyse() writes the per-op tables `tessera profile --summary` prints."""
import os

from . import _C

_active = [None]


class Profiler:
    """Profiler(output_path="./data", start_profile=True, profile_communication=...): the
    Models trained after it is made (until stop() or analyse()) write one Chrome/Perfetto trace,
    <output_path>/trace.json (every rank's events, merged by rank 0), as log.profile: trace with
    log.trace. analyse(): on rank 0, writes <output_path>/summary.txt (per op type and per
    operator: calls, total and mean ms, share) and returns its text; None on the other ranks.
    Communication is always recorded; other MindSpore options are refused (ValueError naming
    them)."""

    def __init__(self, output_path="./data", start_profile=True, profile_communication=True, **kwargs):
        if kwargs:
            raise ValueError("Profiler: %s not supported (Tessera records every op, communication and the step "
                             "breakdown: docs/profiling.md)" % ", ".join(sorted(kwargs)))
        if not start_profile:
            raise ValueError("Profiler: start_profile=False is not supported: make the Profiler just before the "
                             "Model.train to record")
        if not profile_communication:
            raise ValueError("Profiler: profile_communication=False is not supported (always recorded)")
        self.output_path = os.path.abspath(output_path)
        self.trace = os.path.join(self.output_path, "trace.json")
        _active[0] = self

    def start(self):
        _active[0] = self

    def stop(self):
        if _active[0] is self:
            _active[0] = None

    def keys(self):
        return {"log.profile": "trace", "log.trace": self.trace, "log.profile_start": 1}

    def analyse(self, top=30):
        """The per-op tables of the recorded trace (rank 0; None elsewhere), also written to
        <output_path>/summary.txt."""
        self.stop()
        rank = _C.rank_size()[0]
        if rank != 0:
            return None
        if not os.path.exists(self.trace):
            raise ValueError("Profiler.analyse: no trace at %s (was a Model trained after the Profiler was made?)"
                             % self.trace)
        text = _C.trace_summary(self.trace, int(top))
        tmp = os.path.join(self.output_path, ".summary.txt.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.output_path, "summary.txt"))
        return text


def active_keys():
    """The config keys of the active Profiler ({} when none)."""
    p = _active[0]
    return p.keys() if p is not None else {}
