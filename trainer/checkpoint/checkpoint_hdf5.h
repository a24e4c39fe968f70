// Thin RAII layer over the HDF5 C API for checkpoints: owned hid_t handles, typed attributes,
// 1-D datasets written whole and read by element range. Used by checkpoint_io.cpp only;
// every failure becomes a titan::Error naming the file and object.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace titan::h5 {

// One owned HDF5 identifier; closed with the function matching its kind.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_, close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

Handle create_file(const std::string& path);  // truncates
Handle open_file_readonly(const std::string& path);
// Closes the file, flushing HDF5's buffers; throws if the close fails.
void close_file(Handle& file, const std::string& path);

Handle create_group(hid_t loc, const std::string& name);
Handle open_group(hid_t loc, const std::string& name);
bool exists(hid_t loc, const std::string& name);
std::vector<std::string> children(hid_t group);  // link names, in name order

// Attributes (scalar or 1-D) on any object.
void set_attr(hid_t obj, const std::string& name, const std::string& value);
void set_attr(hid_t obj, const std::string& name, int64_t value);
void set_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values);
void set_attr(hid_t obj, const std::string& name, const std::vector<uint32_t>& values);
bool has_attr(hid_t obj, const std::string& name);
std::string attr_string(hid_t obj, const std::string& name);
int64_t attr_int(hid_t obj, const std::string& name);
std::vector<int64_t> attr_ints(hid_t obj, const std::string& name);
std::vector<uint32_t> attr_u32s(hid_t obj, const std::string& name);

// A 1-D contiguous dataset of `count` elements of a native type (H5T_NATIVE_FLOAT ...).
Handle write_dataset(hid_t loc, const std::string& name, hid_t native_type, const void* data, int64_t count);
Handle open_dataset(hid_t loc, const std::string& name);
int64_t dataset_length(hid_t dataset);
// Reads elements [offset, offset + count) of a 1-D dataset into `out`.
void read_range(hid_t dataset, hid_t native_type, int64_t offset, int64_t count, void* out);

}  // namespace titan::h5
