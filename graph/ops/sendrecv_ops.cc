// Send/Recv ops: the two halves of a cross-device edge, inserted by
// Partition (graph/partition.h), never by users. Their kernels are in
// kernels/cpu/sendrecv_kernels.cc; the executor keys each transfer by
// (step, tensor_name, frame, iteration).
#include "graph/op_registry.h"
#include "graph/partition.h"

namespace sf {
namespace {

Status TransferAttrs(InferenceContext& c) {
  for (const char* a : {"tensor_name", "send_device", "recv_device"}) {
    SF_ASSIGN_OR_RETURN(std::string v, c.Attr<std::string>(a));
    if (v.empty()) return c.Error(std::string("attr ") + a + " must not be empty");
  }
  return Status::OK();
}

}  // namespace

Status RegisterSendRecvOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("_Send")
      .RequiredAttr<std::string>("tensor_name").RequiredAttr<std::string>("send_device")
      .RequiredAttr<std::string>("recv_device").RequiredAttr<DType>("dtype")
      .Attr("shape", PartialShape())
      .Inputs(1).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(TransferAttrs(c));
        SF_ASSIGN_OR_RETURN(DType t, c.Attr<DType>("dtype"));
        if (t != c.input_dtype(0))
          return c.Error(std::string("attr dtype is ") + DTypeName(t) + " but the sent tensor is " +
                         DTypeName(c.input_dtype(0)));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Sends its input to recv_device under tensor_name (inserted by partitioning; "
               "attrs tensor_name, send_device, recv_device, dtype, shape).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("_Recv")
      .RequiredAttr<std::string>("tensor_name").RequiredAttr<std::string>("send_device")
      .RequiredAttr<std::string>("recv_device").RequiredAttr<DType>("dtype")
      .Attr("shape", PartialShape())
      .Inputs(0).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(TransferAttrs(c));
        SF_ASSIGN_OR_RETURN(DType t, c.Attr<DType>("dtype"));
        if (t == DType::kInvalid) return c.Error("attr dtype must be a valid dtype");
        SF_ASSIGN_OR_RETURN(PartialShape s, c.AttrOr<PartialShape>("shape", PartialShape()));
        c.set_output(0, t, s);
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Receives the tensor sent under tensor_name from send_device (inserted by "
               "partitioning; attrs tensor_name, send_device, recv_device, dtype, shape).").Build()));
  return Status::OK();
}

namespace ops {

namespace {
AttrMap TransferAttrMap(const std::string& key, const std::string& send_device,
                        const std::string& recv_device, DType dtype, PartialShape shape) {
  AttrMap a;
  a.Set("tensor_name", key);
  a.Set("send_device", send_device);
  a.Set("recv_device", recv_device);
  a.Set("dtype", dtype);
  a.Set("shape", std::move(shape));
  return a;
}
}  // namespace

int Send(Graph& g, Output x, const std::string& key, const std::string& send_device,
         const std::string& recv_device, const std::string& name) {
  if (!x.valid()) return -1;
  return g.AddNode("_Send", {x}, TransferAttrMap(key, send_device, recv_device, x.dtype(), x.shape()),
                   name);
}

Output Recv(Graph& g, DType dtype, PartialShape shape, const std::string& key,
            const std::string& send_device, const std::string& recv_device, const std::string& name) {
  return g.Add1("_Recv", {}, TransferAttrMap(key, send_device, recv_device, dtype, std::move(shape)), name);
}

}  // namespace ops
}  // namespace sf
