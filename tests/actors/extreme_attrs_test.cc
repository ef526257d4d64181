// Every op of the registry with each numeric attribute at an extreme value
// (2^40, -2^40, the int64 limits, -1; huge, negative, NaN and infinite
// floats; shapes of such dims), as a hostile graph file or peer would send:
// the graph is refused or the step fails with an error naming the node, or
// it runs; the process never crashes. Runs through a Session, whose
// executor turns what a kernel throws (allocations past max_tensor_bytes)
// into the step's error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "graph/op_registry.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"

using namespace sf;

namespace {

using Ints = std::vector<int64_t>;

// A well-formed value for each attribute name ops use (for inputs of shape
// [2, 3]); names not here stay unset.
const std::map<std::string, AttrValue>& Defaults() {
  static const std::map<std::string, AttrValue> d = {
      {"axis", int64_t{1}}, {"axes", Ints{1}}, {"keep_dims", false}, {"num_split", int64_t{1}},
      {"depth", int64_t{3}}, {"dtype", DType::kFloat32}, {"DstT", DType::kFloat64}, {"T", DType::kFloat32},
      {"rate", 0.5}, {"seed", int64_t{1}}, {"minval", 0.0}, {"maxval", 1.0}, {"mean", 0.0}, {"stddev", 1.0},
      {"perm", Ints{1, 0}}, {"begin", Ints{0, 0}}, {"size", Ints{1, 1}}, {"end", Ints{1, 2}},
      {"strides", Ints{1, 1}}, {"multiples", Ints{2, 1}}, {"paddings", Ints{1, 1, 0, 2}},
      {"shape", PartialShape({2, 3})}, {"ksize", Ints{1, 1, 1, 1}}, {"padding", std::string("VALID")},
      {"num_segments", int64_t{2}}, {"timeout_ms", int64_t{10}}, {"capacity", int64_t{4}},
      {"exclusive", false}, {"reverse", false}, {"transpose_a", false}, {"transpose_b", false},
      {"begin_mask", int64_t{0}}, {"end_mask", int64_t{0}}, {"shrink_axis_mask", int64_t{0}},
      {"on", 1.0}, {"off", 0.0}, {"rank", int64_t{2}}, {"min_after_dequeue", int64_t{0}},
      {"num_required", int64_t{1}}, {"num_workers", int64_t{1}}, {"worker", int64_t{0}},
      {"staleness", int64_t{0}}, {"maximum_iterations", int64_t{3}}, {"parallel_iterations", int64_t{2}},
      {"group_size", int64_t{1}}, {"group_key", std::string("g")}, {"num_shards", int64_t{1}},
      {"shard", int64_t{0}}, {"table_rows", int64_t{2}}, {"mode", std::string("CONSTANT")},
      {"value", Tensor::Zeros(DType::kFloat32, {2, 3})}};
  return d;
}

const int64_t kI64Max = std::numeric_limits<int64_t>::max();
const int64_t kI64Min = std::numeric_limits<int64_t>::min();

// The extreme values of an attribute of v's kind (none for other kinds).
std::vector<AttrValue> Extremes(const AttrValue& v) {
  const Ints ints = {int64_t{1} << 40, -(int64_t{1} << 40), kI64Max, kI64Min, -1};
  std::vector<AttrValue> out;
  if (std::holds_alternative<int64_t>(v)) {
    for (int64_t x : ints) out.push_back(x);
  } else if (std::holds_alternative<double>(v)) {
    for (double x : {1e300, -1e300, std::nan(""), std::numeric_limits<double>::infinity()}) out.push_back(x);
  } else if (auto* l = std::get_if<Ints>(&v)) {
    for (int64_t x : ints) {
      out.push_back(Ints(l->size(), x));  // every element
      for (size_t i = 0; i < l->size(); ++i) {  // each element alone
        Ints one = *l;
        one[i] = x;
        out.push_back(one);
      }
      if (l->size() == 4) out.push_back(Ints{1, x, x, 1});  // an NHWC window's or stride's spatial pair
    }
    out.push_back(Ints(1000, 1));  // a rank no tensor here has
  } else if (std::holds_alternative<PartialShape>(v)) {
    for (int64_t x : {int64_t{1} << 40, kI64Max, int64_t{-5}})
      out.push_back(PartialShape(Shape{x, x}));
    out.push_back(PartialShape(Shape(40, 1 << 20)));
  }
  return out;
}

struct Variant {
  std::string what;  // op, attribute and value, for messages
  std::vector<std::pair<std::string, Tensor>> feeds;
  std::vector<std::string> fetches, targets;
};

const std::set<std::string> kWindowOps = {"MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad", "Conv2D",
                                          "FusedConv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"};

// The attrs of a windowed op that its forward op takes too.
AttrMap ForwardAttrs(const AttrMap& attrs, bool pool) {
  AttrMap f;
  for (const char* k : {"strides", "padding", "ksize", "precision"}) {
    if (!pool && std::string(k) == "ksize") continue;
    if (pool && std::string(k) == "precision") continue;
    if (const AttrValue* v = attrs.Find(k)) f.Set(k, *v);
  }
  return f;
}

// The inputs of `op` in one variant, fed through v. The windowed ops get
// [1, 4, 4, 2] images and a [3, 3, 2, 2] filter, their gradients the
// forward op's output (with the same window attrs) as dy, so extreme
// windows and strides reach the kernels; Split gets an input of unknown
// dims fed [2, 0] (a count attr is then bounded by nothing but itself);
// the rest two [2, 3] placeholders of dtype t (its minimum input count).
std::vector<Output> MakeInputs(Graph& g, const OpDef& def, DType t, const AttrMap& attrs, int serial, Variant* v) {
  int k = 0;
  auto feed = [&](PartialShape ps, const Shape& fed) {
    const std::string name = "in" + std::to_string(serial) + "_" + std::to_string(k++);
    v->feeds.push_back({name, Tensor::Zeros(t, fed)});
    return ops::Placeholder(g, t, std::move(ps), name);
  };
  const Shape image{1, 4, 4, 2}, filter{3, 3, 2, 2};
  const std::string& op = def.name;
  if (kWindowOps.count(op)) {
    const bool pool = op.find("Pool") != std::string::npos;
    const Output x = feed(PartialShape(image), image);
    const AttrMap fa = ForwardAttrs(attrs, pool);
    if (pool) {
      const Output y = g.Add1(op.find("Max") != std::string::npos ? "MaxPool" : "AvgPool", {x}, fa);
      if (op == "MaxPool" || op == "AvgPool") return {x};
      if (op == "MaxPoolGrad") return {x, y, y};
      return {ops::Const(g, std::vector<int32_t>{1, 4, 4, 2}), y};
    }
    const Output f = feed(PartialShape(filter), filter);
    if (op == "Conv2D") return {x, f};
    if (op == "FusedConv2D") return {x, f, feed(PartialShape({2}), {2})};
    const Output dy = g.Add1("Conv2D", {x, f}, fa);
    if (op == "Conv2DBackpropInput") return {ops::Const(g, std::vector<int32_t>{1, 4, 4, 2}), f, dy};
    return {x, ops::Const(g, std::vector<int32_t>{3, 3, 2, 2}), dy};
  }
  if (op == "Split") return {feed(PartialShape::UnknownDims(2), {2, 0})};
  std::vector<Output> in;
  for (int i = 0; i < def.min_inputs; ++i) in.push_back(feed(PartialShape({2, 3}), {2, 3}));
  return in;
}

// Adds `op` with attrs to g over MakeInputs's inputs; false when g refuses it.
bool AddVariant(Graph& g, const OpDef& def, DType t, const AttrMap& attrs, int serial, Variant* v) {
  const std::vector<Output> in = MakeInputs(g, def, t, attrs, serial, v);
  if (!g.status().ok()) return false;
  const int id = g.AddNode(def.name, in, attrs, "op" + std::to_string(serial));
  if (id < 0) return false;
  const Node& n = g.node(id);
  if (n.num_outputs() == 0) v->targets.push_back(n.name);
  for (int i = 0; i < n.num_outputs(); ++i) v->fetches.push_back(n.name + ":" + std::to_string(i));
  return true;
}

}  // namespace

