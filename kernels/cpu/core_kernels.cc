// Kernels of the core ops: Const, Placeholder, Identity, NoOp, StopGradient, Assert.
#include <sstream>

#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace {

class ConstKernel : public OpKernel {
 public:
  ConstKernel(const KernelInit& init, Status* s) {
    auto v = init.Attr<Tensor>("value");
    if (!v.ok()) *s = v.status();
    else value_ = *v;
  }
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, value_); }

 private:
  Tensor value_;
};

// Reached only when the placeholder was not fed: the executor replaces fed
// placeholders with their feeds.
class PlaceholderKernel : public OpKernel {
 public:
  PlaceholderKernel(const KernelInit& init, Status*) : name_(init.node_name) {
    auto t = init.Attr<DType>("dtype");
    auto sh = init.AttrOr<PartialShape>("shape", PartialShape());
    desc_ = std::string(t.ok() ? DTypeName(*t) : "?") + (sh.ok() ? sh->ToString() : "");
  }
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(InvalidArgument("placeholder '" + name_ + "' (" + desc_ +
                                   ") must be fed a value"));
  }

 private:
  std::string name_, desc_;
};

class IdentityKernel : public OpKernel {
 public:
  IdentityKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, ctx->input(0)); }
};

class NoOpKernel : public OpKernel {
 public:
  NoOpKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext*) override {}
};

// The first `summarize` values of t (all when negative), space-separated, "..." when cut: as
// TensorFlow's Assert prints its data.
std::string SummarizeValues(const Tensor& t, int64_t summarize) {
  if (!t.valid()) return "<invalid>";
  if (t.dtype() == DType::kResource) return "<resource>";
  const int64_t n = summarize < 0 ? t.num_elements() : std::min(summarize, t.num_elements());
  std::ostringstream os;
  const bool known = DispatchNumeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < n; ++i) os << (i ? " " : "") << +t.data<T>()[i];
  });
  if (!known) return std::string("<") + DTypeName(t.dtype()) + ">";
  if (n < t.num_elements()) os << "...";
  return os.str();
}

// Passes when its condition is true; otherwise fails the step with
// InvalidArgument "assertion failed: " and the template with each "{}"
// replaced by the next data input's values ("{{" and "}}" are braces); data
// the template does not place follow it, each in brackets.
class AssertKernel : public OpKernel {
 public:
  AssertKernel(const KernelInit& init, Status* s) {
    auto t = init.AttrOr<std::string>("template", "");
    auto n = init.AttrOr<int64_t>("summarize", 3);
    if (!t.ok()) *s = t.status();
    else if (!n.ok()) *s = n.status();
    else template_ = *t, summarize_ = *n;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& c = ctx->input(0);
    if (c.dtype() != DType::kBool || c.num_elements() != 1)
      return ctx->SetStatus(InvalidArgument("Assert's condition must be one bool, got " + c.DebugString(4)));
    if (c.data<bool>()[0]) return;
    std::string msg = "assertion failed: ";
    int next = 1;
    const size_t len = template_.size();
    for (size_t i = 0; i < len; ++i) {
      const char ch = template_[i];
      const bool pair = i + 1 < len;
      if (pair && ch == '{' && template_[i + 1] == '{') {
        msg += '{', ++i;
      } else if (pair && ch == '}' && template_[i + 1] == '}') {
        msg += '}', ++i;
      } else if (pair && ch == '{' && template_[i + 1] == '}' && next < ctx->num_inputs()) {
        msg += SummarizeValues(ctx->input(next++), summarize_), ++i;
      } else {
        msg += ch;
      }
    }
    for (; next < ctx->num_inputs(); ++next)
      msg += (msg.back() == ' ' ? "[" : " [") + SummarizeValues(ctx->input(next), summarize_) + "]";
    ctx->SetStatus(InvalidArgument(msg));
  }

 private:
  std::string template_;
  int64_t summarize_ = 3;
};

}  // namespace

void RegisterCoreKernels(KernelRegistry& reg) {
  RegisterCPU<ConstKernel>(reg, "Const", {DType::kInvalid});
  RegisterCPU<PlaceholderKernel>(reg, "Placeholder", {DType::kInvalid});
  RegisterCPU<IdentityKernel>(reg, "Identity", {DType::kInvalid});
  RegisterCPU<IdentityKernel>(reg, "StopGradient", {DType::kInvalid});
  RegisterCPU<NoOpKernel>(reg, "NoOp", {DType::kInvalid});
  RegisterCPU<AssertKernel>(reg, "Assert", {DType::kInvalid});
}

}  // namespace sf
