#include "shardflow/graph.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "graph/op_registry.h"

namespace sf {

DType Output::dtype() const { return graph->node(node).output_dtypes[index]; }
const PartialShape& Output::shape() const { return graph->node(node).output_shapes[index]; }
const Node& Output::op() const { return graph->node(node); }
std::string Output::name() const {
  const std::string& n = graph->node(node).name;
  return index == 0 ? n : n + ":" + std::to_string(index);
}

const std::string& Operation::name() const { return graph->node(node).name; }

Result<std::vector<int>> ControlDeps::NodesIn(const Graph& g) const {
  std::vector<int> out = ids_;
  for (const Operation& op : ops_) {
    if (!op.valid()) return InvalidArgument("a control dependency is an invalid Operation (its builder failed?)");
    if (op.graph != &g) return InvalidArgument("control dependency '" + op.name() + "' is a node of another graph");
    out.push_back(op.node);
  }
  for (int id : out)
    if (id < 0 || id >= g.num_nodes()) return InvalidArgument("control dependency node id " + std::to_string(id) + " is not in the graph");
  return out;
}

DType Node::kernel_dtype() const {
  if (const AttrValue* t = attrs.Find("T")) {
    if (auto* d = std::get_if<DType>(t)) return *d;
  }
  if (!inputs.empty()) return inputs[0].dtype();
  if (!output_dtypes.empty()) return output_dtypes[0];
  return DType::kInvalid;
}

const OpRegistry& StandardOpRegistry() {
  // Built on first use by an explicit call, so no static-initialisation order.
  static const OpRegistry* reg = [] {
    auto* r = new OpRegistry();
    Status s = RegisterStandardOps(*r);
    // The standard ops are ours: a failure here is our bug, not the caller's.
    if (!s.ok()) {
      std::fprintf(stderr, "shardflow: the standard ops do not register: %s\n", s.ToString().c_str());
      std::abort();
    }
    return r;
  }();
  return *reg;
}

Graph::Graph() : registry_(&StandardOpRegistry()) {}
Graph::Graph(const OpRegistry& registry) : registry_(&registry) {}

Graph::Scope::~Scope() {
  if (!g_) return;
  if (kind_ == 0) g_->name_scopes_.pop_back();
  else g_->device_scopes_.pop_back();
}

Graph::Scope Graph::NameScope(const std::string& prefix) {
  name_scopes_.push_back(prefix);
  return Scope(this, 0);
}

Graph::Scope Graph::DeviceScope(const std::string& device) {
  device_scopes_.push_back(device);
  return Scope(this, 1);
}

const std::string& Graph::current_device() const {
  static const std::string kNone;
  return device_scopes_.empty() ? kNone : device_scopes_.back();
}

std::string Graph::ScopedName(const std::string& base) {
  std::string prefix;
  for (const auto& s : name_scopes_) prefix += s + "/";
  std::string name = prefix + base;
  if (!by_name_.count(name)) return name;
  auto it = next_suffix_.find(name);
  for (int i = it == next_suffix_.end() ? 1 : it->second;; ++i) {
    std::string candidate = name + "_" + std::to_string(i);
    if (!by_name_.count(candidate)) {
      next_suffix_[name] = i;  // AddNode takes it; the next call moves on from here
      return candidate;
    }
  }
}

int Graph::AddNode(const std::string& op, const std::vector<Output>& given_inputs, AttrMap attrs,
                   const std::string& name) {
  if (!status_.ok()) return -1;
  std::vector<Output> hooked_inputs;
  std::vector<int> hooked_controls;
  const bool hooked = static_cast<bool>(node_hook_);
  if (hooked) {
    hooked_inputs = given_inputs;
    // A copy: the hook may replace itself while it runs (nested builders).
    const NodeHook hook = node_hook_;
    Status hs = hook(&hooked_inputs, &hooked_controls);
    if (!hs.ok()) {
      RecordError(hs.WithPrefix("node '" + ScopedName(name.empty() ? op : name) + "' (op " + op + ")"));
      return -1;
    }
    if (!status_.ok()) return -1;
  }
  const std::vector<Output>& inputs = hooked ? hooked_inputs : given_inputs;
  const std::string node_name = ScopedName(name.empty() ? op : name);
  auto fail = [&](const Status& s) {
    RecordError(s.WithPrefix("node '" + node_name + "' (op " + op + ")"));
    return -1;
  };
  const OpDef* def = registry_->Find(op);
  if (!def) return fail(NotFound("no op named '" + op + "' is registered"));
  if (Status s = CheckAttrsDeclared(*def, attrs); !s.ok()) return fail(s);
  ApplyAttrDefaults(*def, &attrs);
  const int n = static_cast<int>(inputs.size());
  if (n < def->min_inputs || (def->max_inputs >= 0 && n > def->max_inputs)) {
    return fail(InvalidArgument("takes " + std::to_string(def->min_inputs) +
                                (def->max_inputs == def->min_inputs
                                     ? ""
                                     : " to " + (def->max_inputs < 0 ? std::string("any")
                                                                     : std::to_string(def->max_inputs))) +
                                " inputs, got " + std::to_string(n)));
  }
  for (int i = 0; i < n; ++i) {
    if (!inputs[i].valid() || inputs[i].graph != this || inputs[i].node >= num_nodes() ||
        inputs[i].index >= nodes_[inputs[i].node]->num_outputs()) {
      return fail(InvalidArgument("input " + std::to_string(i) +
                                  " is not a valid output of this graph"));
    }
  }
  auto node = std::make_unique<Node>();
  node->id = num_nodes();
  node->name = node_name;
  node->op = op;
  node->inputs = inputs;
  node->attrs = std::move(attrs);
  node->device = current_device();
  node->stateful = def->stateful;
  node->control_inputs = hooked_controls;
  if (def->shape_fn) {
    InferenceContext c(*this, *node);
    Status s = def->shape_fn(c);
    if (!s.ok()) return fail(s);
    node->output_dtypes = c.output_dtypes();
    node->output_shapes = c.output_shapes();
    for (size_t i = 0; i < node->output_dtypes.size(); ++i) {
      if (node->output_dtypes[i] == DType::kInvalid)
        return fail(Internal("shape function left output " + std::to_string(i) + " undefined"));
    }
  }
  by_name_[node->name] = node->id;
  nodes_.push_back(std::move(node));
  return nodes_.back()->id;
}

Output Graph::Add1(const std::string& op, const std::vector<Output>& inputs, AttrMap attrs,
                   const std::string& name) {
  int id = AddNode(op, inputs, std::move(attrs), name);
  if (id < 0) return Output();
  if (nodes_[id]->num_outputs() < 1) return Output();
  return Output(this, id, 0);
}

Status Graph::AddControlInput(int node, int before) {
  if (node < 0 || node >= num_nodes() || before < 0 || before >= num_nodes())
    return InvalidArgument("control edge between unknown nodes " + std::to_string(before) +
                           " -> " + std::to_string(node));
  nodes_[node]->control_inputs.push_back(before);
  return Status::OK();
}

Result<int> Graph::FindNode(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return NotFound("the graph has no node named '" + name + "'");
  return it->second;
}

Result<Output> Graph::FindOutput(const std::string& name) const {
  std::string base = name;
  int index = 0;
  auto colon = name.rfind(':');
  if (colon != std::string::npos && by_name_.count(name) == 0) {
    base = name.substr(0, colon);
    try {
      size_t used = 0;
      index = std::stoi(name.substr(colon + 1), &used);
      if (used != name.size() - colon - 1) throw std::invalid_argument("trailing");
    } catch (...) {
      return InvalidArgument("'" + name + "' is not a tensor name (expected NODE or NODE:INDEX)");
    }
  }
  SF_ASSIGN_OR_RETURN(int id, FindNode(base));
  if (index < 0 || index >= nodes_[id]->num_outputs())
    return NotFound("node '" + base + "' has " + std::to_string(nodes_[id]->num_outputs()) +
                    " outputs; there is no output " + std::to_string(index));
  return Output(const_cast<Graph*>(this), id, index);
}

}  // namespace sf
