#include "shardflow/attr.h"

namespace sf {

const char* AttrKindName(const AttrValue& v) {
  static const char* kNames[] = {"int",   "float",        "bool",   "string",
                                 "dtype", "int list",     "float list",
                                 "shape", "tensor",       "dtype list"};
  return kNames[v.index()];
}

std::string AttrValueString(const AttrValue& v) {
  struct Printer {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const { return std::to_string(x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return "\"" + x + "\""; }
    std::string operator()(DType x) const { return DTypeName(x); }
    std::string operator()(const std::vector<int64_t>& x) const { return ShapeString(x); }
    std::string operator()(const std::vector<double>& x) const {
      std::string s = "[";
      for (size_t i = 0; i < x.size(); ++i) s += (i ? "," : "") + std::to_string(x[i]);
      return s + "]";
    }
    std::string operator()(const PartialShape& x) const { return x.ToString(); }
    std::string operator()(const Tensor& x) const { return x.DebugString(4); }
    std::string operator()(const std::vector<DType>& x) const {
      std::string s = "[";
      for (size_t i = 0; i < x.size(); ++i) s += std::string(i ? "," : "") + DTypeName(x[i]);
      return s + "]";
    }
  };
  return std::visit(Printer{}, v);
}

}  // namespace sf
