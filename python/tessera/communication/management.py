"""mindspore.communication.management over Tessera's MPI job (see tessera.communication)."""
import os

from .. import context as _context

HCCL_WORLD_COMM_GROUP = "hccl_world_group"
NCCL_WORLD_COMM_GROUP = "nccl_world_group"
MCCL_WORLD_COMM_GROUP = "mccl_world_group"
_WORLD = (HCCL_WORLD_COMM_GROUP, NCCL_WORLD_COMM_GROUP, MCCL_WORLD_COMM_GROUP, None)
_BACKENDS = ("hccl", "nccl", "mccl", "mpi")

_GROUPS_INSTEAD = ("Tessera forms the communication groups of a parallel layout itself, from its device matrix "
                   "(set_auto_parallel_context(parallel_mode=...) and op.shard(...)); only the world group exists")


class GlobalComm:
    """MindSpore's GlobalComm: the backend and the world group's name (init sets them)."""
    BACKEND = "hccl"
    WORLD_COMM_GROUP = HCCL_WORLD_COMM_GROUP
    INITED = False
    CHECK_ENVS = True


def _world(fn, group):
    if group not in _WORLD and group != GlobalComm.WORLD_COMM_GROUP:
        raise ValueError("%s(group=%r): only the world group (GlobalComm.WORLD_COMM_GROUP); %s"
                         % (fn, group, _GROUPS_INSTEAD))


def init(backend_name=None):
    """Starts the job (MPI through the library; a one-process job without mpirun). backend_name
    "hccl", "nccl", "mccl" or None is accepted: Tessera's collectives go over MPI (NCCL between
    GPUs with device_target GPU); its name only sets GlobalComm.BACKEND and WORLD_COMM_GROUP, as
    MindSpore's does. Idempotent."""
    if backend_name is not None:
        b = str(backend_name).lower()
        if b not in _BACKENDS:
            raise ValueError("init(backend_name=%r): expected 'hccl', 'nccl', 'mccl' or None (Tessera's "
                             "collectives run over MPI)" % (backend_name,))
        GlobalComm.BACKEND = b
        GlobalComm.WORLD_COMM_GROUP = {"nccl": NCCL_WORLD_COMM_GROUP,
                                       "mccl": MCCL_WORLD_COMM_GROUP}.get(b, HCCL_WORLD_COMM_GROUP)
    _context.init()
    GlobalComm.INITED = True


def release():
    """Accepted: MPI is finalised when the process exits (after the last collective)."""
    return None


def get_rank(group=GlobalComm.WORLD_COMM_GROUP):
    """This process's rank in the world group."""
    _world("get_rank", group)
    return _context.get_rank()


def get_group_size(group=GlobalComm.WORLD_COMM_GROUP):
    """The job's number of processes."""
    _world("get_group_size", group)
    return _context.get_group_size()


def _local():
    """(local rank, local size) from the launcher's environment, or None."""
    for r, s in (("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                 ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"), ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
                 ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        if r in os.environ and s in os.environ:
            try:
                return int(os.environ[r]), int(os.environ[s].split("(")[0])
            except ValueError:
                pass
    if _context.get_group_size() == 1:
        return 0, 1
    return None


def get_local_rank(group=GlobalComm.WORLD_COMM_GROUP):
    """This process's rank among the job's processes on its host (from mpirun's environment:
    OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, Slurm's SLURM_LOCALID)."""
    _world("get_local_rank", group)
    loc = _local()
    if loc is None:
        raise ValueError("get_local_rank: the launcher did not say this process's local rank (start the job "
                         "with mpirun, srun or tessera launch)")
    return loc[0]


def get_local_rank_size(group=GlobalComm.WORLD_COMM_GROUP):
    """The number of the job's processes on this host (from the launcher's environment)."""
    _world("get_local_rank_size", group)
    loc = _local()
    if loc is None:
        raise ValueError("get_local_rank_size: the launcher did not say how many processes run on this host "
                         "(start the job with mpirun, srun or tessera launch)")
    return loc[1]


def get_world_rank_from_group_rank(group, group_rank_id):
    """In the world group, the rank itself; other groups are refused."""
    _world("get_world_rank_from_group_rank", group)
    return int(group_rank_id)


def get_group_rank_from_world_rank(world_rank_id, group):
    """In the world group, the rank itself; other groups are refused."""
    _world("get_group_rank_from_world_rank", group)
    return int(world_rank_id)


def get_process_group_ranks(group=GlobalComm.WORLD_COMM_GROUP):
    """The world group's ranks, 0..size-1."""
    _world("get_process_group_ranks", group)
    return list(range(_context.get_group_size()))


def create_group(group, rank_ids, options=None):
    """Refused: Tessera has no user-made communication groups."""
    raise ValueError("create_group(%r, %r): not supported; %s" % (group, list(rank_ids), _GROUPS_INSTEAD))


def destroy_group(group):
    """Refused: Tessera has no user-made communication groups."""
    raise ValueError("destroy_group(%r): not supported; %s" % (group, _GROUPS_INSTEAD))
