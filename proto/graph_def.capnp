# GraphDef: a shardflow graph on disk (`shardflow run --graph G.capnp`) and on
# the wire. Only what a user states is stored (op, inputs, attrs, device);
# output dtypes and shapes are re-inferred by the op's shape function when the
# graph is loaded, so a file cannot contradict the op registry.
@0xbb33ae1adb0f300b;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("sf::proto");

using T = import "tensor.capnp";

# Bumped when the meaning of a field changes; readers reject other versions.
const graphDefFormatVersion :UInt32 = 1;

# One attribute value: a union over every sf::AttrValue kind (include/shardflow/attr.h).
struct AttrValue {
  union {
    intValue @0 :Int64;
    floatValue @1 :Float64;
    boolValue @2 :Bool;
    stringValue @3 :Text;
    dtypeValue @4 :T.DType;
    intList @5 :List(Int64);
    floatList @6 :List(Float64);
    shapeValue @7 :T.PartialShape;
    tensorValue @8 :T.Tensor;
    dtypeList @9 :List(T.DType);
  }
}

struct Attr {
  name @0 :Text;
  value @1 :AttrValue;
}

# A data input: output `index` of the node named `node`.
struct NodeInput {
  node @0 :Text;
  index @1 :Int32;
}

struct NodeDef {
  name @0 :Text;
  op @1 :Text;
  inputs @2 :List(NodeInput);
  # Names of the nodes this one runs after.
  controlInputs @3 :List(Text);
  # Requested device; "" = any.
  device @4 :Text;
  attrs @5 :List(Attr);
}

struct GraphDef {
  formatVersion @0 :UInt32;
  # In node id order: every data input names an earlier node.
  # Variable initializers need no list of their own: ops::Variable marks its
  # Assign with the bool attr "_initializer", which is saved like any attr.
  nodes @1 :List(NodeDef);
}
