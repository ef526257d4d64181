// Namespaces' names (graph/namespaces.h): every registered op's attribute
// that names shared state is declared so, and a node scopes each of them
// (and each directory) to the session's namespace; a session cannot spell
// another namespace's name. The walk covers every op of the registry, so a
// new op naming shared state cannot slip through undeclared or unscoped.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <utility>

#include "graph/namespaces.h"
#include "shardflow/graph.h"
#include "shardflow/op_registry.h"
#include "shardflow/ops.h"

using namespace sf;

namespace {

bool Contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

// Whether an attribute's name says it names shared state.
bool LooksLikeStateName(const std::string& name) {
  return name == "shared_name" || name == "names" || name == "group_key" || name == "container";
}

// String attributes named like state that name none, each with why.
const std::set<std::pair<std::string, std::string>> kNotState = {};

}  // namespace

TEST_CASE("Namespaces: every attribute that names shared state is declared", "[graph][namespaces]") {
  OpRegistry reg;
  REQUIRE(RegisterStandardOps(reg).ok());
  int declared = 0;
  for (const std::string& op : reg.Names()) {
    for (const AttrDef& a : reg.Find(op)->attrs) {
      if (a.state != StateAttr::kNone) {
        ++declared;
        CHECK(std::holds_alternative<std::string>(a.default_value));
        continue;
      }
      if (!std::holds_alternative<std::string>(a.default_value) || !LooksLikeStateName(a.name)) continue;
      INFO("op " << op << ", attribute " << a.name << ": declare it with OpBuilder::State (or list it in kNotState)");
      CHECK(kNotState.count({op, a.name}) == 1);
    }
  }
  const std::pair<const char*, const char*> known[] = {{"VarHandle", "shared_name"},     {"FIFOQueue", "shared_name"},
                                                       {"ChunkQueue", "shared_name"},    {"AllReduce", "group_key"},
                                                       {"SaveCheckpoint", "names"},      {"RestoreCheckpoint", "names"}};
  for (const auto& [op, attr] : known) {
    const OpDef* def = reg.Find(op);
    REQUIRE(def);
    bool found = false;
    for (const AttrDef& a : def->attrs) found = found || (a.name == attr && a.state != StateAttr::kNone);
    INFO(op << "." << attr);
    CHECK(found);
  }
  CHECK(declared >= 6);
}

TEST_CASE("Namespaces: names and directories are scoped, and reserved names refused", "[graph][namespaces]") {
  CHECK(ScopedName("", "w") == "w");
  CHECK(ScopedName("default", "w") == "w");
  CHECK(ScopedName("team", "w/Adam/m") == "@team/w/Adam/m");
  CHECK(NamespaceOf("@team/w/Adam/m") == "team");
  CHECK(NamespaceOf("w") == "");
  std::string out;
  CHECK(InNamespace("team", "@team/w", &out));
  CHECK(out == "w");
  CHECK_FALSE(InNamespace("team", "@teamb/w"));
  CHECK_FALSE(InNamespace("team", "w"));
  CHECK(InNamespace("", "w"));
  CHECK_FALSE(InNamespace("", "@team/w"));
  CHECK(CheckNamespace("team_a-1.x").ok());
  CHECK(CheckNamespace("").code() == Code::kInvalidArgument);
  CHECK(CheckNamespace("a/b").code() == Code::kInvalidArgument);
  CHECK(CheckNamespace(std::string(65, 'a')).code() == Code::kInvalidArgument);
  CHECK(CheckSessionName("@team/w", "variable").code() == Code::kInvalidArgument);
  CHECK(CheckSessionDir("ckpt/@team/x", "dir").code() == Code::kInvalidArgument);
  CHECK(CheckSessionDir("ckpt/a@b", "dir").ok());
  CHECK(ScopedDir("team", "ckpt") == "@team/ckpt");
  CHECK(ScopedDir("", "ckpt") == "ckpt");
}

TEST_CASE("Namespaces: a node scopes every declared attribute of a registered graph", "[graph][namespaces]") {
  OpRegistry standard;
  REQUIRE(RegisterStandardOps(standard).ok());
  // Each op again without inputs, required attributes or a shape function:
  // ScopeGraphState reads only the attributes declared.
  OpRegistry reg;
  for (const std::string& op : standard.Names()) {
    OpDef d = *standard.Find(op);
    d.min_inputs = d.max_inputs = 0;
    d.shape_fn = [](InferenceContext&) { return Status::OK(); };
    d.grad_fn = nullptr;
    d.differentiable = false;
    for (AttrDef& a : d.attrs) a.required = false;
    REQUIRE(reg.Register(std::move(d)).ok());
  }
  int walked = 0;
  for (const std::string& op : reg.Names()) {
    const OpDef& def = *reg.Find(op);
    for (const AttrDef& a : def.attrs) {
      const bool dir = a.path == PathAttr::kCheckpointDir || a.path == PathAttr::kDataDir;
      if (a.state == StateAttr::kNone && !dir) continue;
      ++walked;
      INFO("op " << op << ", attribute " << a.name);
      Graph g(reg);
      AttrMap attrs;
      attrs.Set(a.name, std::string(a.state == StateAttr::kNames ? "x\ny" : "x"));
      const int id = g.AddNode(op, {}, attrs, "n");
      INFO(g.status().ToString());
      REQUIRE(id >= 0);
      REQUIRE(ScopeGraphState(&g, "team").ok());
      const std::string got = g.node(id).attrs.Get<std::string>(a.name).value();
      CHECK(got == (a.state == StateAttr::kNames ? "@team/x\n@team/y" : "@team/x"));
      // The default namespace keeps names as given.
      Graph d(reg);
      const int did = d.AddNode(op, {}, attrs, "n");
      REQUIRE(did >= 0);
      REQUIRE(ScopeGraphState(&d, "").ok());
      CHECK(d.node(did).attrs.Get<std::string>(a.name).value() == (a.state == StateAttr::kNames ? "x\ny" : "x"));
      // Another namespace's name, in any namespace: refused by name.
      Graph h(reg);
      AttrMap bad;
      bad.Set(a.name, std::string(dir ? "ckpt/@other/x" : "@other/x"));
      REQUIRE(h.AddNode(op, {}, bad, "n") >= 0);
      Status refused = ScopeGraphState(&h, "");
      CHECK(refused.code() == Code::kInvalidArgument);
      CHECK(Contains(refused, a.name));
      CHECK(Contains(refused, "reserved for namespaces"));
    }
  }
  CHECK(walked >= 9);
}
