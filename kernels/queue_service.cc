#include "kernels/queue_service.h"

#include <cstring>

namespace sf {

const char* QueueKindName(QueueSpec::Kind k) {
  switch (k) {
    case QueueSpec::Kind::kFIFO: return "FIFOQueue";
    case QueueSpec::Kind::kRandomShuffle: return "RandomShuffleQueue";
    case QueueSpec::Kind::kPaddingFIFO: return "PaddingFIFOQueue";
  }
  return "Queue";
}

Status ValidateQueueSpec(const std::string& name, const QueueSpec& spec) {
  const std::string where = std::string(QueueKindName(spec.kind)) + " '" + name + "'";
  if (spec.component_types.empty()) return InvalidArgument(where + " needs at least one component type");
  for (size_t i = 0; i < spec.component_types.size(); ++i) {
    DType t = spec.component_types[i];
    if (t == DType::kInvalid || t == DType::kResource)
      return InvalidArgument(where + ": component " + std::to_string(i) + " cannot be " + DTypeName(t));
  }
  if (!spec.shapes.empty() && spec.shapes.size() != spec.component_types.size())
    return InvalidArgument(where + " has " + std::to_string(spec.component_types.size()) +
                           " component types but " + std::to_string(spec.shapes.size()) + " shapes");
  if (spec.capacity == 0 || spec.capacity < -1)
    return InvalidArgument(where + ": capacity must be positive or -1 (unbounded), got " +
                           std::to_string(spec.capacity));
  if (spec.min_after_dequeue < 0)
    return InvalidArgument(where + ": min_after_dequeue must be >= 0, got " +
                           std::to_string(spec.min_after_dequeue));
  if (spec.capacity > 0 && spec.min_after_dequeue >= spec.capacity)
    return InvalidArgument(where + ": min_after_dequeue (" + std::to_string(spec.min_after_dequeue) +
                           ") must be below capacity (" + std::to_string(spec.capacity) + ")");
  if (spec.kind == QueueSpec::Kind::kPaddingFIFO) {
    if (spec.shapes.empty()) return InvalidArgument(where + " needs a shape per component");
    for (size_t i = 0; i < spec.shapes.size(); ++i)
      if (!spec.shapes[i].rank_known())
        return InvalidArgument(where + ": component " + std::to_string(i) +
                               " needs a known rank (dims may be -1)");
  }
  return Status::OK();
}

Status ValidateQueueTuple(const std::string& name, const QueueSpec& spec, const QueueTuple& t) {
  if (t.size() != spec.component_types.size())
    return InvalidArgument("queue '" + name + "' has " + std::to_string(spec.component_types.size()) +
                           " components, enqueue gave " + std::to_string(t.size()));
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].dtype() != spec.component_types[i])
      return InvalidArgument("queue '" + name + "' component " + std::to_string(i) + " is " +
                             DTypeName(spec.component_types[i]) + ", enqueue gave " +
                             (t[i].valid() ? DTypeName(t[i].dtype()) : "no tensor"));
    if (!spec.shapes.empty() && !spec.shapes[i].CompatibleWith(t[i].shape()))
      return InvalidArgument("queue '" + name + "' component " + std::to_string(i) + " has shape " +
                             spec.shapes[i].ToString() + ", enqueue gave shape " +
                             ShapeString(t[i].shape()));
  }
  return Status::OK();
}

