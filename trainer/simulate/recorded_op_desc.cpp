#include "trainer/simulate/recorded_op_desc.h"

#include <algorithm>

#include "trainer/simulate/storage_ids.h"

namespace titan {

using devices::OpDesc;
using devices::OpKind;

int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// isList first: isTensorList is a call into libtorch, and most values are tensors or scalars.
int64_t ivalue_bytes(const c10::IValue& v) {
  if (v.isTensor()) return tensor_bytes(v.toTensor());
  if (v.isList() && v.isTensorList()) {
    int64_t b = 0;
    for (const at::Tensor& t : v.toTensorList().vec()) b += tensor_bytes(t);
    return b;
  }
  return 0;
}

namespace {
// add_uses, returning ivalue_bytes(v) (one pass over a call's inputs for both).
int64_t add_uses_counting(const c10::IValue& v, std::vector<devices::TensorUse>* out) {
  auto one = [&](const at::Tensor& t) {
    const int64_t bytes = tensor_bytes(t);
    if (const int64_t id = storage_id(t)) out->push_back({id, bytes});
    return bytes;
  };
  if (v.isTensor()) return one(v.toTensor());
  int64_t b = 0;
  if (v.isList() && v.isTensorList())
    for (const at::Tensor& t : v.toTensorList().vec()) b += one(t);
  return b;
}
}  // namespace

void add_uses(const c10::IValue& v, std::vector<devices::TensorUse>* out) { add_uses_counting(v, out); }

void describe_call(const RecordedOpName& op, c10::ArrayRef<const c10::IValue> in, OpDesc* out, int64_t* first_bytes,
                   size_t* first_reads) {
  const devices::InternedName& name = op.name;
  OpDesc& d = *out;
  *first_bytes = in.empty() ? 0 : ivalue_bytes(in[0]);
  *first_reads = in.empty() ? 0 : kFirstInputNotRead;
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
  // The uses of inputs from `from` on, and their bytes.
  auto add_reads = [&](size_t from) {
    if (from < in.size()) d.reads.reserve(in.size() - from);
    int64_t bytes = 0;
    for (size_t i = from; i < in.size(); ++i) {
      bytes += add_uses_counting(in[i], &d.reads);
      if (i == 0) *first_reads = d.reads.size();
    }
    return bytes;
  };
  if (op.mm && in.size() >= 2 && mm_at(0, 1)) {
    add_reads(0);
    return;
  }
  if (op.addmm && in.size() >= 3 && mm_at(1, 2)) {
    add_reads(0);
    return;
  }
  d.name = name;
  if (op.view) {
    d.kind = OpKind::kView;
    return;
  }
  if (op.copy && in.size() >= 2 && in[0].isTensor() && in[1].isTensor()) {
    const bool cast = in[0].toTensor().scalar_type() != in[1].toTensor().scalar_type();
    d.kind = cast ? OpKind::kElementwise : OpKind::kOther;  // a cast fuses, a plain copy moves
    d.bytes_read = ivalue_bytes(in[1]);
    add_reads(1);
    return;
  }
  d.kind = op.reduction ? OpKind::kReduction : op.movement ? OpKind::kOther : OpKind::kElementwise;
  d.bytes_read = op.writes_only ? 0 : add_reads(0);
}

// A non-in-place, non-out= op all of whose outputs alias an input did no work (a same-dtype
// type_as, contiguous of a contiguous tensor): nothing to record.
InputStorages input_storages(c10::ArrayRef<const c10::IValue> in) {
  InputStorages out;
  for (const auto& i : in)
    if (i.isTensor() && i.toTensor().defined()) out.push_back(i.toTensor().storage().unsafeGetStorageImpl());
  return out;
}

bool returns_an_input(const at::RecordFunction& fn, const InputStorages& inputs) {
  // An out= overload returns the buffer it was given, after writing it.
  if (const auto op = fn.operator_name(); !op || op->overload_name.find("out") != std::string::npos) return false;
  bool any = false;
  for (const auto& o : fn.outputs()) {
    if (!o.isTensor() || !o.toTensor().defined()) continue;
    // Tensor::is_alias_of: the same storage.
    const c10::StorageImpl* s = o.toTensor().storage().unsafeGetStorageImpl();
    if (std::find(inputs.begin(), inputs.end(), s) == inputs.end()) return false;
    any = true;
  }
  return any;
}

}  // namespace titan