TEST_CASE("Every op with every numeric attribute at an extreme: refused or run, never a crash", "[actors]") {
  const OpRegistry& reg = StandardOpRegistry();
  // Ops whose steps wait on something no variant provides (a queue's
  // elements, other workers, a peer's tensor) are built but not run.
  const std::set<std::string> waits = {"QueueDequeue", "QueueDequeueMany", "QueueDequeueUpTo", "QueueEnqueue",
                                       "QueueEnqueueMany",
                                       "_Recv", "_Send", "ApplySyncGradient", "StaleSyncWait", "AllReduce",
                                       "SyncApply", "SyncApplySparse"};
  Graph big;
  std::vector<Variant> variants;
  int built = 0, refused = 0, serial = 0;
  std::set<std::string> ops_with_numeric_attrs;
  for (const std::string& name : reg.Names()) {
    const OpDef* def = reg.Find(name);
    AttrMap base;
    for (const AttrDef& d : def->attrs)
      if (auto it = Defaults().find(d.name); it != Defaults().end()) base.Set(d.name, it->second);
    const bool windowed = kWindowOps.count(name) > 0;
    if (windowed) {
      // NHWC windows: 4 values; SAME padding, so no window is refused for its size alone.
      base.Set("strides", Ints{1, 1, 1, 1});
      if (def->attrs.end() != std::find_if(def->attrs.begin(), def->attrs.end(),
                                           [](const AttrDef& d) { return d.name == "ksize"; }))
        base.Set("ksize", Ints{1, 2, 2, 1});
      base.Set("padding", std::string("SAME"));
    }
    for (const AttrDef& d : def->attrs) {
      const std::string& a = d.name;
      const AttrValue* v = base.Find(a);
      if (!v) continue;
      for (const AttrValue& x : Extremes(*v)) for (const char* padding : {"SAME", "VALID"}) {
        if (!windowed && std::string(padding) == "VALID") continue;  // one pass for the others
        ops_with_numeric_attrs.insert(name);
        AttrMap attrs = base;
        if (windowed) attrs.Set("padding", std::string(padding));
        attrs.Set(a, x);
        for (DType t : {DType::kFloat32, DType::kInt32}) {
          // Built alone first: a refusal must not poison the shared graph.
          Graph alone;
          Variant scratch;
          if (!AddVariant(alone, *def, t, attrs, 0, &scratch)) {
            ++refused;
            CHECK(!alone.status().message().empty());
            continue;
          }
          Variant v;
          v.what = name + " " + a + "=" + AttrValueString(x) + " on " + DTypeName(t);
          REQUIRE(AddVariant(big, *def, t, attrs, ++serial, &v));
          ++built;
          if (!waits.count(name)) variants.push_back(std::move(v));
          break;
        }
      }
    }
  }
  INFO("built " << built << ", refused " << refused);
  CHECK(ops_with_numeric_attrs.size() >= 30);
  // The window families reach their kernels with extreme windows and strides.
  for (const char* op : {"MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad", "Conv2D", "Conv2DBackpropFilter"})
    CHECK(std::any_of(variants.begin(), variants.end(), [&](const Variant& v) {
      return v.what.rfind(std::string(op) + " ", 0) == 0 &&
             (v.what.find("=[1,1099511627776") != std::string::npos ||
              v.what.find("=[1,9223372036854775807") != std::string::npos);
    }));
  CHECK(variants.size() >= 100);
  SessionOptions o;
  o.max_tensor_bytes = 64 << 20;
  Session s(big, o);
  int failed = 0;
  for (const Variant& v : variants) {
    FeedMap feeds;
    for (const auto& [n, t] : v.feeds) feeds.push_back({n, t});
    auto r = s.Run(feeds, v.fetches, v.targets);
    if (r.ok()) continue;
    ++failed;
    INFO(v.what << ": " << r.status().ToString());
    // Our own bug would be Internal; a hostile value is the caller's error.
    CHECK(r.status().code() != Code::kInternal);
    CHECK(r.status().message().find("node 'op") != std::string::npos);
  }
  INFO("built " << built << ", refused " << refused << ", ran " << variants.size() << ", failed cleanly " << failed << ", ops " << ops_with_numeric_attrs.size());
  CHECK(failed > 0);
}
