// The `shardflow` command: run a saved graph on .npy inputs, print a graph,
// list the ops. See docs/CLI.md.
//
//   shardflow run --graph model.capnp --feed x=x.npy --fetch logits --out out/
//   shardflow graph model.capnp [--dot]
//   shardflow ops
//   shardflow ckpt ls|inspect|verify|export DIR [--id N] [--out DIR]
//
// Every error is one line on stderr; exit code 2 for a usage error, 1 for an
// error while loading or running, 0 on success. CLI11 parses the command line
// (cli/flags.h); --help prints the usage texts below, which say more than
// CLI11's generated help.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/certs_command.h"
#include "cli/node_command.h"
#include "shardflow/checkpoint.h"
#include "shardflow/embedding.h"
#include "shardflow/gradients.h"
#include "shardflow/graph.h"
#include "shardflow/graph_io.h"
#include "shardflow/npy.h"
#include "shardflow/op_registry.h"
#include "shardflow/session.h"

namespace sf {
namespace {

constexpr int kExitRunError = 1;
constexpr int kExitUsage = 2;

constexpr char kMainUsage[] =
    "usage: shardflow <command> [options]\n"
    "\n"
    "commands:\n"
    "  run     run a saved graph: feed .npy files, write the fetched tensors as .npy\n"
    "  graph   print a saved graph as text (or Graphviz with --dot)\n"
    "  ops     list the registered ops\n"
    "  ckpt    list, inspect, verify or export the checkpoints in a directory\n"
    "  node    run a cluster member (hosts partitions and variable shards)\n"
    "  cluster list a cluster's members from etcd\n"
    "  certs   make a cluster's TLS credentials (a CA, node and session certificates)\n"
    "\n"
    "'shardflow <command> --help' describes the options of one command.\n";

constexpr char kRunUsage[] =
    "usage: shardflow run --graph G.capnp [--feed NAME=FILE.npy]... [--fetch NAME]...\n"
    "                     [--target NODE]... [--gradients-of LOSS --wrt X1,X2,...]\n"
    "                     [--out DIR] [--threads N] [--trace FILE]\n"
    "\n"
    "Loads the graph saved in G.capnp (sf::SaveGraph), feeds each placeholder NAME the\n"
    "array in FILE.npy, runs one step and writes each fetched tensor to DIR/NAME.npy.\n"
    "\n"
    "  --graph G.capnp      the graph to run (required)\n"
    "  --feed NAME=FILE     feed tensor NAME (\"x\" or \"x:0\") from a .npy file; repeatable\n"
    "  --fetch NAME         fetch tensor NAME (\"y\" or \"node:1\"); repeatable\n"
    "  --target NODE        also run node NODE (e.g. a training op); repeatable\n"
    "  --gradients-of LOSS  add the gradient of tensor LOSS (summed if not a scalar) ...\n"
    "  --wrt X1,X2,...      ... with respect to these tensors; each is written to\n"
    "                       DIR/grad_X.npy\n"
    "  --out DIR            where the .npy files go (created if missing; required when\n"
    "                       something is fetched)\n"
    "  --threads N          compute threads (default: one per core)\n"
    "  --trace FILE         write the step's timeline to FILE as Chrome trace-event\n"
    "                       JSON (open it in https://ui.perfetto.dev)\n"
    "\n"
    "File names: '/' in a tensor name becomes '.' and ':' becomes '-', so\n"
    "'dense/MatMul:1' is written to DIR/dense.MatMul-1.npy.\n";

constexpr char kGraphUsage[] =
    "usage: shardflow graph G.capnp [--dot]\n"
    "\n"
    "Prints the graph saved in G.capnp, one line per node:\n"
    "  name = Op(input, input:1, ^control_input) {attr=value, ...} @device -> dtype[shape], ...\n"
    "With --dot prints it as a Graphviz digraph instead (shardflow graph G --dot | dot -Tsvg).\n";

constexpr char kCkptUsage[] =
    "usage: shardflow ckpt ls|inspect|verify|export DIR [--id N] [--out DIR]\n"
    "\n"
    "  ls       one line per committed checkpoint: id, global step, variables\n"
    "  inspect  the variables of a checkpoint with dtype and shape\n"
    "  verify   read every block of a checkpoint and check its checksum\n"
    "  export   write each variable of a checkpoint as DIR/<name>.npy\n"
    "           ('/' in names becomes '.')\n"
    "\n"
    "  --id N     the checkpoint (default: the newest committed one)\n"
    "  --out DIR  where export writes (required for export)\n";

constexpr char kOpsUsage[] =
    "usage: shardflow ops [--markdown]\n"
    "\n"
    "Lists every registered op with its number of inputs and a one-line summary.\n"
    "--markdown prints a table with whether each op is differentiable and stateful and the\n"
    "attributes it takes (docs/OPS.md is made with it).\n";

// One line: newlines inside a message would break "one error, one line".
std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

int Fail(int code, const std::string& msg) {
  std::cerr << "shardflow: " << OneLine(msg) << "\n";
  return code;
}

int UsageError(const std::string& command, const std::string& msg) {
  const std::string hint = command.empty() ? "shardflow --help" : "shardflow " + command + " --help";
  return Fail(kExitUsage, msg + " (see '" + hint + "')");
}

// The file name (without ".npy") a tensor name is written to.
std::string FileStem(const std::string& tensor_name) {
  std::string s = tensor_name;
  for (char& c : s) {
    if (c == '/') c = '.';
    else if (c == ':') c = '-';
  }
  return s;
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// ---- shardflow run ----------------------------------------------------------

struct RunFlags {
  std::string graph_path, out_dir, loss_name, wrt, trace_file;
  std::vector<std::string> feeds, fetch_names, target_names;
  int threads = 0;  // 0: not given
};

// Declares the options of `shardflow run` on its subcommand.
void AddRunFlags(CLI::App& run, RunFlags* f) {
  run.add_option("--graph", f->graph_path);
  // One value per occurrence: "--fetch y extra" leaves "extra" unexpected.
  run.add_option("--feed", f->feeds)->allow_extra_args(false);
  run.add_option("--fetch", f->fetch_names)->allow_extra_args(false);
  run.add_option("--target", f->target_names)->allow_extra_args(false);
  run.add_option("--gradients-of", f->loss_name);
  run.add_option("--wrt", f->wrt);
  run.add_option("--out", f->out_dir);
  run.add_option("--threads", f->threads)->transform(cli::IntegerIn(1, 4096));
  run.add_option("--trace", f->trace_file);
}

// Runs `shardflow run` with the parsed options; the process exit code.
int RunCommand(const CLI::App& run, const RunFlags& flags) {
  const std::string& graph_path = flags.graph_path;
  const std::string& out_dir = flags.out_dir;
  const std::string& loss_name = flags.loss_name;
  const std::string& wrt = flags.wrt;
  const bool has_wrt = run.count("--wrt") > 0;
  if (graph_path.empty()) return UsageError("run", "--graph G.capnp is required");
  if ((run.count("--gradients-of") > 0) != has_wrt)
    return UsageError("run", "--gradients-of and --wrt go together");
  if (has_wrt && (loss_name.empty() || wrt.empty()))
    return UsageError("run", "--gradients-of and --wrt need tensor names");
  std::vector<std::pair<std::string, std::string>> feed_specs;
  for (const auto& f : flags.feeds) {
    const auto eq = f.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == f.size())
      return UsageError("run", "bad --feed '" + f + "': expected NAME=FILE.npy");
    feed_specs.emplace_back(f.substr(0, eq), f.substr(eq + 1));
  }
  const auto& fetch_names = flags.fetch_names;
  const auto& target_names = flags.target_names;
  const bool writes = !fetch_names.empty() || has_wrt;
  if (!writes && target_names.empty())
    return UsageError("run", "nothing to do: give --fetch, --target or --gradients-of");
  if (writes && out_dir.empty()) return UsageError("run", "--out DIR is required with --fetch or --wrt");
  if (run.count("--trace") > 0 && flags.trace_file.empty()) return UsageError("run", "--trace needs a FILE");
  SessionOptions options;
  if (flags.threads > 0) options.compute_threads = flags.threads;
  std::vector<std::string> wrt_names;
  if (has_wrt) {
    wrt_names = SplitCommas(wrt);
    for (const auto& x : wrt_names) {
      if (x.empty()) return UsageError("run", "--wrt '" + wrt + "' has an empty tensor name");
    }
  }
  // Files written, checked for clashes before any work is done.
  std::vector<std::string> files;
  std::map<std::string, std::string> file_owner;
  auto claim = [&](const std::string& tensor, const std::string& stem) -> std::string {
    const std::string file = stem + ".npy";
    auto [it, fresh] = file_owner.emplace(file, tensor);
    if (!fresh && it->second != tensor)
      return "tensors '" + it->second + "' and '" + tensor + "' would both be written to " + file;
    files.push_back(file);
    return "";
  };
  std::string err;
  for (const auto& f : fetch_names) {
    err = claim(f, FileStem(f));
    if (!err.empty()) return UsageError("run", err);
  }
  for (const auto& x : wrt_names) {
    err = claim("gradient of " + x, "grad_" + FileStem(x));
    if (!err.empty()) return UsageError("run", err);
  }

  Graph g;
  Status s = LoadGraph(graph_path, &g);
  if (!s.ok()) return Fail(kExitRunError, s.ToString());

  std::vector<Output> fetches;
  for (const auto& f : fetch_names) {
    auto o = g.FindOutput(f);
    if (!o.ok()) {
      auto id = g.FindNode(f);
      if (id.ok() && g.node(*id).num_outputs() == 0)
        return Fail(kExitRunError, "node '" + f + "' has no outputs to fetch; run it with --target");
      return Fail(kExitRunError, "unknown fetch '" + f + "': " + o.status().message());
    }
    fetches.push_back(*o);
  }
  std::vector<int> targets;
  for (const auto& t : target_names) {
    auto id = g.FindNode(t);
    if (!id.ok()) return Fail(kExitRunError, "unknown target '" + t + "': " + id.status().message());
    targets.push_back(*id);
  }
  FeedMap feeds;
  for (const auto& [name, file] : feed_specs) {
    auto o = g.FindOutput(name);
    if (!o.ok()) return Fail(kExitRunError, "unknown feed '" + name + "': " + o.status().message());
    auto t = ReadNpy(file);
    if (!t.ok()) return Fail(kExitRunError, "feed '" + name + "': " + t.status().ToString());
    feeds.emplace_back(name, std::move(t).value());
  }
  if (!wrt_names.empty()) {
    auto loss = g.FindOutput(loss_name);
    if (!loss.ok())
      return Fail(kExitRunError, "unknown --gradients-of '" + loss_name + "': " + loss.status().message());
    std::vector<Output> xs;
    for (const auto& x : wrt_names) {
      auto o = g.FindOutput(x);
      if (!o.ok()) return Fail(kExitRunError, "unknown --wrt tensor '" + x + "': " + o.status().message());
      xs.push_back(*o);
    }
    auto grads = Gradients(g, {*loss}, xs);
    if (!grads.ok()) return Fail(kExitRunError, "gradients: " + grads.status().ToString());
    if (!g.status().ok()) return Fail(kExitRunError, "gradients: " + g.status().ToString());
    for (const Output& d : *grads) fetches.push_back(d);
  }

  std::error_code ec;
  if (writes) {
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return Fail(kExitRunError, "cannot create --out directory '" + out_dir + "': " + ec.message());
  }

  Result<std::vector<Tensor>> results = std::vector<Tensor>{};
  {
    Session session(g, options);
    RunOptions ro;
    ro.trace_file = flags.trace_file;
    results = session.Run(feeds, fetches, targets, ro);
  }
  if (!results.ok()) return Fail(kExitRunError, results.status().ToString());
  if (results->size() != fetches.size()) {
    return Fail(kExitRunError, "internal error: the session returned " +
                                   std::to_string(results->size()) + " tensors for " +
                                   std::to_string(fetches.size()) + " fetches");
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = (std::filesystem::path(out_dir) / files[i]).string();
    const Tensor& t = (*results)[i];
    s = WriteNpy(path, t);
    if (!s.ok()) return Fail(kExitRunError, s.ToString());
    std::cout << "wrote " << path << " " << DTypeName(t.dtype()) << ShapeString(t.shape()) << "\n";
  }
  if (!flags.trace_file.empty()) {
    std::cout << "wrote the step's trace to " << flags.trace_file << "\n";
  }
  return 0;
}

// ---- shardflow graph --------------------------------------------------------

std::string OutputsString(const Node& n) {
  if (n.num_outputs() == 0) return "()";
  std::string s;
  for (int i = 0; i < n.num_outputs(); ++i) {
    if (i) s += ", ";
    s += std::string(DTypeName(n.output_dtypes[i])) + n.output_shapes[i].ToString();
  }
  return s;
}

std::string NodeLine(const Graph& g, const Node& n) {
  std::ostringstream os;
  os << n.name << " = " << n.op << "(";
  bool first = true;
  for (const Output& in : n.inputs) {
    os << (first ? "" : ", ") << in.name();
    first = false;
  }
  for (int c : n.control_inputs) {
    os << (first ? "" : ", ") << "^" << g.node(c).name;
    first = false;
  }
  os << ")";
  if (!n.attrs.all().empty()) {
    os << " {";
    first = true;
    for (const auto& [name, v] : n.attrs.all()) {
      os << (first ? "" : ", ") << name << "=" << OneLine(AttrValueString(v));
      first = false;
    }
    os << "}";
  }
  if (!n.device.empty()) os << " @" << n.device;
  os << " -> " << OutputsString(n);
  return os.str();
}

std::string DotEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

void PrintDot(const Graph& g, std::ostream& os) {
  os << "digraph shardflow {\n"
     << "  node [shape=box, fontname=\"monospace\"];\n"
     << "  edge [fontname=\"monospace\", fontsize=10];\n";
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    os << "  n" << id << " [label=\"" << DotEscape(n.name) << "\\n" << DotEscape(n.op);
    if (!n.device.empty()) os << "\\n@" << DotEscape(n.device);
    os << "\"";
    if (n.op == "Placeholder") os << ", style=rounded";
    os << "];\n";
  }
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    for (const Output& in : n.inputs) {
      os << "  n" << in.node << " -> n" << id << " [label=\""
         << (in.index ? std::to_string(in.index) + ": " : std::string()) << DTypeName(in.dtype())
         << DotEscape(in.shape().ToString()) << "\"];\n";
    }
    for (int c : n.control_inputs) os << "  n" << c << " -> n" << id << " [style=dashed];\n";
  }
  os << "}\n";
}

