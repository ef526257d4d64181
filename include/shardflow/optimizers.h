// Optimizers: each builds the ops that apply gradients to variables; the
// update runs inside the variable shard actor that holds the variable and
// its slots (accumulators), so an update is atomic.
//
//   auto train = sf::MomentumOptimizer(0.01, 0.9).Minimize(g, loss);
//   session.Run({{x, xb}, {y, yb}}, {loss}, {*train});
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shardflow/graph.h"

namespace sf {

class SyncReplicas;

// The gradient of one embedding shard as its sparse update takes it.
struct ShardSparseGradient {
  std::string table;           // the table's name, for errors
  std::vector<Output> inputs;  // the update's inputs after its handles and hyperparameters
  AttrMap attrs;               // the update's attributes
  Output grad;                 // the float32 gradient (the hyperparameters take its dtype)
};

// The sparse gradient of one shard from the gradients dys[i] of its
// EmbeddingShardLookup nodes lookups[i] (at least one): a single lookup's
// ids (and segments) and dy; several lookups' rows and row gradients
// (EmbeddingSparseGrad each) concatenated into one update of segments
// "rows", so a stateful optimizer sees the summed gradient once, as in
// TensorFlow. Returns the graph's error, or InvalidArgument when the
// lookups read different shards.
Result<ShardSparseGradient> ShardGradient(Graph& g, const std::vector<int>& lookups, const std::vector<Output>& dys);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Adds the gradients of loss with respect to every trainable variable
  // (or `var_list`: reads returned by ops::Variable) and the update ops;
  // returns the id of a NoOp that runs them all, or the error.
  // var_list may also hold VarHandles (an EmbeddingTable's shards).
  // Embedding table shards (include/shardflow/embedding.h) among them get
  // one sparse update each, built from the gradients of the shard's
  // EmbeddingShardLookup outputs (ShardGradient).
  Result<Operation> Minimize(Graph& g, Output loss, const std::vector<Output>& var_list = {});
  // Adds update ops for given (gradient, variable read) pairs; returns the NoOp id.
  Result<Operation> ApplyGradients(Graph& g, const std::vector<std::pair<Output, Output>>& grads_and_vars);
  virtual std::string name() const = 0;
  // Checks the hyperparameters given to the constructor; InvalidArgument
  // naming the optimizer and the value (Minimize and ApplyGradients call it).
  virtual Status Validate() const { return Status::OK(); }
  // Uses a scalar tensor as the learning rate instead of the constant given
  // to the constructor: a Placeholder fed each step, or a schedule computed in
  // the graph. It is cast to each gradient's dtype. Call before Minimize.
  void SetLearningRate(Output lr) { lr_tensor_ = lr; }
  // Has `sparse` make the sparse updates of the embedding table shards this
  // optimizer's Minimize trains (Adagrad on the tables, Adam on the rest, as
  // DLRM), with one backward pass for both: two Minimize calls would each
  // build the backward of everything between the loss and their variables.
  // `sparse` must outlive the Minimize calls; null: this optimizer (the default).
  void SetSparseOptimizer(Optimizer* sparse) { sparse_ = sparse; }

 protected:
  // The learning rate for a gradient: the tensor set by SetLearningRate, or
  // `constant` in the gradient's dtype.
  Output LearningRate(Graph& g, Output grad, double constant);
  // Adds the update of one variable (its handle) by grad, creating slots.
  virtual Result<int> ApplyOne(Graph& g, Output handle, Output grad) = 0;
  // Adds the sparse update of one embedding shard (handle) by its gradient
  // (ShardGradient). The default answers Unimplemented naming the optimizer:
  // GradientDescent, Adagrad, RowwiseAdagrad, Adam (lazy) and Ftrl override it.
  virtual Result<int> ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& grad);
  // Adds the EmbeddingSparseApply<op> node: handles (shard then slots), scalar
  // hyperparameters, then grad's inputs, with grad's attrs.
  // slot_init: the slots' initial values, which a hash table's shard uses for
  // the slots of each row it creates (its handles are the shard's own).
  Result<int> AddSparseApply(Graph& g, const std::string& op, std::vector<Output> handles,
                             std::vector<Output> scalars, const ShardSparseGradient& grad,
                             const std::vector<double>& slot_init = {});
  // Like Slot, filled by a Fill op at run time (no dense constant in the graph:
  // embedding shards are big).
  Output FilledSlot(Graph& g, Output handle, const std::string& slot_name, double init = 0.0);
  // Creates (once per graph) a slot variable beside `handle`, zero- or value-initialised.
  Output Slot(Graph& g, Output handle, const std::string& slot_name, double init = 0.0);
  // Creates (once per graph) a slot variable of any shape initialised to `value`
  // (Adam's scalar beta powers).
  Output ScalarSlot(Graph& g, Output handle, const std::string& slot_name, Tensor value);
  // What this optimizer's slots of handle's variable are named under
  // ("<var>/<scope>/<slot>"): name(), or name() + "_N" when another
  // optimizer's slots of that variable already use it, so two optimizers of
  // one kind on one variable keep their own state (as TensorFlow). The same
  // optimizer object always gets the same scope for a variable of a graph.
  std::string SlotScope(Graph& g, Output handle);

 private:
  friend class SyncReplicas;  // wraps the sparse updates it builds
  Output lr_tensor_;
  Optimizer* sparse_ = nullptr;  // SetSparseOptimizer
  std::map<std::pair<const Graph*, std::string>, std::string> slot_scopes_;  // (graph, variable) -> scope
};

