// The standard op groups, one per file in graph/ops/; RegisterStandardOps
// (shardflow/op_registry.h) calls each. Each returns the first registration
// error, naming the op.
#pragma once

#include "shardflow/op_registry.h"

namespace sf {

// The groups, one per file in graph/ops/.
Status RegisterCoreOps(OpRegistry& reg);
Status RegisterArrayOps(OpRegistry& reg);
Status RegisterShapeOps(OpRegistry& reg);
Status RegisterMathOps(OpRegistry& reg);
Status RegisterNNOps(OpRegistry& reg);
Status RegisterStateOps(OpRegistry& reg);
Status RegisterCheckpointOps(OpRegistry& reg);  // ops/checkpoint_ops.cc
Status RegisterRandomOps(OpRegistry& reg);
Status RegisterTrainingOps(OpRegistry& reg);
// Replication ops (graph/ops/replication_ops.cc): ApplyGradientSync, ApplyGradientAsync,
// ReadVariableWithVersion, SyncReplicaStats, StalenessStats, AbortSyncStep, StaleSyncWait,
// AllReduce.
Status RegisterReplicationOps(OpRegistry& reg);
Status RegisterControlFlowOps(OpRegistry& reg);
Status RegisterQueueOps(OpRegistry& reg);
Status RegisterSendRecvOps(OpRegistry& reg);
Status RegisterEmbeddingOps(OpRegistry& reg);  // graph/ops/embedding_ops.cc
Status RegisterReaderOps(OpRegistry& reg);     // graph/ops/reader_ops.cc
Status RegisterChunkQueueOps(OpRegistry& reg);  // graph/ops/chunk_queue_ops.cc
Status RegisterInteractionOps(OpRegistry& reg);  // graph/ops/interaction_ops.cc

}  // namespace sf