struct GraphFlags {
  std::vector<std::string> files;  // exactly one is right; checked by GraphCommand
  bool dot = false;
};

// Declares the arguments of `shardflow graph` on its subcommand.
void AddGraphFlags(CLI::App& graph, GraphFlags* f) {
  graph.add_option("file", f->files);
  graph.add_flag("--dot", f->dot);
}

// Runs `shardflow graph` with the parsed arguments; the process exit code.
int GraphCommand(const GraphFlags& flags) {
  if (flags.files.size() != 1)
    return UsageError("graph", "expected one graph file, got " + std::to_string(flags.files.size()));
  Graph g;
  Status s = LoadGraph(flags.files[0], &g);
  if (!s.ok()) return Fail(kExitRunError, s.ToString());
  if (flags.dot) {
    PrintDot(g, std::cout);
  } else {
    for (int id = 0; id < g.num_nodes(); ++id) std::cout << NodeLine(g, g.node(id)) << "\n";
  }
  return 0;
}

// ---- shardflow ckpt ---------------------------------------------------------

struct CkptFlags {
  std::string action, dir, out;
  int64_t id = -1;  // -1: the newest committed checkpoint
};

// Declares the arguments of `shardflow ckpt` on its subcommand.
void AddCkptFlags(CLI::App& ckpt, CkptFlags* f) {
  ckpt.add_option("action", f->action);
  ckpt.add_option("dir", f->dir);
  ckpt.add_option("--id", f->id)->transform(cli::IntegerIn(1, std::numeric_limits<int64_t>::max()));
  ckpt.add_option("--out", f->out);
}