Result<int64_t> ValidateQueueBatch(const std::string& name, const QueueSpec& spec,
                                   const QueueTuple& batch) {
  if (batch.size() != spec.component_types.size())
    return InvalidArgument("queue '" + name + "' has " + std::to_string(spec.component_types.size()) +
                           " components, enqueue_many gave " + std::to_string(batch.size()));
  int64_t n = -1;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Tensor& b = batch[i];
    if (b.dtype() != spec.component_types[i])
      return InvalidArgument("queue '" + name + "' component " + std::to_string(i) + " is " +
                             DTypeName(spec.component_types[i]) + ", enqueue_many gave " +
                             (b.valid() ? DTypeName(b.dtype()) : "no tensor"));
    if (b.rank() == 0)
      return InvalidArgument("queue '" + name + "' component " + std::to_string(i) +
                             ": enqueue_many needs a batch dimension, got a scalar");
    if (n >= 0 && b.dim(0) != n)
      return InvalidArgument("queue '" + name + "' component " + std::to_string(i) + " has " +
                             std::to_string(b.dim(0)) + " elements in the batch, component 0 has " +
                             std::to_string(n));
    n = b.dim(0);
    const Shape elem(b.shape().begin() + 1, b.shape().end());
    if (!spec.shapes.empty() && !spec.shapes[i].CompatibleWith(elem))
      return InvalidArgument("queue '" + name + "' component " + std::to_string(i) + " has shape " +
                             spec.shapes[i].ToString() + ", enqueue_many gave elements of shape " +
                             ShapeString(elem));
  }
  return n;
}

