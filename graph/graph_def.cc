#include "shardflow/graph_io.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "graph/op_registry.h"
#include "graph/tensor_proto.h"
#include "proto/graph_def.capnp.h"

namespace sf {
namespace {

// ---- Graph -> GraphDef ------------------------------------------------------

Status AttrToProto(const std::string& name, const AttrValue& v, proto::AttrValue::Builder b) {
  Status s;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          b.setIntValue(x);
        } else if constexpr (std::is_same_v<T, double>) {
          b.setFloatValue(x);
        } else if constexpr (std::is_same_v<T, bool>) {
          b.setBoolValue(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          b.setStringValue(x);
        } else if constexpr (std::is_same_v<T, DType>) {
          b.setDtypeValue(DTypeToProto(x));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          auto l = b.initIntList(x.size());
          for (size_t i = 0; i < x.size(); ++i) l.set(i, x[i]);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          auto l = b.initFloatList(x.size());
          for (size_t i = 0; i < x.size(); ++i) l.set(i, x[i]);
        } else if constexpr (std::is_same_v<T, PartialShape>) {
          PartialShapeToProto(x, b.initShapeValue());
        } else if constexpr (std::is_same_v<T, Tensor>) {
          s = TensorToProto(x, b.initTensorValue());
        } else {
          static_assert(std::is_same_v<T, std::vector<DType>>, "a new AttrValue kind needs a case");
          auto l = b.initDtypeList(x.size());
          for (size_t i = 0; i < x.size(); ++i) l.set(i, DTypeToProto(x[i]));
        }
      },
      v);
  return s.WithPrefix("attr '" + name + "'");
}

Status BuildGraphDef(const Graph& g, proto::GraphDef::Builder gd) {
  if (!g.status().ok())
    return InvalidArgument("cannot save a graph with a construction error: " + g.status().ToString());
  gd.setFormatVersion(proto::GRAPH_DEF_FORMAT_VERSION);
  auto nodes = gd.initNodes(g.num_nodes());
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    auto nb = nodes[id];
    nb.setName(n.name);
    nb.setOp(n.op);
    nb.setDevice(n.device);
    auto inputs = nb.initInputs(n.inputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      inputs[i].setNode(g.node(n.inputs[i].node).name);
      inputs[i].setIndex(n.inputs[i].index);
    }
    auto controls = nb.initControlInputs(n.control_inputs.size());
    for (size_t i = 0; i < n.control_inputs.size(); ++i)
      controls.set(i, g.node(n.control_inputs[i]).name);
    auto attrs = nb.initAttrs(n.attrs.all().size());
    int i = 0;
    for (const auto& [name, value] : n.attrs.all()) {
      attrs[i].setName(name);
      SF_RETURN_IF_ERROR(AttrToProto(name, value, attrs[i].initValue())
                             .WithPrefix("node '" + n.name + "'"));
      ++i;
    }
  }
  return Status::OK();
}

// ---- GraphDef -> Graph ------------------------------------------------------

// A node as read from the file, before it is added to the graph.
struct NodeSpec {
  std::string name, op, device;
  std::vector<std::pair<std::string, int>> inputs;
  std::vector<std::string> control_inputs;
  AttrMap attrs;
};

