// OpRegistry: every op registered once, with its signature, shape function
// and gradient function (or "not differentiable").
//
// Filled by an explicit call (RegisterStandardOps), never by static
// constructors, so no op is silently dropped by the linker.
// Thread-safety: fill it from one thread, then read it from many.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "shardflow/attr.h"
#include "shardflow/graph.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// What a shape function sees and sets for one node being added.
class InferenceContext {
 public:
  InferenceContext(const Graph& g, const Node& n) : g_(g), n_(n) {}
  int num_inputs() const { return static_cast<int>(n_.inputs.size()); }
  DType input_dtype(int i) const { return n_.inputs[i].dtype(); }
  const PartialShape& input_shape(int i) const { return n_.inputs[i].shape(); }
  // The value of input i when its producer is a Const, else nullptr. Lets
  // Reshape, Fill, Tile, ... know their output shape at build time.
  const Tensor* input_constant(int i) const;
  const AttrMap& attrs() const { return n_.attrs; }
  template <typename T> Result<T> Attr(const std::string& name) const { return n_.attrs.Get<T>(name); }
  template <typename T> Result<T> AttrOr(const std::string& name, T def) const {
    return n_.attrs.GetOr<T>(name, def);
  }
  const Node& node() const { return n_; }
  const Graph& graph() const { return g_; }

  // Declares output i (outputs are numbered densely from 0).
  void set_output(int i, DType dtype, PartialShape shape);
  const std::vector<DType>& output_dtypes() const { return dtypes_; }
  const std::vector<PartialShape>& output_shapes() const { return shapes_; }

  // Shape errors: "Incompatible shapes [2,3] and [4]" etc. The graph adds the
  // node and op names.
  Status Error(const std::string& msg) const { return InvalidArgument(msg); }
  // Requires every input to have the same dtype; an error naming both otherwise.
  Status RequireSameDTypes() const;
  // Requires input i to have rank r when its rank is known.
  Status RequireRank(int i, int r) const;

 private:
  const Graph& g_;
  const Node& n_;
  std::vector<DType> dtypes_;
  std::vector<PartialShape> shapes_;
};

using ShapeFn = std::function<Status(InferenceContext&)>;

// The most outputs one node may have (Split's num_split): a count attribute
// is checked against it before any output is made, so a hostile graph cannot
// make shape inference allocate without bound.
constexpr int64_t kMaxNodeOutputs = 65536;

// Adds the gradient subgraph of one node: given the gradient flowing into each
// output (invalid when none flows; filled with zeros when others do), returns
// one Output per input: the gradient with respect to it, or an invalid Output
// when the input gets none (integer inputs, shapes, ...).
using GradFn = std::function<std::vector<Output>(Graph& g, const Node& node,
                                                 const std::vector<Output>& grad_outputs)>;

// One attribute an op reads. Front ends (the Python module) build each op's
// signature from these, so an op registered in C++ is callable there with no
// front-end code. The kind is the alternative of AttrValue that
// default_value holds; a required attribute's default_value only says the kind.
// A DType attribute defaulting to kInvalid is left unset unless given (the
// "T" of gradient ops, which otherwise comes from the inputs).
// What a string attribute naming files is, for a node running the op: a
// session's graph may name no file of the node's outside the directories
// its operator gave it (graph/path_attrs.h checks and roots them; a test
// walks every registered op, so a path attribute cannot go undeclared). In
// one process (Session) the user's own paths are used as given.
enum class PathAttr : uint8_t {
  kNone = 0,
  kCheckpointDir,  // a directory under the node's --checkpoint-dir (its checkpoint service roots it)
  kDataDir,        // a directory under the node's --data-dir (the variable shards root it)
  kDataFiles,      // files under --data-dir, one per line (rooted when the graph is registered)
};

// What a string attribute naming state shared across steps is (a variable,
// queue or all-reduce group), for a node running the op: each session's
// namespace sees only its own (graph/namespaces.h scopes them; a test walks
// every registered op, so such an attribute cannot go undeclared). In one
// process (Session) names are used as given.
enum class StateAttr : uint8_t {
  kNone = 0,
  kName,   // one name
  kNames,  // names, one per line
};

struct AttrDef {
  std::string name;
  AttrValue default_value;
  bool required = false;
  PathAttr path = PathAttr::kNone;  // a string attribute naming files (above)
  StateAttr state = StateAttr::kNone;  // a string attribute naming shared state (above)
};

