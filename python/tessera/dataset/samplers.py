"""MindSpore's samplers (mindspore.dataset.*Sampler) as Tessera's data.* keys.

A sampler given to a data set (sampler=..., or .use_sampler(...)) is turned into what Tessera's
pipeline does itself: DistributedSampler = num_shards / shard_id / shuffle (data.shuffle; the
shard is the job's: Tessera's distributed sampler over the data-parallel ranks), RandomSampler =
shuffle=True, SequentialSampler = shuffle=False (num_samples: the first N, data.train_limit).
StratifiedSampler (Tessera's) is the distributed sampler with the same class proportions on every
shard (data.sampler: stratified). Anything MindSpore's samplers do that Tessera's pipeline cannot
(replacement, a random subset of num_samples, subsets, weights, PK) is refused where the sampler
is made, saying what to use instead."""
from .._validator import check_bool, check_int

__all__ = ["DistributedSampler", "RandomSampler", "SequentialSampler", "StratifiedSampler", "SubsetRandomSampler",
           "SubsetSampler", "WeightedRandomSampler", "PKSampler"]


class Sampler:
    """What the data set takes from a sampler: shuffle, num_shards, shard_id, limit (first N),
    stratified."""
    shuffle = True
    num_shards = None
    shard_id = None
    limit = None
    stratified = False

    def add_child(self, sampler):
        raise ValueError("%s.add_child: chained samplers are not supported (Tessera's pipeline has one sampler: "
                         "give the data set one of DistributedSampler, RandomSampler, SequentialSampler)"
                         % type(self).__name__)

    def get_num_samples(self):
        return self.limit

    def __repr__(self):
        return "%s(shuffle=%r, num_shards=%r, shard_id=%r)" % (type(self).__name__, self.shuffle, self.num_shards,
                                                               self.shard_id)


def _shard_args(cls, num_shards, shard_id):
    num_shards = check_int(num_shards, "num_shards", cls, 1)
    shard_id = check_int(shard_id, "shard_id", cls, 0)
    if not 0 <= shard_id < num_shards:
        raise ValueError("%s(num_shards=%r, shard_id=%r): shard_id must be in [0, num_shards)"
                         % (cls, num_shards, shard_id))


class DistributedSampler(Sampler):
    """mindspore.dataset.DistributedSampler: shard shard_id of num_shards (the job's size and this
    rank: Tessera shards over the data-parallel ranks itself), shuffled each epoch when shuffle.
    num_samples (a per-shard cap) and offset are refused."""

    def __init__(self, num_shards, shard_id, shuffle=True, num_samples=None, offset=-1):
        _shard_args("DistributedSampler", num_shards, shard_id)
        if num_samples is not None:
            raise ValueError("DistributedSampler(num_samples=%r): not supported (Tessera caps the whole data set, "
                             "not each shard: give the data set num_samples=N for its first N samples)"
                             % (num_samples,))
        if offset not in (-1, 0):
            raise ValueError("DistributedSampler(offset=%r): not supported (Tessera's shard r takes positions r, "
                             "r + num_shards, ... of the epoch's order)" % (offset,))
        self.num_shards, self.shard_id = int(num_shards), int(shard_id)
        self.shuffle = check_bool(shuffle, "shuffle", "DistributedSampler")


class StratifiedSampler(DistributedSampler):
    """Tessera's: DistributedSampler with the same class proportions on every shard
    (data.sampler: stratified; the labels are read without the samples where the source can)."""

    def __init__(self, num_shards, shard_id, shuffle=True):
        super().__init__(num_shards, shard_id, shuffle)
        self.stratified = True


class RandomSampler(Sampler):
    """mindspore.dataset.RandomSampler: a new permutation every epoch (shuffle=True).
    replacement=True and num_samples (a random subset each epoch) are refused."""

    def __init__(self, replacement=False, num_samples=None):
        if replacement:
            raise ValueError("RandomSampler(replacement=True): not supported (Tessera samples each epoch as a "
                             "permutation: use replacement=False)")
        if num_samples is not None:
            raise ValueError("RandomSampler(num_samples=%r): a random subset each epoch is not supported (give the "
                             "data set num_samples=N: its first N samples, shuffled each epoch)" % (num_samples,))
        self.shuffle = True


class SequentialSampler(Sampler):
    """mindspore.dataset.SequentialSampler: the source's order (shuffle=False); num_samples = the
    first N samples (data.train_limit). start_index other than 0 is refused."""

    def __init__(self, start_index=None, num_samples=None):
        if start_index not in (None, 0):
            raise ValueError("SequentialSampler(start_index=%r): not supported (Tessera starts at sample 0: slice "
                             "the source instead)" % (start_index,))
        num_samples = check_int(num_samples, "num_samples", "SequentialSampler", 1, allow_none=True)
        self.shuffle = False
        self.limit = num_samples


def _refused(name, instead):
    def init(self, *args, **kw):
        raise ValueError("%s: not supported by Tessera's pipeline (%s)" % (name, instead))
    return type(name, (Sampler,), {"__init__": init, "__doc__": "Refused: " + instead})


SubsetRandomSampler = _refused("SubsetRandomSampler", "give the data set only those samples (a source over the "
                               "subset) with shuffle=True")
SubsetSampler = _refused("SubsetSampler", "give the data set only those samples (a source over the subset) with "
                         "shuffle=False")
WeightedRandomSampler = _refused("WeightedRandomSampler", "no weighted sampling; StratifiedSampler keeps the class "
                                 "proportions on every shard")
PKSampler = _refused("PKSampler", "no per-class sampling; StratifiedSampler keeps the class proportions on every "
                     "shard")


def apply(ds, sampler, where):
    """Sets ds's shuffle / num_shards / shard_id / num_samples / stratified from sampler, refusing
    MindSpore's conflicts (a sampler with shuffle or num_shards given too)."""
    if not isinstance(sampler, Sampler):
        raise ValueError("%s: sampler=%r: expected a tessera.dataset sampler (DistributedSampler, RandomSampler, "
                         "SequentialSampler, StratifiedSampler); an iterable of indices is not supported"
                         % (where, sampler))
    if ds.num_samples is not None and sampler.limit is not None:
        raise ValueError("%s: num_samples and the sampler's num_samples cannot both be given" % where)
    ds._shuffle = sampler.shuffle
    ds.num_shards, ds.shard_id = sampler.num_shards, sampler.shard_id
    if sampler.limit is not None:
        ds.num_samples = sampler.limit
    ds._stratified = sampler.stratified
    ds.sampler = sampler
