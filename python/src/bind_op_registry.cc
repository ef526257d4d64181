// The op registry: every registered op's signature, from which
// python/shardflow/ops.py generates one function per op (sf.ops).
#include <string>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "shardflow/op_registry.h"

namespace sf {
namespace python {
namespace {

py::list OpDefs() {
  const OpRegistry& reg = StandardOpRegistry();
  py::list out;
  for (const std::string& name : reg.Names()) {
    const OpDef* d = reg.Find(name);
    py::list attrs;
    for (const AttrDef& a : d->attrs)
      attrs.append(py::make_tuple(a.name, AttrKindName(a.default_value), AttrToPy(a.default_value), a.required));
    py::dict e;
    e["name"] = d->name;
    e["min_inputs"] = d->min_inputs;
    e["max_inputs"] = d->max_inputs;
    e["stateful"] = d->stateful;
    e["differentiable"] = d->differentiable;
    e["summary"] = d->summary;
    e["attrs"] = attrs;
    e["input_names"] = d->input_names;
    out.append(e);
  }
  return out;
}

}  // namespace

void BindOpRegistry(py::module_& m) {
  m.def("op_defs", &OpDefs, "Every registered op: name, inputs, attrs (name, kind, default, required), summary.");
}

}  // namespace python
}  // namespace sf
