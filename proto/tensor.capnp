# Tensor values on the wire and on disk: shared by GraphDef (Const values,
# tensor attrs) and by any message that carries tensors between processes.
@0xdc637cf89527de09;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("sf::proto");

# Mirrors sf::DType (include/shardflow/tensor.h); the ordinals are the same.
enum DType {
  invalid @0;
  float32 @1;
  float64 @2;
  int32 @3;
  int64 @4;
  bool @5;
  bfloat16 @6;
  float16 @7;
  resource @8;
  int8 @9;
  int16 @10;
  uint8 @11;
}

# What graph construction knows of a shape: unknown rank, or dims with -1 for
# an unknown dimension.
struct PartialShape {
  unknownRank @0 :Bool;
  dims @1 :List(Int64);
}

# A dense tensor in C (row-major) order. `data` holds numElements(shape) *
# sizeof(dtype) little-endian bytes (bool: one byte, 0 or 1). An invalid
# (empty) tensor has dtype invalid, no dims and no data.
struct Tensor {
  dtype @0 :DType;
  shape @1 :List(Int64);
  data @2 :Data;
}
