"""Sharded embedding tables: a rows x dim float32 table split over shard variables.

    table = sf.embedding.EmbeddingTable("items", rows=1_000_000, dim=32, num_shards=4)
    emb = table.lookup(ids, combiner="sum")        # ids [batch, k] -> [batch, 32]
    train = sf.train.AdagradOptimizer(0.1).minimize(loss)   # sparse updates in the shards

Each lookup runs in the shard actors that hold the rows; Minimize turns the
gradient of each lookup into a sparse update applied there.
"""

from . import _core
from . import graph as _graph

__all__ = ["EmbeddingTable", "HashEmbeddingTable"]


class EmbeddingTable:
    """A table of the graph: shard variables "<name>/part_<k>" and their initializers."""

    def __init__(self, name, rows, dim, num_shards=1, partition="mod", initializer="uniform", scale=-1.0,
                 seed=0, trainable=True, graph=None):
        g = graph or _graph.get_default_graph()
        self.graph = g
        self._t = _core.embedding_table(g._g, name, int(rows), int(dim), int(num_shards), partition, initializer,
                                        float(scale), int(seed), bool(trainable))
        self.shards = [_graph.Tensor(g, *r) for r in self._t.shards]

    name = property(lambda self: self._t.name)
    rows = property(lambda self: self._t.rows)
    dim = property(lambda self: self._t.dim)
    partition = property(lambda self: self._t.partition)

    read_only = property(lambda self: self._t.read_only)

    def read_only_view(self):
        """The same table for evaluation or serving: lookups through the view read the rows as they are
        and change nothing (a hash table makes no row, counts no sighting for admission, expires
        nothing); a loss read through it cannot train it (minimize raises)."""
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._t = _core.read_only_view(self._t)
        return view

    def _ids(self, ids):
        return _graph._ref_in(ids, self.graph, "ids")

    def lookup(self, ids, combiner="sum"):
        """ids [batch, k] (int32/int64) -> [batch, dim] ("sum", "mean") or [batch, k, dim] ("none")."""
        return _graph.Tensor(self.graph, *_core.embedding_lookup(self.graph._g, self._t, "dense", self._ids(ids),
                                                                 None, -1, combiner))

    def lookup_bag(self, ids, offsets, combiner="sum"):
        """Bags as PyTorch's EmbeddingBag: bag b is ids[offsets[b]:offsets[b+1]] -> [batch, dim]."""
        return _graph.Tensor(self.graph, *_core.embedding_lookup(self.graph._g, self._t, "bag", self._ids(ids),
                                                                 self._ids(offsets), -1, combiner))

    def lookup_segments(self, ids, segment_ids, num_segments, combiner="sum"):
        """Bags given by the example of each id (segment_ids in [0, num_segments)) -> [num_segments, dim]."""
        return _graph.Tensor(self.graph, *_core.embedding_lookup(self.graph._g, self._t, "segments", self._ids(ids),
                                                                 self._ids(segment_ids), int(num_segments), combiner))

    def __repr__(self):
        return f"<sf.embedding.EmbeddingTable '{self.name}' {self.rows}x{self.dim} shards={len(self.shards)}>"


class HashEmbeddingTable(EmbeddingTable):
    """A table keyed by any int64 id (hashed feature ids, negative too): rows are made on first use.

        users = sf.embedding.HashEmbeddingTable("users", dim=32, num_shards=4, min_count=3, ttl_steps=10_000)
        emb = users.lookup(ids)    # the same lookups and sparse optimizers as EmbeddingTable

    Options are those of the C++ HashEmbeddingTableOptions (shardflow/embedding.h): num_shards,
    initializer, scale, seed, trainable, min_count, admit_probability, filter_width, filter_depth,
    ttl_steps, max_rows, eviction ("lru" or "lfu"), ram_budget_bytes and cold_dir (the RocksDB
    cold tier). An unknown option or a bad value raises InvalidArgumentError naming the table.
    """

    def __init__(self, name, dim, graph=None, **options):
        g = graph or _graph.get_default_graph()
        self.graph = g
        self._t = _core.hash_embedding_table(g._g, name, int(dim), options)
        self.shards = [_graph.Tensor(g, *r) for r in self._t.shards]

    def __repr__(self):
        return f"<sf.embedding.HashEmbeddingTable '{self.name}' dim={self.dim} shards={len(self.shards)}>"
