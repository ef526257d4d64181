// Namespaces on a node: every session credential carries one (the default
// namespace when it names none), and a node keeps each namespace's
// variables, tables, queues, all-reduce groups and directories apart by
// scoping their names where a session's request or graph enters the node.
// A name of namespace NS is stored as "@NS/NAME"; the default namespace's
// names are stored as given, and a name a session gives may not start with
// '@' (so no session can spell another namespace's stored name). Directories
// are scoped alike ("@NS/DIR" under the node's --checkpoint-dir or
// --data-dir). In one process (Session) nothing here runs.
//
// Thread-safety: free functions; ScopeGraphState writes only the graph it is given.
#pragma once

#include <string>

#include "shardflow/graph.h"
#include "shardflow/op_registry.h"
#include "shardflow/status.h"

namespace sf {

// The default namespace's name, as the CLI and the listings print it (its
// names are stored unscoped, and a credential naming it carries none).
constexpr const char kDefaultNamespace[] = "default";

// OK for a namespace name: [A-Za-z0-9._-]{1,64}; InvalidArgument naming it otherwise.
Status CheckNamespace(const std::string& ns);

// OK for a name a session gives (a variable, queue, group): InvalidArgument
// naming `what` when it starts with '@', which namespaces reserve.
Status CheckSessionName(const std::string& name, const std::string& what);

// OK for a directory a session gives: InvalidArgument naming `what` when a
// component starts with '@'.
Status CheckSessionDir(const std::string& dir, const std::string& what);

// How namespace ns stores directory dir (relative to the node's directory).
std::string ScopedDir(const std::string& ns, const std::string& dir);

// How namespace ns ("" or kDefaultNamespace: the default) stores name.
std::string ScopedName(const std::string& ns, const std::string& name);

// The namespace a stored name belongs to ("" for the default).
std::string NamespaceOf(const std::string& stored);

// Whether stored belongs to namespace ns, and if so (when out is not null)
// the name its sessions know it by.
bool InNamespace(const std::string& ns, const std::string& stored, std::string* out = nullptr);

// Scopes every state attribute (StateAttr) of every node of g to namespace
// ns, and every directory attribute (PathAttr::kCheckpointDir, kDataDir;
// data files stay shared input). InvalidArgument naming the node and
// attribute when a session's name (or a directory's component) starts with '@'.
Status ScopeGraphState(Graph* g, const std::string& ns);

// ScopeGraphState's directory part for one node's attributes (before the
// paths are confined: the scoped path is still relative).
Status ScopeNodeDirs(const OpDef& def, const std::string& node, const std::string& ns, AttrMap* attrs);

}  // namespace sf
