// Namespaces on a node (graph/namespaces.h).
#include "graph/namespaces.h"

#include <filesystem>

#include "shardflow/op_registry.h"

namespace sf {

namespace {

bool IsDefault(const std::string& ns) { return ns.empty() || ns == kDefaultNamespace; }

}  // namespace

Status CheckNamespace(const std::string& ns) {
  bool ok = !ns.empty() && ns.size() <= 64;
  for (char c : ns)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                c == '-');
  if (!ok)
    return InvalidArgument("namespace '" + ns.substr(0, 80) + "' refused: a namespace is 1 to 64 of [A-Za-z0-9._-]");
  return Status::OK();
}

Status CheckSessionName(const std::string& name, const std::string& what) {
  if (!name.empty() && name[0] == '@')
    return InvalidArgument(what + " '" + name.substr(0, 80) +
                           "' starts with '@', which is reserved for namespaces on a node");
  return Status::OK();
}

Status CheckSessionDir(const std::string& dir, const std::string& what) {
  for (const auto& part : std::filesystem::path(dir))
    if (!part.empty() && part.native()[0] == '@')
      return InvalidArgument(what + " '" + dir.substr(0, 200) + "' has a component starting with '@', " +
                             "which is reserved for namespaces on a node");
  return Status::OK();
}

std::string ScopedName(const std::string& ns, const std::string& name) {
  return IsDefault(ns) ? name : "@" + ns + "/" + name;
}

std::string ScopedDir(const std::string& ns, const std::string& dir) {
  return IsDefault(ns) || dir.empty() ? dir : "@" + ns + "/" + dir;
}

std::string NamespaceOf(const std::string& stored) {
  if (stored.empty() || stored[0] != '@') return "";
  const size_t slash = stored.find('/');
  return stored.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
}

bool InNamespace(const std::string& ns, const std::string& stored, std::string* out) {
  if (IsDefault(ns)) {
    if (!stored.empty() && stored[0] == '@') return false;
    if (out) *out = stored;
    return true;
  }
  const std::string prefix = "@" + ns + "/";
  if (stored.compare(0, prefix.size(), prefix) != 0) return false;
  if (out) *out = stored.substr(prefix.size());
  return true;
}

Status ScopeNodeDirs(const OpDef& def, const std::string& node, const std::string& ns, AttrMap* attrs) {
  for (const AttrDef& a : def.attrs) {
    if (a.path != PathAttr::kCheckpointDir && a.path != PathAttr::kDataDir) continue;
    auto value = attrs->GetOr<std::string>(a.name, "");
    if (!value.ok()) return value.status().WithPrefix("node '" + node + "'");
    if (value->empty()) continue;
    SF_RETURN_IF_ERROR(CheckSessionDir(*value, "node '" + node + "' (op " + def.name + "): attribute " + a.name));
    attrs->Set(a.name, ScopedDir(ns, *value));
  }
  return Status::OK();
}

Status ScopeGraphState(Graph* g, const std::string& ns) {
  const OpRegistry& reg = g->registry();
  for (int i = 0; i < g->num_nodes(); ++i) {
    Node& n = g->mutable_node(i);
    const OpDef* def = reg.Find(n.op);
    if (!def) continue;  // a graph holds only registered ops (Graph::AddNode)
    SF_RETURN_IF_ERROR(ScopeNodeDirs(*def, n.name, ns, &n.attrs));
    for (const AttrDef& a : def->attrs) {
      if (a.state == StateAttr::kNone) continue;
      auto value = n.attrs.GetOr<std::string>(a.name, "");
      if (!value.ok()) return value.status().WithPrefix("node '" + n.name + "'");
      const std::string what = "node '" + n.name + "' (op " + def->name + "): attribute " + a.name;
      if (a.state == StateAttr::kName) {
        if (value->empty()) continue;  // the op refuses it when it runs
        SF_RETURN_IF_ERROR(CheckSessionName(*value, what));
        n.attrs.Set(a.name, ScopedName(ns, *value));
        continue;
      }
      std::string scoped;  // kNames: one per line
      size_t from = 0;
      while (from <= value->size()) {
        size_t nl = value->find('\n', from);
        if (nl == std::string::npos) nl = value->size();
        const std::string line = value->substr(from, nl - from);
        SF_RETURN_IF_ERROR(CheckSessionName(line, what));
        if (from > 0) scoped += '\n';
        scoped += line.empty() ? line : ScopedName(ns, line);
        from = nl + 1;
      }
      n.attrs.Set(a.name, scoped);
    }
  }
  return Status::OK();
}

}  // namespace sf
