#include "trainer/checkpoint/checkpoint_hdf5.h"

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace titan::h5 {
namespace {

// HDF5 1.10 keeps a file whose close failed (its flush hit a full disk or a file size limit)
// in its table, and the library's own clean-up at process exit closes it again and crashes
// (SIGSEGV in H5F__close_cb) after titan has reported the failed save. titan closes every
// file it opens itself, so that clean-up has nothing to do: it is switched off before the
// library is first used (H5dont_atexit only works then).
const bool kNoHdf5AtExit = [] {
  H5dont_atexit();
  return true;
}();

// " (No space left on device)" for the errno a failed write left, or "".
std::string os_reason(int err) { return err ? std::string(" (") + std::strerror(err) + ")" : std::string(); }

std::string object_name(hid_t obj) {
  char buf[512] = {0};
  H5Iget_name(obj, buf, sizeof(buf) - 1);
  return buf;
}

// Attribute of `type` with a scalar (n < 0) or 1-D (n elements) dataspace.
void write_attr(hid_t obj, const std::string& name, hid_t type, const void* data, int64_t n) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  hsize_t dims[1] = {static_cast<hsize_t>(n < 0 ? 1 : n)};
  Handle space(n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, nullptr), H5Sclose);
  errno = 0;
  Handle attr(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  TITAN_CHECK(attr.valid() && H5Awrite(attr.get(), type, data) >= 0, "hdf5: cannot write attribute ", name,
              " on ", object_name(obj), os_reason(errno));
}

Handle open_attr(hid_t obj, const std::string& name) {
  TITAN_CHECK(H5Aexists(obj, name.c_str()) > 0, "hdf5: attribute ", name, " missing on ", object_name(obj));
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  TITAN_CHECK(a.valid(), "hdf5: cannot open attribute ", name, " on ", object_name(obj));
  return a;
}

// titan's largest attribute is a checksum table (one entry per 4 MiB block): far below this.
// A damaged file declaring more must not make us allocate it.
constexpr hssize_t kMaxAttrElements = hssize_t(1) << 24;

int64_t attr_elements(hid_t attr) {
  Handle space(H5Aget_space(attr), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  TITAN_CHECK(n >= 0 && n <= kMaxAttrElements, "hdf5: bad attribute dataspace (", n, " elements)");
  return n;
}

template <typename T>
std::vector<T> read_attr_array(hid_t obj, const std::string& name, hid_t type) {
  Handle a = open_attr(obj, name);
  std::vector<T> out(attr_elements(a.get()));
  if (!out.empty()) {
    TITAN_CHECK(H5Aread(a.get(), type, out.data()) >= 0, "hdf5: cannot read attribute ", name, " on ",
                object_name(obj));
  }
  return out;
}

// Silences HDF5's own error printing on this thread (we report errors ourselves).
void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

}  // namespace

Handle create_file(const std::string& path) {
  quiet();
  // HDF5 1.8+ object formats: the superblock, object headers and indexes carry checksums that
  // HDF5 verifies on read, so damaged metadata is reported instead of decoded (the default,
  // oldest formats have none; Debian's HDF5 1.10 overruns a heap buffer on some damaged
  // attribute messages, found by the checkpoint fuzz target). Files written before still load.
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  TITAN_CHECK(fapl.valid() && H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) >= 0,
              "hdf5: cannot set file format bounds for ", path);
  errno = 0;
  Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  TITAN_CHECK(f.valid(), "hdf5: cannot create ", path, os_reason(errno));
  return f;
}

Handle open_file_readonly(const std::string& path) {
  quiet();
  Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  TITAN_CHECK(f.valid(), "hdf5: cannot open ", path, " (missing, truncated or not an HDF5 file)");
  return f;
}

void close_file(Handle& file, const std::string& path) {
  if (!file.valid()) return;
  errno = 0;
  TITAN_CHECK(H5Fflush(file.get(), H5F_SCOPE_GLOBAL) >= 0, "hdf5: cannot flush ", path, os_reason(errno));
  file.reset();
}