// Runs `shardflow ckpt` with the parsed arguments; the process exit code.
int CkptCommand(const CkptFlags& flags) {
  const std::string& action = flags.action;
  const std::string& dir = flags.dir;
  const std::string& out = flags.out;
  int64_t id = flags.id;
  if (action.empty() || dir.empty())
    return UsageError("ckpt", "expected an action (ls, inspect, verify, export) and a directory");
  if (action != "ls" && action != "inspect" && action != "verify" && action != "export")
    return UsageError("ckpt", "unknown action '" + action + "'");
  if (action == "export" && out.empty()) return UsageError("ckpt", "export needs --out DIR");
  if (!std::filesystem::is_directory(dir)) return Fail(kExitRunError, "no checkpoint directory '" + dir + "'");
  auto opened = CheckpointDir::Open(dir);
  if (!opened.ok()) return Fail(kExitRunError, opened.status().ToString());
  const CheckpointDir& ckpt = **opened;
  if (action == "ls") {
    auto ids = ckpt.List();
    if (!ids.ok()) return Fail(kExitRunError, ids.status().ToString());
    for (int64_t i : *ids) {
      auto info = ckpt.Describe(i);
      if (info.ok())
        std::cout << "checkpoint " << i << "  step " << info->global_step << "  variables " << info->variables.size()
                  << "\n";
      else
        std::cout << "checkpoint " << i << "  UNREADABLE: " << OneLine(info.status().message()) << "\n";
    }
    return 0;
  }
  if (id < 0) {
    auto latest = ckpt.Latest();
    if (!latest.ok()) return Fail(kExitRunError, latest.status().message());
    id = *latest;
  }
  auto info = ckpt.Describe(id);
  if (!info.ok()) return Fail(kExitRunError, info.status().ToString());
  if (action == "inspect") {
    std::cout << "checkpoint " << id << "  step " << info->global_step << "\n";
    for (const auto& v : info->variables) {
      std::cout << v.name << "  " << DTypeName(v.dtype) << "  " << ShapeString(v.shape) << "  blocks "
                << v.blocks << "\n";
      // A hash table shard's value is its whole state: say what it holds.
      if (v.dtype != DType::kInt64 || v.shape.size() != 2 || v.name.find("/part_") == std::string::npos) continue;
      auto t = ckpt.Read(id, v.name);
      if (!t.ok()) return Fail(kExitRunError, t.status().ToString());
      auto h = SummarizeHashEmbeddingShard(*t, 5);
      if (!h.ok()) continue;  // an int64 matrix that is not a hash table shard
      const HashEmbeddingMetrics& m = h->metrics;
      std::cout << "  hash table shard " << h->shard << " of " << h->num_shards << "  dim " << h->dim
                << "  rows " << m.rows << "  admitted " << m.admitted << "  rejected " << m.rejected
                << "  evicted " << m.evicted << "  step " << m.step << "  optimizer "
                << (h->optimizer.empty() ? "none" : h->optimizer) << "\n";
      for (const auto& r : h->rows) {
        std::cout << "    id " << r.id << "  last_seen " << r.last_seen << "  freq " << r.freq << "  value [";
        for (int64_t j = 0; j < h->dim && j < 4; ++j) std::cout << (j ? ", " : "") << r.values[j];
        std::cout << (h->dim > 4 ? ", ...]" : "]") << "\n";
      }
      if (m.rows > static_cast<int64_t>(h->rows.size()))
        std::cout << "    ... " << (m.rows - static_cast<int64_t>(h->rows.size())) << " more rows\n";
    }
    return 0;
  }
  if (action == "verify") {
    Status s = ckpt.Verify(id);
    if (!s.ok()) return Fail(kExitRunError, s.ToString());
    int64_t blocks = 0;
    for (const auto& v : info->variables) blocks += v.blocks;
    std::cout << "checkpoint " << id << " OK: " << info->variables.size() << " variables, " << blocks
              << " blocks verified\n";
    return 0;
  }
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return Fail(kExitRunError, "cannot create '" + out + "': " + ec.message());
  for (const auto& v : info->variables) {
    auto t = ckpt.Read(id, v.name);
    if (!t.ok()) return Fail(kExitRunError, t.status().ToString());
    const std::string path = out + "/" + FileStem(v.name) + ".npy";
    Status s = WriteNpy(path, *t);
    if (!s.ok()) return Fail(kExitRunError, s.ToString());
    std::cout << path << "\n";
  }
  return 0;
}

