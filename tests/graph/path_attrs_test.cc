// Path attributes (graph/path_attrs.h): every registered op's attributes
// that name files are declared so, and a node confines each of them: an
// absolute path or one with ".." is refused by name, a node without the
// directory refuses any, and a relative one lands under the directory. The
// walk covers every op of the registry, so a new op with a path attribute
// cannot slip through undeclared or unconfined.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <utility>

#include "graph/path_attrs.h"
#include "shardflow/op_registry.h"

using namespace sf;

namespace {

// String attributes whose names look like paths but name no file, each with
// why. Empty today; an entry needs a reason a reviewer can check.
const std::set<std::pair<std::string, std::string>> kNotPaths = {};

bool Contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

}  // namespace

TEST_CASE("Path attributes: every registered attribute that looks like a path is declared one", "[graph][paths]") {
  OpRegistry reg;
  REQUIRE(RegisterStandardOps(reg).ok());
  int declared = 0;
  for (const std::string& op : reg.Names()) {
    const OpDef* def = reg.Find(op);
    for (const AttrDef& a : def->attrs) {
      if (a.path != PathAttr::kNone) {
        ++declared;
        CHECK(std::holds_alternative<std::string>(a.default_value));
        continue;
      }
      if (!std::holds_alternative<std::string>(a.default_value) || !LooksLikePathAttr(a.name)) continue;
      INFO("op " << op << ", attribute " << a.name << ": declare it with OpBuilder::Path (or list it in kNotPaths)");
      CHECK(kNotPaths.count({op, a.name}) == 1);
    }
  }
  // The ones that exist today, so that dropping a declaration fails too.
  const std::pair<const char*, const char*> known[] = {
      {"SaveCheckpoint", "dir"}, {"RestoreCheckpoint", "dir"}, {"HashEmbeddingShardInit", "cold_dir"},
      {"CriteoReader", "files"}};
  for (const auto& [op, attr] : known) {
    const OpDef* def = reg.Find(op);
    REQUIRE(def);
    bool found = false;
    for (const AttrDef& a : def->attrs) found = found || (a.name == attr && a.path != PathAttr::kNone);
    INFO(op << "." << attr);
    CHECK(found);
  }
  CHECK(declared >= 4);
}

TEST_CASE("Path attributes: a node confines every registered op's path attributes", "[graph][paths]") {
  OpRegistry reg;
  REQUIRE(RegisterStandardOps(reg).ok());
  const NodeDirs dirs{"/srv/node/data", "/srv/node/ckpt"};
  int walked = 0;
  for (const std::string& op : reg.Names()) {
    const OpDef& def = *reg.Find(op);
    for (const AttrDef& a : def.attrs) {
      if (a.path == PathAttr::kNone) continue;
      ++walked;
      const std::string root = a.path == PathAttr::kCheckpointDir ? dirs.checkpoint_dir : dirs.data_dir;
      const std::string flag = a.path == PathAttr::kCheckpointDir ? "--checkpoint-dir" : "--data-dir";
      auto confine = [&](const std::string& value, const NodeDirs& d, AttrMap* out = nullptr) {
        AttrMap attrs;
        attrs.Set(a.name, value);
        Status s = ConfineNodePaths(def, "n", d, &attrs);
        if (out) *out = attrs;
        return s;
      };
      INFO("op " << op << ", attribute " << a.name);
      Status abs = confine("/etc/passwd", dirs);
      CHECK(abs.code() == Code::kInvalidArgument);
      CHECK(Contains(abs, "/etc/passwd"));
      CHECK(Contains(abs, "absolute"));
      CHECK(Contains(abs, a.name));
      Status up = confine("x/../../etc", dirs);
      CHECK(up.code() == Code::kInvalidArgument);
      CHECK(Contains(up, "'..'"));
      Status none = confine("x", NodeDirs{});
      CHECK(none.code() == Code::kFailedPrecondition);
      CHECK(Contains(none, flag));
      AttrMap ok_attrs;
      Status ok = confine("run1/part", dirs, &ok_attrs);
      CHECK(ok.ok());
      const std::string got = ok_attrs.Get<std::string>(a.name).value();
      // Files are rooted here; directories are rooted where they are opened.
      CHECK(got == (a.path == PathAttr::kDataFiles ? root + "/run1/part" : "run1/part"));
      if (a.path == PathAttr::kDataFiles) {
        // Every line of a file list, each checked.
        Status second = confine("a.tsv\n/etc/shadow", dirs);
        CHECK(second.code() == Code::kInvalidArgument);
        CHECK(Contains(second, "/etc/shadow"));
        AttrMap two;
        REQUIRE(confine("a.tsv\nb/c.tsv.gz", dirs, &two).ok());
        CHECK(two.Get<std::string>(a.name).value() == root + "/a.tsv\n" + root + "/b/c.tsv.gz");
      }
    }
  }
  CHECK(walked >= 4);
}

TEST_CASE("Path attributes: an op registering a path attribute of another kind is refused", "[graph][paths]") {
  OpRegistry reg;
  Status s = reg.Register(OpBuilder("BadPath").Attr("dir", int64_t{0}).Path(PathAttr::kDataDir)
                              .Shape([](InferenceContext&) { return Status::OK(); })
                              .Build());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(Contains(s, "BadPath"));
  CHECK(Contains(s, "string"));
}
