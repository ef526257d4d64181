// Gradient checks of the NN ops (float64, small shapes).
#include "shardflow/ops.h"
#include "tests/support/gradient_checker.h"

namespace sf::testing {

namespace {

// x shifted away from 0 by a fixed per-element offset, so no element sits on
// a kink (Relu at 0) whatever the random draw in [0.1, 1]: signs alternate.
Output AwayFromZero(Graph& g, Output x) {
  const Shape& s = x.shape().dims();
  Tensor sign(DType::kFloat64, s);
  for (int64_t i = 0; i < sign.num_elements(); ++i) sign.data<double>()[i] = i % 3 == 1 ? 1.0 : -1.0;
  return ops::Mul(g, x, ops::Const(g, sign));
}

// Distinct, well-separated values (so each pool window has a clear maximum):
// x in [0, 0.1] plus a fixed permutation of 0, 1, 2, ...
Output Distinct(Graph& g, Output x) {
  const Shape& s = x.shape().dims();
  Tensor off(DType::kFloat64, s);
  const int64_t n = off.num_elements();
  for (int64_t i = 0; i < n; ++i) off.data<double>()[i] = static_cast<double>((i * 7) % n);
  return ops::Add(g, x, ops::Const(g, off));
}

// Labels made a distribution (rows sum to 1), as the op's backprop assumes.
Output Xent(Graph& g, Output logits, Output labels) {
  return ops::SoftmaxCrossEntropyWithLogits(g, logits, ops::Softmax(g, labels));
}

}  // namespace

void AddNNGradChecks(GradCheckTable& t) {
  t.push_back({"Relu", "relu of values away from 0", {{3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Relu(g, AwayFromZero(g, x[0])); },
               0.1, 1.0});
  for (double sign : {1.0, -1.0}) {
    t.push_back({"LeakyRelu", sign > 0 ? "leaky relu of values above 0" : "leaky relu of values below 0", {{3, 4}},
                 [sign](Graph& g, const std::vector<Output>& x) {
                   return ops::LeakyRelu(g, ops::Mul(g, x[0], ops::ScalarLike(g, x[0], sign)), 0.3);
                 },
                 0.1, 1.0});
  }
  t.push_back({"Sigmoid", "sigmoid", {{3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Sigmoid(g, x[0]); }, -3, 3});
  t.push_back({"Tanh", "tanh", {{3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Tanh(g, x[0]); }, -2, 2});
  t.push_back({"Softplus", "softplus", {{3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Softplus(g, x[0]); }, -3, 3});
  t.push_back({"Elu", "elu of values away from 0", {{3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Elu(g, AwayFromZero(g, x[0])); },
               0.1, 1.0});
  // The activations' gradient ops themselves (second-order gradients).
  auto grad_op = [](const char* op, bool away_second) {
    return [op, away_second](Graph& g, const std::vector<Output>& x) {
      return g.Add1(op, {x[0], away_second ? AwayFromZero(g, x[1]) : x[1]});
    };
  };
  t.push_back({"ReluGrad", "ReluGrad(dy, y), y away from 0", {{3, 4}, {3, 4}}, grad_op("ReluGrad", true), 0.1, 1.0});
  t.push_back({"SigmoidGrad", "SigmoidGrad(y, dy)", {{3, 4}, {3, 4}}, grad_op("SigmoidGrad", false)});
  t.push_back({"TanhGrad", "TanhGrad(y, dy)", {{3, 4}, {3, 4}}, grad_op("TanhGrad", false)});
  t.push_back({"SoftplusGrad", "SoftplusGrad(dy, x)", {{3, 4}, {3, 4}}, grad_op("SoftplusGrad", false), -2, 2});
  t.push_back({"EluGrad", "EluGrad(dy, y), y away from 0", {{3, 4}, {3, 4}}, grad_op("EluGrad", true), 0.1, 1.0});
  t.push_back({"SoftmaxGrad", "SoftmaxGrad(y, dy) over the last axis", {{2, 3, 4}, {2, 3, 4}},
               grad_op("SoftmaxGrad", false)});
  t.push_back({"LogSoftmaxGrad", "LogSoftmaxGrad(y, dy)", {{3, 5}, {3, 5}}, grad_op("LogSoftmaxGrad", false)});
  t.push_back({"Softmax", "softmax over the last axis", {{2, 3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Softmax(g, x[0]); }, -2, 2});
  t.push_back({"LogSoftmax", "log softmax", {{3, 5}},
               [](Graph& g, const std::vector<Output>& x) { return ops::LogSoftmax(g, x[0]); }, -2, 2});
  t.push_back({"SoftmaxCrossEntropyWithLogits", "loss wrt logits and labels", {{3, 4}, {3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return Xent(g, x[0], x[1]); }, -2, 2});
  t.push_back({"SparseSoftmaxCrossEntropyWithLogits", "loss wrt logits", {{3, 4}},
               [](Graph& g, const std::vector<Output>& x) {
                 return ops::SparseSoftmaxCrossEntropyWithLogits(g, x[0], ops::Const(g, std::vector<int32_t>{2, 0, 3}));
               },
               -2, 2});
  // Through backprop (output 1), a second-order use: its gradient into the
  // logits was dropped (zero) without a word.
  t.push_back({"SparseSoftmaxCrossEntropyWithLogits", "backprop wrt logits", {{3, 4}},
               [](Graph& g, const std::vector<Output>& x) {
                 const int id = g.AddNode("SparseSoftmaxCrossEntropyWithLogits",
                                          {x[0], ops::Const(g, std::vector<int32_t>{2, 0, 3})});
                 return Output(&g, id, 1);
               },
               -2, 2});
  t.push_back({"SparseSoftmaxCrossEntropyWithLogits", "loss plus backprop wrt logits", {{3, 4}},
               [](Graph& g, const std::vector<Output>& x) {
                 const int id = g.AddNode("SparseSoftmaxCrossEntropyWithLogits",
                                          {x[0], ops::Const(g, std::vector<int32_t>{1, 1, 0})});
                 return ops::Add(g, ops::ExpandDims(g, Output(&g, id, 0), -1), Output(&g, id, 1));
               },
               -2, 2});
  t.push_back({"L2Loss", "half the sum of squares", {{2, 3}},
               [](Graph& g, const std::vector<Output>& x) { return ops::L2Loss(g, x[0]); }});
  t.push_back({"MatMul", "a x b", {{2, 3}, {3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::MatMul(g, x[0], x[1]); }});
  t.push_back({"MatMul", "a^T x b", {{3, 2}, {3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::MatMul(g, x[0], x[1], {true, false}); }});
  t.push_back({"MatMul", "a x b^T", {{2, 3}, {4, 3}},
               [](Graph& g, const std::vector<Output>& x) { return ops::MatMul(g, x[0], x[1], {false, true}); }});
  t.push_back({"MatMul", "a^T x b^T", {{3, 2}, {4, 3}},
               [](Graph& g, const std::vector<Output>& x) { return ops::MatMul(g, x[0], x[1], {true, true}); }});
  t.push_back({"BatchMatMul", "equal batch dims", {{2, 2, 3}, {2, 3, 2}},
               [](Graph& g, const std::vector<Output>& x) { return ops::BatchMatMul(g, x[0], x[1]); }});
  t.push_back({"BatchMatMul", "transposed operands", {{2, 3, 2}, {2, 4, 3}},
               [](Graph& g, const std::vector<Output>& x) {
                 return ops::BatchMatMul(g, x[0], x[1], {true, true});
               }});
  t.push_back({"BatchMatMul", "broadcast batch dims", {{2, 2, 3}, {3, 2}},
               [](Graph& g, const std::vector<Output>& x) { return ops::BatchMatMul(g, x[0], x[1]); }});
  t.push_back({"BiasAdd", "bias over the last axis", {{2, 3, 4}, {4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::BiasAdd(g, x[0], x[1]); }});
  t.push_back({"FusedMatMul", "a x b + bias", {{2, 3}, {3, 4}, {4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::FusedMatMul(g, x[0], x[1], x[2]); }});
  // Relu: a bias offset of +-5 per column keeps every pre-activation (|a b| <= 3,
  // |bias| <= 1) away from the kink; both signs, so some columns are cut.
  t.push_back({"FusedMatMul", "relu(a^T x b^T + bias)", {{3, 2}, {4, 3}, {4}},
               [](Graph& g, const std::vector<Output>& x) {
                 auto off = ops::Const(g, Tensor::FromVector<double>({5, -5, 5, -5}, {4}));
                 return ops::FusedMatMul(g, x[0], x[1], ops::Add(g, x[2], off), "relu", {true, true});
               }});
  t.push_back({"DotInteraction", "dense [3, 4] with 3 sparse rows", {{3, 4}, {3, 3, 4}},
               [](Graph& g, const std::vector<Output>& x) { return ops::DotInteraction(g, x[0], x[1]); }});
  t.push_back({"DotInteraction", "width 16 (the unrolled kernel), 2 sparse rows", {{2, 16}, {2, 2, 16}},
               [](Graph& g, const std::vector<Output>& x) { return ops::DotInteraction(g, x[0], x[1]); }});
  t.push_back({"Conv2D", "3x3 SAME", {{1, 5, 5, 2}, {3, 3, 2, 3}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Conv2D(g, x[0], x[1]); }});
  t.push_back({"Conv2D", "3x2 VALID stride 2x1", {{2, 5, 4, 2}, {3, 2, 2, 2}},
               [](Graph& g, const std::vector<Output>& x) {
                 return ops::Conv2D(g, x[0], x[1], {{1, 2, 1, 1}, "VALID"});
               }});
  t.push_back({"Conv2D", "1x1 pointwise", {{2, 3, 3, 3}, {1, 1, 3, 2}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Conv2D(g, x[0], x[1]); }});
  t.push_back({"FusedConv2D", "3x3 SAME + bias", {{1, 5, 5, 2}, {3, 3, 2, 3}, {3}},
               [](Graph& g, const std::vector<Output>& x) { return ops::FusedConv2D(g, x[0], x[1], x[2]); }});
  // Relu: 1x1 windows over 2 channels (|conv| <= 2, |bias| <= 1) and a bias
  // offset of +-5 per channel keep every pre-activation away from the kink.
  t.push_back({"FusedConv2D", "relu(1x1 VALID stride 2 + bias)", {{2, 5, 4, 2}, {1, 1, 2, 2}, {2}},
               [](Graph& g, const std::vector<Output>& x) {
                 auto off = ops::Const(g, Tensor::FromVector<double>({5, -5}, {2}));
                 return ops::FusedConv2D(g, x[0], x[1], ops::Add(g, x[2], off), "relu", {{1, 2, 2, 1}, "VALID"});
               }});
  t.push_back({"MaxPool", "2x2 VALID stride 2", {{1, 4, 4, 2}},
               [](Graph& g, const std::vector<Output>& x) { return ops::MaxPool(g, Distinct(g, x[0])); },
               0.0, 0.1});
  t.push_back({"MaxPool", "3x3 SAME stride 2", {{2, 5, 5, 1}},
               [](Graph& g, const std::vector<Output>& x) {
                 return ops::MaxPool(g, Distinct(g, x[0]), {{1, 3, 3, 1}, {1, 2, 2, 1}, "SAME"});
               },
               0.0, 0.1});
  t.push_back({"AvgPool", "2x2 VALID stride 2", {{1, 4, 4, 2}},
               [](Graph& g, const std::vector<Output>& x) { return ops::AvgPool(g, x[0]); }});
  t.push_back({"AvgPool", "3x3 SAME stride 2", {{2, 5, 5, 1}},
               [](Graph& g, const std::vector<Output>& x) {
                 return ops::AvgPool(g, x[0], {{1, 3, 3, 1}, {1, 2, 2, 1}, "SAME"});
               }});
  // Each evaluation builds a fresh kernel, so every run draws the same mask.
  t.push_back({"Dropout", "rate 0.5", {{4, 5}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Dropout(g, x[0], 0.5, 3); }});
}

}  // namespace sf::testing