Result<AttrValue> AttrFromProto(proto::AttrValue::Reader r) {
  switch (r.which()) {
    case proto::AttrValue::INT_VALUE: return AttrValue(r.getIntValue());
    case proto::AttrValue::FLOAT_VALUE: return AttrValue(r.getFloatValue());
    case proto::AttrValue::BOOL_VALUE: return AttrValue(r.getBoolValue());
    case proto::AttrValue::STRING_VALUE: return AttrValue(std::string(r.getStringValue().cStr()));
    case proto::AttrValue::DTYPE_VALUE: {
      SF_ASSIGN_OR_RETURN(DType t, DTypeFromProto(r.getDtypeValue()));
      return AttrValue(t);
    }
    case proto::AttrValue::INT_LIST: {
      std::vector<int64_t> v;
      for (int64_t x : r.getIntList()) v.push_back(x);
      return AttrValue(std::move(v));
    }
    case proto::AttrValue::FLOAT_LIST: {
      std::vector<double> v;
      for (double x : r.getFloatList()) v.push_back(x);
      return AttrValue(std::move(v));
    }
    case proto::AttrValue::SHAPE_VALUE: {
      SF_ASSIGN_OR_RETURN(PartialShape s, PartialShapeFromProto(r.getShapeValue()));
      return AttrValue(std::move(s));
    }
    case proto::AttrValue::TENSOR_VALUE: {
      SF_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(r.getTensorValue()));
      return AttrValue(std::move(t));
    }
    case proto::AttrValue::DTYPE_LIST: {
      std::vector<DType> v;
      for (auto d : r.getDtypeList()) {
        SF_ASSIGN_OR_RETURN(DType t, DTypeFromProto(d));
        v.push_back(t);
      }
      return AttrValue(std::move(v));
    }
  }
  return DataLoss("unknown attr kind (union tag " + std::to_string(static_cast<int>(r.which())) +
                  "), written by a newer shardflow?");
}

// Reads every node of gd; throws kj::Exception on a corrupt message.
Result<std::vector<NodeSpec>> ReadNodes(proto::GraphDef::Reader gd) {
  std::vector<NodeSpec> specs;
  for (auto nr : gd.getNodes()) {
    NodeSpec s;
    s.name = nr.getName().cStr();
    s.op = nr.getOp().cStr();
    s.device = nr.getDevice().cStr();
    for (auto in : nr.getInputs()) s.inputs.emplace_back(in.getNode().cStr(), in.getIndex());
    for (auto c : nr.getControlInputs()) s.control_inputs.emplace_back(c.cStr());
    for (auto a : nr.getAttrs()) {
      std::string name = a.getName().cStr();
      auto v = AttrFromProto(a.getValue());
      if (!v.ok()) return v.status().WithPrefix("node '" + s.name + "': attr '" + name + "'");
      s.attrs.Set(name, std::move(v).value());
    }
    specs.push_back(std::move(s));
  }
  return specs;
}

// Checks what can be checked before any node is added, so most bad files
// leave the graph untouched.
Status ValidateNodes(const std::vector<NodeSpec>& specs, const OpRegistry& reg) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name.empty()) return InvalidArgument("node #" + std::to_string(i) + " has no name");
    if (!index.emplace(specs[i].name, i).second)
      return InvalidArgument("two nodes are named '" + specs[i].name + "'");
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const NodeSpec& s = specs[i];
    const std::string where = "node '" + s.name + "'";
    if (!reg.Find(s.op)) return InvalidArgument(where + ": unknown op '" + s.op + "' (not registered)");
    for (size_t k = 0; k < s.inputs.size(); ++k) {
      const auto& [src, out] = s.inputs[k];
      auto it = index.find(src);
      const std::string in = where + ": input " + std::to_string(k) + " ('" + src + ":" +
                             std::to_string(out) + "')";
      if (it == index.end()) return InvalidArgument(in + " names a node that is not in the graph");
      // The one edge allowed to point forward: a loop's NextIteration back into its Merge.
      const bool back_edge = s.op == "Merge" && specs[it->second].op == "NextIteration";
      if (it->second >= i && !back_edge) return InvalidArgument(in + " names a node defined after it");
      if (out < 0) return InvalidArgument(in + " has a negative output index");
    }
    for (const auto& c : s.control_inputs) {
      if (!index.count(c))
        return InvalidArgument(where + ": control input '" + c + "' is not in the graph");
    }
  }
  return Status::OK();
}

// "WhileLoop 'frame' loop variable 'x' (Merge 'm')" for a loop's Merge, as
// the WhileLoop builder names them; the Merge alone when no Enter feeds it.
std::string LoopVariableName(const Graph& g, const Node& merge) {
  for (const Output& in : merge.inputs) {
    const Node& enter = in.op();
    if (enter.op != "Enter") continue;
    auto frame = enter.attrs.GetOr<std::string>("frame_name", "");
    return "WhileLoop '" + (frame.ok() ? *frame : std::string()) + "' loop variable '" +
           enter.inputs[0].name() + "' (Merge '" + merge.name + "')";
  }
  return "the loop variable of Merge '" + merge.name + "'";
}

