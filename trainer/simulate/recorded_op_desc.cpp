#include "trainer/simulate/recorded_op_desc.h"

#include "trainer/simulate/storage_ids.h"

namespace titan {

using devices::OpDesc;
using devices::OpKind;

int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

int64_t ivalue_bytes(const c10::IValue& v) {
  if (v.isTensor()) return tensor_bytes(v.toTensor());
  if (v.isTensorList()) {
    int64_t b = 0;
    for (const at::Tensor& t : v.toTensorList().vec()) b += tensor_bytes(t);
    return b;
  }
  return 0;
}

void add_uses(const c10::IValue& v, std::vector<devices::TensorUse>* out) {
  auto one = [&](const at::Tensor& t) {
    if (const int64_t id = storage_id(t)) out->push_back({id, tensor_bytes(t)});
  };
  if (v.isTensor()) one(v.toTensor());
  if (v.isTensorList())
    for (const at::Tensor& t : v.toTensorList().vec()) one(t);
}

OpDesc describe_call(const RecordedOpName& op, c10::ArrayRef<const c10::IValue> in, int64_t* first_bytes) {
  const std::string& name = op.name;
  OpDesc d;
  *first_bytes = in.empty() ? 0 : ivalue_bytes(in[0]);
  auto mm_at = [&](size_t a, size_t b) {
    if (!in[a].isTensor() || !in[b].isTensor()) return false;
    const at::IntArrayRef sa = in[a].toTensor().sizes(), sb = in[b].toTensor().sizes();
    devices::MatmulShape s;
    if (sa.size() == 3 && sb.size() == 3) {
      s = {sa[0], sa[1], sb[2], sa[2]};
    } else if (sa.size() == 2 && sb.size() == 2) {
      s = {1, sa[0], sb[1], sa[1]};
    } else {
      return false;
    }
    d = devices::matmul_op(name, s, static_cast<int64_t>(in[a].toTensor().element_size()));
    return true;
  };
  auto add_reads = [&](size_t from) {
    if (from < in.size()) d.reads.reserve(in.size() - from);
    for (size_t i = from; i < in.size(); ++i) add_uses(in[i], &d.reads);
  };
  if (op.mm && in.size() >= 2 && mm_at(0, 1)) {
    add_reads(0);
    return d;
  }
  if (op.addmm && in.size() >= 3 && mm_at(1, 2)) {
    add_reads(0);
    return d;
  }
  d.name = name;
  if (op.view) {
    d.kind = OpKind::kView;
    return d;
  }
  int64_t read = 0;
  for (const auto& v : in) read += ivalue_bytes(v);
  if (op.copy && in.size() >= 2 && in[0].isTensor() && in[1].isTensor()) {
    const bool cast = in[0].toTensor().scalar_type() != in[1].toTensor().scalar_type();
    d.kind = cast ? OpKind::kElementwise : OpKind::kOther;  // a cast fuses, a plain copy moves
    d.bytes_read = ivalue_bytes(in[1]);
    add_reads(1);
    return d;
  }
  if (op.writes_only) read = 0;
  else add_reads(0);
  d.kind = op.reduction ? OpKind::kReduction : op.movement ? OpKind::kOther : OpKind::kElementwise;
  d.bytes_read = read;
  return d;
}

// A non-in-place, non-out= op all of whose outputs alias an input did no work (a same-dtype
// type_as, contiguous of a contiguous tensor): nothing to record.
bool returns_an_input(const at::RecordFunction& fn) {
  // An out= overload returns the buffer it was given, after writing it.
  if (const auto op = fn.operator_name(); !op || op->overload_name.find("out") != std::string::npos) return false;
  bool any = false;
  for (const auto& o : fn.outputs()) {
    if (!o.isTensor() || !o.toTensor().defined()) continue;
    bool aliased = false;
    for (const auto& i : fn.inputs())
      aliased |= i.isTensor() && i.toTensor().defined() && o.toTensor().is_alias_of(i.toTensor());
    if (!aliased) return false;
    any = true;
  }
  return any;
}

}  // namespace titan