struct OpDef {
  std::string name;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: any number (variadic)
  bool stateful = false;  // reads or writes state, or is random: never folded or deduplicated
  // A stateful op a cluster session may run again in a step that failed
  // part-way (a move or failover): it only reads or draws random numbers, or
  // its updates carry the step's origin and apply once (kernels/update_origin.h).
  bool repeatable = false;
  ShapeFn shape_fn;
  // Null with differentiable=false: "not differentiable" (the gradient stops).
  GradFn grad_fn;
  bool differentiable = false;
  std::string summary;  // one line for docs and `shardflow ops`
  // Every attribute the op's shape function and kernels read, in the order a
  // front end lists them (attributes named "_..." are the runtime's, never
  // declared: IsRuntimeAttr).
  // They are also the attributes a node of this op may carry: Graph::AddNode
  // refuses any other (naming the node and the attribute) except the
  // runtime's own (IsRuntimeAttr), so a misspelt or unsupported attribute
  // never passes silently: every graph, built or loaded from a file, enters
  // through it.
  std::vector<AttrDef> attrs;
  // Names of the inputs for front ends' signatures ("" or missing: "input<i>").
  std::vector<std::string> input_names;
};

class OpRegistry {
 public:
  // Registers an op; InvalidArgument on a duplicate name or a differentiable
  // op without a gradient function.
  Status Register(OpDef def);
  // The op, or nullptr.
  const OpDef* Find(const std::string& name) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, OpDef> ops_;
};

// Small fluent helper so a registration reads as one statement:
//   reg.Add(OpBuilder("Relu").Inputs(1).Shape(UnchangedShape).Grad(ReluGrad));
class OpBuilder {
 public:
  explicit OpBuilder(std::string name) { def_.name = std::move(name); }
  OpBuilder& Inputs(int n) { def_.min_inputs = def_.max_inputs = n; return *this; }
  OpBuilder& Inputs(int min, int max) { def_.min_inputs = min; def_.max_inputs = max; return *this; }
  OpBuilder& Stateful() { def_.stateful = true; return *this; }
  OpBuilder& Repeatable() { def_.repeatable = true; return *this; }
  OpBuilder& Shape(ShapeFn f) { def_.shape_fn = std::move(f); return *this; }
  OpBuilder& Grad(GradFn f) { def_.grad_fn = std::move(f); def_.differentiable = true; return *this; }
  OpBuilder& NotDifferentiable() { def_.differentiable = false; def_.grad_fn = nullptr; return *this; }
  OpBuilder& Summary(std::string s) { def_.summary = std::move(s); return *this; }
  // Declares an optional attribute and its default (the kind is the default's).
  OpBuilder& Attr(std::string name, AttrValue def) {
    def_.attrs.push_back({std::move(name), std::move(def), false});
    return *this;
  }
  // A string literal is a string attribute (not the bool a variant would pick).
  // (An array reference, so that 0 or int64_t{0} never means a null string.)
  template <size_t N>
  OpBuilder& Attr(std::string name, const char (&def)[N]) {
    return Attr(std::move(name), AttrValue(std::string(def)));
  }
  // Declares an attribute the caller must give, of kind T (an AttrValue alternative).
  template <typename T>
  OpBuilder& RequiredAttr(std::string name) {
    def_.attrs.push_back({std::move(name), AttrValue(T{}), true});
    return *this;
  }
  // Marks the attribute declared last as naming files of kind `kind` (a
  // string attribute; Build's registration refuses another kind).
  OpBuilder& Path(PathAttr kind) {
    if (!def_.attrs.empty()) def_.attrs.back().path = kind;
    return *this;
  }
  // Marks the attribute declared last as naming shared state of kind `kind`
  // (a string attribute; Build's registration refuses another kind).
  OpBuilder& State(StateAttr kind) {
    if (!def_.attrs.empty()) def_.attrs.back().state = kind;
    return *this;
  }
  OpBuilder& InputNames(std::vector<std::string> names) { def_.input_names = std::move(names); return *this; }
  OpDef Build() { return def_; }

 private:
  OpDef def_;
};

// True for the attributes the runtime and the library's builders put on
// nodes of any op, which no op declares: names starting with "_", as in
// TensorFlow ("_class" for colocation groups, "_initializer" on initialiser
// assigns, "_embedding_table" and "_hash_embedding" on table shards).
bool IsRuntimeAttr(const std::string& name);
// OK when every attribute in `attrs` is declared by `def` or is the
// runtime's; else InvalidArgument naming the first unknown one and the op's.
Status CheckAttrsDeclared(const OpDef& def, const AttrMap& attrs);
// Sets every optional attribute of `def` that `attrs` leaves out to its
// declared default (a DType defaulting to kInvalid stays unset), so shape
// functions and kernels read one value: the registered one. Cannot fail.
void ApplyAttrDefaults(const OpDef& def, AttrMap* attrs);

// Common shape functions.
// Output 0 = input 0's dtype and shape.
Status UnchangedShape(InferenceContext& c);
// NumPy broadcasting of inputs 0 and 1; the error names both shapes.
Result<PartialShape> BroadcastShapes(const PartialShape& a, const PartialShape& b);

// The seed a random op built with seed 0 gets: a stable hash (FNV-1a) of the
// unique name the node will have, so distinct nodes draw different numbers
// and the same graph built twice draws the same ones.
int64_t SeedFromNodeName(Graph& g, const std::string& op);

// Registers every standard op into reg; the first error (a duplicate name,
// a differentiable op without a gradient) names the op.
Status RegisterStandardOps(OpRegistry& reg);

}  // namespace sf