Status AddNodes(const std::vector<NodeSpec>& specs, Graph* g) {
  std::vector<int> ids;
  std::map<std::string, int> by_name;
  // Loop back edges (NextIteration -> Merge) point at nodes not added yet:
  // the Merge is added with another of its inputs in that place, as the
  // WhileLoop builder does, and patched once every node exists.
  struct BackEdge {
    int merge;
    size_t input;
    std::string src;
    int out;
  };
  std::vector<BackEdge> back_edges;
  for (const NodeSpec& s : specs) {
    const size_t first_back_edge = back_edges.size();  // this node's back edges follow
    std::vector<Output> inputs;
    int stand_in = -1;  // an input of this Merge that is already added
    for (size_t k = 0; k < s.inputs.size(); ++k)
      if (by_name.count(s.inputs[k].first)) stand_in = static_cast<int>(k);
    for (size_t k = 0; k < s.inputs.size(); ++k) {
      if (!by_name.count(s.inputs[k].first)) {
        if (stand_in < 0)
          return InvalidArgument("node '" + s.name + "': every input is a loop back edge; a Merge "
                                 "needs one input from outside the loop");
        back_edges.push_back({-1, k, s.inputs[k].first, s.inputs[k].second});
        inputs.push_back(Output());  // filled below, once stand_in is known to be valid
        continue;
      }
      const int src = by_name.at(s.inputs[k].first);
      const int out = s.inputs[k].second;
      if (out >= g->node(src).num_outputs()) {
        return InvalidArgument("node '" + s.name + "': input " + std::to_string(k) + " names output " +
                               std::to_string(out) + " of '" + s.inputs[k].first + "', which has " +
                               std::to_string(g->node(src).num_outputs()) + " outputs");
      }
      inputs.emplace_back(g, src, out);
    }
    for (size_t k = 0; k < inputs.size(); ++k)
      if (!inputs[k].valid()) inputs[k] = inputs[stand_in];
    const int id = g->AddNode(s.op, inputs, s.attrs, s.name);
    if (id < 0) return g->status();
    // Only this node's back edges: a walk over all of them for every node
    // made loading quadratic in a graph's loops.
    for (size_t k = first_back_edge; k < back_edges.size(); ++k) back_edges[k].merge = id;
    if (g->node(id).name != s.name) {
      return InvalidArgument("node '" + s.name + "' was renamed '" + g->node(id).name +
                             "' (is a name scope active on the graph?)");
    }
    g->mutable_node(id).device = s.device;
    by_name[s.name] = id;
  }
  for (const BackEdge& b : back_edges) {
    const int src = by_name.at(b.src);
    const Node& merge = g->node(b.merge);
    if (b.out < 0 || b.out >= g->node(src).num_outputs() ||
        g->node(src).output_dtypes[b.out] != merge.output_dtypes[0])
      return InvalidArgument("node '" + merge.name + "': loop back edge from '" + b.src + ":" +
                             std::to_string(b.out) + "' does not match the Merge's other inputs");
    // The WhileLoop builder's rule for a loop variable: the body keeps its
    // shape. The Merge's shape (and what was inferred from it) came from the
    // loop's entry alone, so a body changing it would break them.
    const PartialShape& body = g->node(src).output_shapes[b.out];
    if (!body.CompatibleWith(merge.output_shapes[0]))
      return InvalidArgument(LoopVariableName(*g, merge) + " has shape " +
                             merge.output_shapes[0].ToString() + " but the body returns shape " +
                             body.ToString() + " (from '" + b.src + "')");
    g->mutable_node(b.merge).inputs[b.input] = Output(g, src, b.out);
  }
  for (const NodeSpec& s : specs) {
    for (const auto& c : s.control_inputs)
      SF_RETURN_IF_ERROR(g->AddControlInput(by_name.at(s.name), by_name.at(c)));
  }
  return Status::OK();
}

}  // namespace

