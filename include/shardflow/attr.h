// Attribute values of a graph node (the op's compile-time parameters) and a
// small map of them.
// Thread-safety: values.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// int, float, bool, string, dtype, int list (also concrete shapes), float list,
// partial shape, tensor (Const values), list of dtypes.
using AttrValue = std::variant<int64_t, double, bool, std::string, DType, std::vector<int64_t>,
                               std::vector<double>, PartialShape, Tensor, std::vector<DType>>;

// "int", "float", ... for error messages.
const char* AttrKindName(const AttrValue& v);
// A short printable form (tensors summarised).
std::string AttrValueString(const AttrValue& v);

class AttrMap {
 public:
  void Set(const std::string& name, AttrValue v) { attrs_[name] = std::move(v); }
  bool Has(const std::string& name) const { return attrs_.count(name) != 0; }
  // Removes the attribute name (nothing when it is absent).
  void Erase(const std::string& name) { attrs_.erase(name); }
  const AttrValue* Find(const std::string& name) const {
    auto it = attrs_.find(name);
    return it == attrs_.end() ? nullptr : &it->second;
  }
  // The attribute as T; NotFound or InvalidArgument (wrong kind) naming it.
  template <typename T>
  Result<T> Get(const std::string& name) const {
    const AttrValue* v = Find(name);
    if (!v) return NotFound("missing attribute '" + name + "'");
    if (auto* p = std::get_if<T>(v)) return *p;
    // ints are accepted where floats are asked for, the common user slip.
    if constexpr (std::is_same_v<T, double>) {
      if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
    }
    return InvalidArgument("attribute '" + name + "' is " + AttrKindName(*v) +
                           ", not the kind asked for");
  }
  // The attribute as T, or def when absent (a wrong kind is still an error).
  template <typename T>
  Result<T> GetOr(const std::string& name, T def) const {
    if (!Has(name)) return def;
    return Get<T>(name);
  }
  const std::map<std::string, AttrValue>& all() const { return attrs_; }

 private:
  std::map<std::string, AttrValue> attrs_;
};

}  // namespace sf