class GradientDescentOptimizer : public Optimizer {
 public:
  explicit GradientDescentOptimizer(double learning_rate) : lr_(learning_rate) {}
  std::string name() const override { return "GradientDescent"; }
 protected:
  Result<int> ApplyOne(Graph& g, Output handle, Output grad) override;
  Result<int> ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& grad) override;
 private:
  double lr_;
};

class MomentumOptimizer : public Optimizer {
 public:
  MomentumOptimizer(double learning_rate, double momentum, bool use_nesterov = false)
      : lr_(learning_rate), momentum_(momentum), nesterov_(use_nesterov) {}
  std::string name() const override { return "Momentum"; }
 protected:
  Result<int> ApplyOne(Graph& g, Output handle, Output grad) override;
 private:
  double lr_, momentum_;
  bool nesterov_;
};

class AdagradOptimizer : public Optimizer {
 public:
  explicit AdagradOptimizer(double learning_rate, double initial_accumulator = 0.1)
      : lr_(learning_rate), init_(initial_accumulator) {}
  std::string name() const override { return "Adagrad"; }
  Status Validate() const override;
 protected:
  Result<int> ApplyOne(Graph& g, Output handle, Output grad) override;
  Result<int> ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& grad) override;
 private:
  double lr_, init_;
};

class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(double learning_rate = 0.001, double beta1 = 0.9, double beta2 = 0.999,
                         double epsilon = 1e-8)
      : lr_(learning_rate), beta1_(beta1), beta2_(beta2), eps_(epsilon) {}
  std::string name() const override { return "Adam"; }
 protected:
  Result<int> ApplyOne(Graph& g, Output handle, Output grad) override;
  // Lazy Adam for embedding shards: only the rows a step touches move their m and v.
  Result<int> ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& grad) override;
 private:
  double lr_, beta1_, beta2_, eps_;
};

// Adagrad with one accumulator per row (TorchRec's row-wise Adagrad): the
// mean of the row's squared gradient accumulates. Its slot keeps the
// variable's shape, each row's value repeated.
class RowwiseAdagradOptimizer : public Optimizer {
 public:
  explicit RowwiseAdagradOptimizer(double learning_rate, double initial_accumulator = 0.1)
      : lr_(learning_rate), init_(initial_accumulator) {}
  std::string name() const override { return "RowwiseAdagrad"; }
  Status Validate() const override;
 protected:
  Result<int> ApplyOne(Graph& g, Output handle, Output grad) override;
  Result<int> ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& grad) override;
 private:
  double lr_, init_;
};

// FTRL-proximal (McMahan et al. 2013; TF's FtrlOptimizer), the standard
// optimizer of click-through-rate models: l1 makes weights exactly zero.
class FtrlOptimizer : public Optimizer {
 public:
  explicit FtrlOptimizer(double learning_rate, double l1 = 0.0, double l2 = 0.0,
                         double learning_rate_power = -0.5, double initial_accumulator = 0.1)
      : lr_(learning_rate), l1_(l1), l2_(l2), power_(learning_rate_power), init_(initial_accumulator) {}
  std::string name() const override { return "Ftrl"; }
  Status Validate() const override;
 protected:
  Result<int> ApplyOne(Graph& g, Output handle, Output grad) override;
  Result<int> ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& grad) override;
 private:
  double lr_, l1_, l2_, power_, init_;
};

class RMSPropOptimizer : public Optimizer {
 public:
  explicit RMSPropOptimizer(double learning_rate, double rho = 0.9, double momentum = 0.0,
                            double epsilon = 1e-10)
      : lr_(learning_rate), rho_(rho), momentum_(momentum), eps_(epsilon) {}
  std::string name() const override { return "RMSProp"; }
 protected:
  Result<int> ApplyOne(Graph& g, Output handle, Output grad) override;
 private:
  double lr_, rho_, momentum_, eps_;
};

}  // namespace sf