uint32_t GraphDefFormatVersion() { return proto::GRAPH_DEF_FORMAT_VERSION; }

Result<std::string> GraphToBytes(const Graph& g) {
  try {
    capnp::MallocMessageBuilder message;
    SF_RETURN_IF_ERROR(BuildGraphDef(g, message.initRoot<proto::GraphDef>()));
    kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
    auto bytes = words.asBytes();
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  } catch (const kj::Exception& e) {
    return Internal(std::string("encoding the GraphDef failed: ") + e.getDescription().cStr());
  }
}

Status GraphFromBytes(const std::string& bytes, Graph* g, const std::string& source) {
  if (g->num_nodes() != 0) {
    return InvalidArgument(source + ": a graph is loaded into an empty Graph; this one has " +
                           std::to_string(g->num_nodes()) + " nodes");
  }
  if (!g->status().ok())
    return InvalidArgument(source + ": the target graph already has an error: " + g->status().ToString());
  if (bytes.empty()) return DataLoss(source + ": empty, not a GraphDef");
  if (bytes.size() % sizeof(capnp::word) != 0) {
    return DataLoss(source + ": truncated or not a GraphDef (" + std::to_string(bytes.size()) +
                    " bytes is not a whole number of 8-byte Cap'n Proto words)");
  }
  // FlatArrayMessageReader needs word alignment, which std::string does not promise.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  std::vector<NodeSpec> specs;
  try {
    capnp::ReaderOptions options;
    // Graphs carry whole weight tensors, so the default 64 MiB traversal
    // limit is too small; but no limit at all lets pointers that alias one
    // blob make a 1 MB file decode to gigabytes. A well-formed GraphDef is
    // read about once; twice its words leaves room for fields read again.
    options.traversalLimitInWords = 2 * words.size() + 4096;
    capnp::FlatArrayMessageReader reader(words, options);
    if (reader.getEnd() != words.end()) {
      return DataLoss(source + ": " +
                      std::to_string((words.end() - reader.getEnd()) * sizeof(capnp::word)) +
                      " unexpected bytes after the GraphDef message");
    }
    auto gd = reader.getRoot<proto::GraphDef>();
    if (gd.getFormatVersion() != proto::GRAPH_DEF_FORMAT_VERSION) {
      return InvalidArgument(source + ": GraphDef format version " +
                             std::to_string(gd.getFormatVersion()) + "; this build reads version " +
                             std::to_string(proto::GRAPH_DEF_FORMAT_VERSION));
    }
    auto read = ReadNodes(gd);
    if (!read.ok()) return read.status().WithPrefix(source);
    specs = std::move(read).value();
  } catch (const kj::Exception& e) {
    return DataLoss(source + ": corrupt or truncated GraphDef (" + e.getDescription().cStr() + ")");
  } catch (const std::exception& e) {
    return DataLoss(source + ": corrupt or truncated GraphDef (" + e.what() + ")");
  }
  SF_RETURN_IF_ERROR(ValidateNodes(specs, g->registry()).WithPrefix(source));
  return AddNodes(specs, g).WithPrefix(source);
}

Status SaveGraph(const Graph& g, const std::string& path) {
  SF_ASSIGN_OR_RETURN(std::string bytes, GraphToBytes(g));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status(Code::kUnavailable, "cannot write graph file '" + path + "': " + std::strerror(errno));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return Status(Code::kUnavailable, "writing graph file '" + path + "' failed: " + std::strerror(errno));
  return Status::OK();
}

Status LoadGraph(const std::string& path, Graph* g) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return InvalidArgument("graph file '" + path + "' is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int err = errno;
    if (err == ENOENT) return NotFound("graph file '" + path + "' does not exist");
    return InvalidArgument("cannot open graph file '" + path + "': " + std::strerror(err));
  }
  std::ostringstream contents;
  contents << f.rdbuf();
  if (f.bad()) return DataLoss("reading graph file '" + path + "' failed");
  return GraphFromBytes(contents.str(), g, "graph file '" + path + "'");
}

}  // namespace sf
