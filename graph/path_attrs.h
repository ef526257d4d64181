// Paths a graph's attributes name, confined for a node: a session's graph
// runs on a node whose files are its operator's, so every attribute an op
// declares as naming files (OpBuilder::Path, PathAttr in
// shardflow/op_registry.h) must be a relative path under a directory the
// operator gave the node (--data-dir, --checkpoint-dir). In one process
// (Session) nothing here runs: the user's own paths are used as given.
//
// Thread-safety: free functions; ConfineGraphPaths writes only the graph
// it is given.
#pragma once

#include <string>
#include <vector>

#include "shardflow/graph.h"
#include "shardflow/op_registry.h"
#include "shardflow/status.h"

namespace sf {

// OK when path is a non-empty relative path without a ".." component or a
// NUL byte; else InvalidArgument "WHAT 'PATH' is absolute; on a node it is
// relative to ROOT" or "WHAT 'PATH' leaves ROOT ('..')".
Status CheckRelativePath(const std::string& path, const std::string& what, const std::string& root);

// The directories a node's operator gave it ("": none, and an op naming a
// path under it is refused with FailedPrecondition naming the flag).
struct NodeDirs {
  std::string data_dir;        // --data-dir
  std::string checkpoint_dir;  // --checkpoint-dir
};

// Checks (and roots) the path attributes `def` declares in attrs, those of
// node `node` (for errors), as ConfineGraphPaths does for each node.
Status ConfineNodePaths(const OpDef& def, const std::string& node, const NodeDirs& dirs, AttrMap* attrs);

// Checks every path attribute of g's nodes `nodes` (those a registration
// runs; CheckRelativePath, naming the node, its op and the attribute) and
// roots those the kernels open as given (PathAttr::kDataFiles: each line
// becomes data_dir/LINE). Directory attributes stay relative: the node's
// checkpoint service and variable shards root them where they open them.
// InvalidArgument, or FailedPrecondition when this node has no such
// directory, naming the node.
Status ConfineGraphPaths(Graph* g, const NodeDirs& dirs, const std::vector<int>& nodes);

// Whether an attribute's name says it names files ("dir", "path", "file",
// "prefix", ...): every such string attribute of a registered op must be
// declared a path or not-a-path on purpose (the registry test).
bool LooksLikePathAttr(const std::string& attr_name);

}  // namespace sf
