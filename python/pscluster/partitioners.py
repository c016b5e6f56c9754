"""TF's variable partitioners (tf.distribute.experimental.partitioners).

Each is a description the C++ coordinator core applies (common/partitioner.h,
ParsePartitioner): variables are split along axis 0 into shards
`NAME/part_i`, placed round-robin over the PS tasks, exactly as YAML jobs'
variables are.
"""

import _pscluster


class Partitioner:
    """Base class: `spec()` is the C++ core's partitioner text."""

    def spec(self):
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}({self.spec()!r})"


class FixedShardsPartitioner(Partitioner):
    """`num_shards` shards along axis 0 (fewer when the variable has fewer
    rows)."""

    def __init__(self, num_shards):
        self.num_shards = int(num_shards)
        _pscluster.check_partitioner(self.spec())

    def spec(self):
        return f"fixed:{self.num_shards}"


class MinSizePartitioner(Partitioner):
    """Shards of at least `min_shard_bytes` each, at most `max_shards`."""

    def __init__(self, min_shard_bytes=256 << 10, max_shards=1, bytes_per_string=16):
        del bytes_per_string  # float32 variables only
        self.min_shard_bytes = int(min_shard_bytes)
        self.max_shards = int(max_shards)
        _pscluster.check_partitioner(self.spec())

    def spec(self):
        return f"min_size:{self.min_shard_bytes}:{self.max_shards}"


class MaxSizePartitioner(Partitioner):
    """Shards of at most `max_shard_bytes` each (max_shards: 0 = no bound)."""

    def __init__(self, max_shard_bytes, max_shards=None, bytes_per_string=16):
        del bytes_per_string
        self.max_shard_bytes = int(max_shard_bytes)
        self.max_shards = int(max_shards or 0)
        _pscluster.check_partitioner(self.spec())

    def spec(self):
        return f"max_size:{self.max_shard_bytes}:{self.max_shards}"


def to_spec(partitioner):
    """The C++ text of `partitioner`: None, a Partitioner, or the text itself
    ("none", "fixed:2", ...). pscluster.Error INVALID_ARGUMENT for an
    unknown one."""
    if partitioner is None:
        return "none"
    if isinstance(partitioner, Partitioner):
        return partitioner.spec()
    if isinstance(partitioner, str):
        _pscluster.check_partitioner(partitioner)
        return partitioner
    raise TypeError(
        "variable_partitioner must be a pscluster.partitioners.FixedShardsPartitioner, "
        "MinSizePartitioner or MaxSizePartitioner (or their text, e.g. 'fixed:2'), not "
        f"{partitioner!r} (TF's callables are not understood by the PS)")
