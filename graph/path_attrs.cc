// Paths a graph's attributes name, confined for a node (graph/path_attrs.h).
#include "graph/path_attrs.h"

#include <filesystem>

namespace sf {

Status CheckRelativePath(const std::string& path, const std::string& what, const std::string& root) {
  if (path.empty()) return InvalidArgument(what + " is empty");
  if (path.find('\0') != std::string::npos) return InvalidArgument(what + " holds a NUL byte");
  const std::filesystem::path p(path);
  if (p.is_absolute()) return InvalidArgument(what + " '" + path + "' is absolute; on a node it is relative to " + root);
  for (const auto& part : p)
    if (part == "..") return InvalidArgument(what + " '" + path + "' leaves " + root + " ('..')");
  return Status::OK();
}

namespace {

// The lines of a kDataFiles attribute (empty lines skipped, as the reader does).
std::vector<std::string> Lines(const std::string& joined) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= joined.size()) {
    size_t nl = joined.find('\n', from);
    if (nl == std::string::npos) nl = joined.size();
    if (nl > from) out.push_back(joined.substr(from, nl - from));
    from = nl + 1;
  }
  return out;
}

}  // namespace

Status ConfineNodePaths(const OpDef& def, const std::string& node, const NodeDirs& dirs, AttrMap* attrs) {
  for (const AttrDef& a : def.attrs) {
    if (a.path == PathAttr::kNone) continue;
    auto value = attrs->GetOr<std::string>(a.name, "");
    if (!value.ok()) return value.status().WithPrefix("node '" + node + "'");
    if (value->empty()) continue;  // names no file (an optional directory left out)
    const bool checkpoint = a.path == PathAttr::kCheckpointDir;
    const std::string& root = checkpoint ? dirs.checkpoint_dir : dirs.data_dir;
    const char* flag = checkpoint ? "--checkpoint-dir" : "--data-dir";
    const std::string what = "node '" + node + "' (op " + def.name + "): attribute " + a.name;
    if (root.empty())
      return FailedPrecondition(what + " names '" + *value + "', but this node has no " + flag +
                                ": a session's graph reaches no file of the node outside the directories its "
                                "operator gave it (shardflow node " + flag + " DIR)");
    const std::string root_name = std::string("the node's ") + flag;
    if (a.path != PathAttr::kDataFiles) {
      SF_RETURN_IF_ERROR(CheckRelativePath(*value, what, root_name));
      continue;
    }
    std::string rooted;
    for (const std::string& f : Lines(*value)) {
      SF_RETURN_IF_ERROR(CheckRelativePath(f, what, root_name));
      rooted += (rooted.empty() ? "" : "\n") + root + "/" + f;
    }
    attrs->Set(a.name, rooted);
  }
  return Status::OK();
}

Status ConfineGraphPaths(Graph* g, const NodeDirs& dirs, const std::vector<int>& nodes) {
  const OpRegistry& reg = g->registry();
  for (int i : nodes) {
    Node& n = g->mutable_node(i);
    const OpDef* def = reg.Find(n.op);
    if (!def) continue;  // a graph holds only registered ops (Graph::AddNode)
    SF_RETURN_IF_ERROR(ConfineNodePaths(*def, n.name, dirs, &n.attrs));
  }
  return Status::OK();
}

bool LooksLikePathAttr(const std::string& name) {
  for (const char* word : {"dir", "path", "file", "prefix", "root", "url", "pattern", "glob", "location", "folder"})
    if (name.find(word) != std::string::npos) return true;
  return false;
}

}  // namespace sf
