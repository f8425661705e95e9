"""tessera.communication: MindSpore's mindspore.communication (init, get_rank, get_group_size,
get_local_rank, get_local_rank_size, GlobalComm, the world group names). The job's processes
are MPI's (mpirun / tessera launch); the only group is the world: Tessera forms the groups a
parallel layout needs itself (from the device matrix), so create_group and the other group
functions are refused with ValueError saying what to use instead."""
from .management import (GlobalComm, HCCL_WORLD_COMM_GROUP, MCCL_WORLD_COMM_GROUP, NCCL_WORLD_COMM_GROUP,
                         create_group, destroy_group, get_group_rank_from_world_rank, get_group_size,
                         get_local_rank, get_local_rank_size, get_process_group_ranks, get_rank,
                         get_world_rank_from_group_rank, init, release)
from . import management

__all__ = ["init", "release", "get_rank", "get_group_size", "get_local_rank", "get_local_rank_size",
           "get_world_rank_from_group_rank", "get_group_rank_from_world_rank", "create_group", "destroy_group",
           "get_process_group_ranks", "GlobalComm", "HCCL_WORLD_COMM_GROUP", "NCCL_WORLD_COMM_GROUP",
           "MCCL_WORLD_COMM_GROUP", "management"]
