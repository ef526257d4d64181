// Fetches, targets and feed keys resolved against a session's graph
// (include/shardflow/run_args.h).
#include "shardflow/run_args.h"

namespace sf {

Result<std::string> TensorRef::NameIn(const Graph& g) const {
  if (!by_output_) {
    if (name_.empty()) return InvalidArgument("a fetch or feed has an empty name");
    return name_;
  }
  if (!output_.valid()) return InvalidArgument("a fetch or feed is an invalid Output (its builder failed?)");
  if (output_.graph != &g || output_.node >= g.num_nodes())
    return InvalidArgument("'" + output_.name() + "' is an Output of another graph than the session's");
  return output_.name();
}

Result<std::string> Target::NameIn(const Graph& g) const {
  if (!by_node_) return name_;
  if (node_ < 0) return InvalidArgument("a target is an invalid Operation (its builder failed?)");
  if (graph_ && graph_ != &g)
    return InvalidArgument("target '" + graph_->node(node_).name + "' is a node of another graph than the session's");
  if (node_ >= g.num_nodes()) return InvalidArgument("target node id " + std::to_string(node_) + " is not in the graph");
  return g.node(node_).name;
}

Result<NamedFeeds> ResolveFeeds(const Graph& g, const FeedMap& feeds) {
  NamedFeeds out;
  out.reserve(feeds.size());
  for (const auto& f : feeds) {
    auto name = f.first.NameIn(g);
    if (!name.ok()) return name.status().WithPrefix("feed " + std::to_string(out.size()));
    out.emplace_back(std::move(name).value(), f.second);
  }
  return out;
}

}  // namespace sf