Handle create_group(hid_t loc, const std::string& name) {
  Handle g(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  TITAN_CHECK(g.valid(), "hdf5: cannot create group ", name);
  return g;
}

Handle open_group(hid_t loc, const std::string& name) {
  TITAN_CHECK(exists(loc, name), "hdf5: group ", name, " missing in ", object_name(loc));
  Handle g(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose);
  TITAN_CHECK(g.valid(), "hdf5: cannot open group ", name);
  return g;
}

bool exists(hid_t loc, const std::string& name) { return H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0; }

std::vector<std::string> children(hid_t group) {
  H5G_info_t info;
  TITAN_CHECK(H5Gget_info(group, &info) >= 0, "hdf5: cannot list ", object_name(group));
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    TITAN_CHECK(n >= 0, "hdf5: cannot list ", object_name(group));
    std::string s(static_cast<size_t>(n) + 1, '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size(), H5P_DEFAULT);
    s.resize(static_cast<size_t>(n));
    out.push_back(s);
  }
  return out;
}

void set_attr(hid_t obj, const std::string& name, const std::string& value) {
  // Variable-length UTF-8 strings: h5py returns them as str.
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  const char* p = value.c_str();
  write_attr(obj, name, type.get(), &p, -1);
}

void set_attr(hid_t obj, const std::string& name, int64_t value) {
  write_attr(obj, name, H5T_NATIVE_INT64, &value, -1);
}

void set_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values) {
  write_attr(obj, name, H5T_NATIVE_INT64, values.data(), static_cast<int64_t>(values.size()));
}

void set_attr(hid_t obj, const std::string& name, const std::vector<uint32_t>& values) {
  write_attr(obj, name, H5T_NATIVE_UINT32, values.data(), static_cast<int64_t>(values.size()));
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

std::string attr_string(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  Handle ftype(H5Aget_type(a.get()), H5Tclose);
  TITAN_CHECK(H5Tget_class(ftype.get()) == H5T_STRING && H5Tis_variable_str(ftype.get()) > 0,
              "hdf5: attribute ", name, " is not a string");
  // H5Aread stores one pointer per element: more than one would overrun `p`.
  TITAN_CHECK(attr_elements(a.get()) == 1, "hdf5: attribute ", name, " on ", object_name(obj),
              " is not a single string");
  Handle mtype(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mtype.get(), H5T_VARIABLE);
  H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get()));
  char* p = nullptr;
  TITAN_CHECK(H5Aread(a.get(), mtype.get(), &p) >= 0 && p, "hdf5: cannot read attribute ", name);
  std::string s(p);
  H5free_memory(p);
  return s;
}

int64_t attr_int(hid_t obj, const std::string& name) {
  auto v = read_attr_array<int64_t>(obj, name, H5T_NATIVE_INT64);
  TITAN_CHECK(v.size() == 1, "hdf5: attribute ", name, " is not a scalar");
  return v[0];
}

std::vector<int64_t> attr_ints(hid_t obj, const std::string& name) {
  return read_attr_array<int64_t>(obj, name, H5T_NATIVE_INT64);
}

std::vector<uint32_t> attr_u32s(hid_t obj, const std::string& name) {
  return read_attr_array<uint32_t>(obj, name, H5T_NATIVE_UINT32);
}

Handle write_dataset(hid_t loc, const std::string& name, hid_t native_type, const void* data, int64_t count) {
  hsize_t dims[1] = {static_cast<hsize_t>(count)};
  Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  errno = 0;
  Handle ds(H5Dcreate2(loc, name.c_str(), native_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
            H5Dclose);
  TITAN_CHECK(ds.valid(), "hdf5: cannot create dataset ", name, os_reason(errno));
  if (count > 0) {
    TITAN_CHECK(H5Dwrite(ds.get(), native_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0,
                "hdf5: cannot write dataset ", name, os_reason(errno));
  }
  return ds;
}

Handle open_dataset(hid_t loc, const std::string& name) {
  TITAN_CHECK(exists(loc, name), "hdf5: dataset ", name, " missing in ", object_name(loc));
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  TITAN_CHECK(ds.valid(), "hdf5: cannot open dataset ", name);
  return ds;
}

int64_t dataset_length(hid_t dataset) {
  Handle space(H5Dget_space(dataset), H5Sclose);
  TITAN_CHECK(H5Sget_simple_extent_ndims(space.get()) == 1, "hdf5: ", object_name(dataset), " is not 1-D");
  return H5Sget_simple_extent_npoints(space.get());
}

void read_range(hid_t dataset, hid_t native_type, int64_t offset, int64_t count, void* out) {
  if (count == 0) return;
  Handle fspace(H5Dget_space(dataset), H5Sclose);
  hsize_t start[1] = {static_cast<hsize_t>(offset)}, n[1] = {static_cast<hsize_t>(count)};
  TITAN_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, n, nullptr) >= 0,
              "hdf5: bad range [", offset, ", ", offset + count, ") of ", object_name(dataset));
  Handle mspace(H5Screate_simple(1, n, nullptr), H5Sclose);
  TITAN_CHECK(H5Dread(dataset, native_type, mspace.get(), fspace.get(), H5P_DEFAULT, out) >= 0,
              "hdf5: cannot read [", offset, ", ", offset + count, ") of ", object_name(dataset),
              " (file truncated or damaged)");
}

}  // namespace titan::h5