// ---- shardflow ops ----------------------------------------------------------

// Runs `shardflow ops`: a list, or a Markdown table; the process exit code.
int OpsCommand(bool markdown) {
  const OpRegistry& reg = StandardOpRegistry();
  const std::vector<std::string> names = reg.Names();
  if (markdown) {
    std::cout << "| op | inputs | gradient | stateful | attributes | summary |\n"
                 "| --- | --- | --- | --- | --- | --- |\n";
    for (const auto& n : names) {
      const OpDef* def = reg.Find(n);
      std::string inputs = std::to_string(def->min_inputs);
      if (def->max_inputs < 0) inputs += "+";
      else if (def->max_inputs != def->min_inputs) inputs += "-" + std::to_string(def->max_inputs);
      std::string summary = def->summary;
      for (size_t p = 0; (p = summary.find('|', p)) != std::string::npos; p += 2) summary.replace(p, 1, "\\|");
      std::string attrs;
      for (const AttrDef& a : def->attrs) attrs += (attrs.empty() ? "" : ", ") + a.name;
      std::cout << "| " << n << " | " << inputs << " | " << (def->differentiable ? "yes" : "no") << " | "
                << (def->stateful ? "yes" : "") << " | " << attrs << " | " << summary << " |\n";
    }
    return 0;
  }
  size_t width = 0;
  for (const auto& n : names) width = std::max(width, n.size());
  for (const auto& n : names) {
    const OpDef* def = reg.Find(n);
    std::string inputs = std::to_string(def->min_inputs);
    if (def->max_inputs < 0) inputs += "+";
    else if (def->max_inputs != def->min_inputs) inputs += "-" + std::to_string(def->max_inputs);
    std::cout << std::left << std::setw(static_cast<int>(width) + 2) << n << std::setw(5)
              << ("(" + inputs + ")") << " " << def->summary << "\n";
  }
  return 0;
}