namespace {

// Component c of an element, without copying: its bytes and dims.
struct ElementView {
  const char* data;
  const int64_t* dims;
  int rank;
  int64_t num_elements;
};

ElementView ViewOf(const QueueElement& e, size_t c) {
  const Tensor& t = (*e.src)[c];
  const char* base = static_cast<const char*>(t.raw_data());
  if (e.row < 0) return ElementView{base, t.shape().data(), t.rank(), t.num_elements()};
  const int64_t per_row = t.dim(0) > 0 ? t.num_elements() / t.dim(0) : 0;
  return ElementView{base + e.row * per_row * DTypeSize(t.dtype()), t.shape().data() + 1, t.rank() - 1,
                     per_row};
}

bool SameDims(const ElementView& v, const Shape& s) {
  if (v.rank != static_cast<int>(s.size())) return false;
  for (int d = 0; d < v.rank; ++d)
    if (v.dims[d] != s[d]) return false;
  return true;
}

// Copies an element (rank r) into dst (same rank, every dim >= its own) at the origin.
void CopyPadded(const ElementView& v, char* dst, const Shape& dst_shape, size_t esize) {
  const int r = v.rank;
  if (r == 0) {
    std::memcpy(dst, v.data, esize);
    return;
  }
  if (v.num_elements == 0) return;
  const size_t row = static_cast<size_t>(v.dims[r - 1]) * esize;
  const int64_t rows = v.num_elements / v.dims[r - 1];
  std::vector<int64_t> idx(r - 1, 0);
  for (int64_t k = 0; k < rows; ++k) {
    int64_t off = 0;
    for (int d = 0; d < r - 1; ++d) off = off * dst_shape[d] + idx[d];
    off *= dst_shape[r - 1];
    std::memcpy(dst + off * esize, v.data + k * row, row);
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[d] < v.dims[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

QueueTuple MaterializeQueueElement(const QueueElement& e) {
  if (e.row < 0) return *e.src;
  QueueTuple out;
  out.reserve(e.src->size());
  for (size_t c = 0; c < e.src->size(); ++c) {
    const ElementView v = ViewOf(e, c);
    const DType t = (*e.src)[c].dtype();
    Tensor x(t, Shape(v.dims, v.dims + v.rank));
    const size_t bytes = static_cast<size_t>(v.num_elements) * DTypeSize(t);
    if (bytes) std::memcpy(x.raw_data(), v.data, bytes);
    out.push_back(std::move(x));
  }
  return out;
}

Result<QueueTuple> StackQueueElements(const std::string& name, const std::vector<QueueElement>& elems,
                                      const std::vector<DType>& types, bool pad) {
  QueueTuple out;
  const int64_t n = static_cast<int64_t>(elems.size());
  for (size_t c = 0; c < types.size(); ++c) {
    Shape max_shape;
    if (n > 0) {
      const ElementView v0 = ViewOf(elems[0], c);
      max_shape.assign(v0.dims, v0.dims + v0.rank);
    }
    bool same = true;
    for (const QueueElement& e : elems) {
      const ElementView v = ViewOf(e, c);
      if (SameDims(v, max_shape)) continue;
      same = false;
      const Shape s(v.dims, v.dims + v.rank);
      if (!pad)
        return InvalidArgument("queue '" + name + "' component " + std::to_string(c) +
                               ": cannot batch elements of shapes " + ShapeString(max_shape) + " and " +
                               ShapeString(s) + " (a PaddingFIFOQueue pads them)");
      if (s.size() != max_shape.size())
        return InvalidArgument("queue '" + name + "' component " + std::to_string(c) +
                               ": cannot pad elements of ranks " + std::to_string(max_shape.size()) +
                               " and " + std::to_string(s.size()));
      for (size_t d = 0; d < s.size(); ++d) max_shape[d] = std::max(max_shape[d], s[d]);
    }
    Shape shape{n};
    shape.insert(shape.end(), max_shape.begin(), max_shape.end());
    Tensor t = same ? Tensor(types[c], shape) : Tensor::Zeros(types[c], shape);
    const size_t esize = DTypeSize(types[c]);
    const size_t slot = static_cast<size_t>(NumElements(max_shape)) * esize;
    char* dst = static_cast<char*>(t.raw_data());
    for (int64_t k = 0; k < n; ++k) {
      const ElementView v = ViewOf(elems[k], c);
      if (same) {
        if (slot) std::memcpy(dst + k * slot, v.data, slot);
      } else {
        CopyPadded(v, dst + k * slot, max_shape, esize);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<int64_t> EncodeQueueShapes(const std::vector<PartialShape>& shapes) {
  std::vector<int64_t> v;
  for (const PartialShape& s : shapes) {
    v.push_back(s.rank());
    v.insert(v.end(), s.dims().begin(), s.dims().end());
  }
  return v;
}

Result<std::vector<PartialShape>> DecodeQueueShapes(const std::vector<int64_t>& v) {
  std::vector<PartialShape> out;
  for (size_t i = 0; i < v.size();) {
    const int64_t r = v[i++];
    if (r < 0) {
      out.push_back(PartialShape());
      continue;
    }
    if (i + r > v.size()) return InvalidArgument("attribute 'shapes' is truncated");
    out.push_back(PartialShape(Shape(v.begin() + i, v.begin() + i + r)));
    i += r;
  }
  return out;
}

Result<QueueSpec> QueueSpecFromAttrs(const std::string& op, const AttrMap& attrs) {
  QueueSpec spec;
  if (op == "FIFOQueue") spec.kind = QueueSpec::Kind::kFIFO;
  else if (op == "RandomShuffleQueue") spec.kind = QueueSpec::Kind::kRandomShuffle;
  else if (op == "PaddingFIFOQueue") spec.kind = QueueSpec::Kind::kPaddingFIFO;
  else return InvalidArgument("'" + op + "' is not a queue op");
  SF_ASSIGN_OR_RETURN(spec.component_types, attrs.Get<std::vector<DType>>("component_types"));
  SF_ASSIGN_OR_RETURN(std::vector<int64_t> shapes,
                      attrs.GetOr<std::vector<int64_t>>("shapes", std::vector<int64_t>()));
  SF_ASSIGN_OR_RETURN(spec.shapes, DecodeQueueShapes(shapes));
  SF_ASSIGN_OR_RETURN(spec.capacity, attrs.GetOr<int64_t>("capacity", -1));
  SF_ASSIGN_OR_RETURN(spec.min_after_dequeue, attrs.GetOr<int64_t>("min_after_dequeue", 0));
  SF_ASSIGN_OR_RETURN(spec.seed, attrs.GetOr<int64_t>("seed", 0));
  return spec;
}

}  // namespace sf