// "run", "node drain": the words naming a subcommand after "shardflow".
std::string CommandPath(const CLI::App* command) {
  std::string path;
  for (; command && command->get_parent(); command = command->get_parent())
    path = command->get_name() + (path.empty() ? "" : " " + path);
  return path;
}

int Main(int argc, char** argv) {
  CLI::App app("", "shardflow");
  app.require_subcommand(0, 1);
  RunFlags run_flags;
  CLI::App* run = app.add_subcommand("run");
  AddRunFlags(*run, &run_flags);
  GraphFlags graph_flags;
  CLI::App* graph = app.add_subcommand("graph");
  AddGraphFlags(*graph, &graph_flags);
  bool markdown = false;
  CLI::App* ops = app.add_subcommand("ops");
  ops->add_flag("--markdown", markdown);
  CkptFlags ckpt_flags;
  CLI::App* ckpt = app.add_subcommand("ckpt");
  AddCkptFlags(*ckpt, &ckpt_flags);
  NodeFlags node_flags;
  CLI::App* node = app.add_subcommand("node");
  AddNodeFlags(*node, &node_flags);
  NodeFlags cluster_flags;
  CLI::App* cluster = app.add_subcommand("cluster");
  AddClusterFlags(*cluster, &cluster_flags);
  CertsFlags certs_flags;
  CLI::App* certs = app.add_subcommand("certs");
  AddCertsFlags(*certs, &certs_flags);
  CLI::App* help = app.add_subcommand("help");

  const cli::ParseResult r = cli::Parse(app, argc, argv);
  const std::string command = CommandPath(r.command);
  // "shardflow help ANYTHING" prints the overview, as before CLI11.
  if (r.help || r.command == help) {
    // `node drain --help` prints the node's text, which describes drain too.
    const CLI::App* about = r.help && r.help->get_parent() == node ? node : r.help;
    if (r.help && r.help->get_parent() == cluster) about = cluster;
    const std::map<const CLI::App*, const char*> usage = {
        {run, kRunUsage}, {graph, kGraphUsage}, {ops, kOpsUsage}, {ckpt, kCkptUsage}, {node, kNodeUsage}, {certs, kCertsUsage},
        {cluster, kClusterUsage}};
    auto it = usage.find(about);
    std::cout << (it != usage.end() ? it->second : kMainUsage);
    return 0;
  }
  if (!r.error.empty()) {
    if (r.command->get_parent() == node || r.command == node) return NodeUsageError(r.error);
    return UsageError(command, r.error);
  }
  if (r.command == &app) return UsageError("", "no command given (commands: run, graph, ops, ckpt, node, cluster, certs)");
  if (r.command == run) return RunCommand(*run, run_flags);
  if (r.command == graph) return GraphCommand(graph_flags);
  if (r.command == ops) return OpsCommand(markdown);
  if (r.command == ckpt) return CkptCommand(ckpt_flags);
  if (r.command == certs) return CertsCommand(certs_flags);
  if (r.command == cluster || r.command->get_parent() == cluster) return ClusterCommand(*cluster, cluster_flags);
  return NodeCommand(*node, node_flags);
}

}  // namespace
}  // namespace sf

int main(int argc, char** argv) { return sf::Main(argc, argv); }
